"""Internal: the retrieval section (RetrievalSpec) of ``scenario: retrieval``: where the corpus, queries and qrels
come from, which queries are gold and which unlabeled, how candidates are found and labeled, how the student
learns, and how deep the rankers are evaluated."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from augsbert_ray.config.base import _Strict

RetrievalSource = Literal["arguana", "beir", "files"]
CandidateSearch = Literal["bm25", "dense", "bm25+dense"]
StudentLoss = Literal["margin_mse", "kl"]
RETRIEVAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".pq")


def _existing_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ValueError(f"{what} file not found: {path}")
    if path.suffix not in RETRIEVAL_SUFFIXES:
        raise ValueError(f"{what} {path}: use .jsonl or .parquet")
    return path


class RetrievalSplitFiles(_Strict):
    """One split of ``source: files``: a corpus (``_id``/``id``, ``text``, optional ``title``, ``group``), its queries
    (``_id``/``id``, ``text``, optional ``group``) as JSONL or Parquet, and BEIR's qrels TSV
    (``query-id<TAB>corpus-id<TAB>score``)."""

    corpus: Path
    queries: Path
    qrels: Path

    @field_validator("corpus", "queries")
    @classmethod
    def _readable(cls, path: Path) -> Path:
        return _existing_file(path, "the")

    @field_validator("qrels")
    @classmethod
    def _qrels_exist(cls, path: Path) -> Path:
        if not path.is_file():
            raise ValueError(f"qrels file not found: {path}")
        return path


class RetrievalFilesSpec(_Strict):
    """The splits of ``source: files``: train (its judged queries give the gold, and with ``unlabeled: rest`` the
    unlabeled queries), test, and optionally dev (else dev and test are halves of test)."""

    train: RetrievalSplitFiles
    test: RetrievalSplitFiles
    dev: RetrievalSplitFiles | None = None


class RetrievalSpec(_Strict):
    """The ``retrieval`` section: a corpus with queries and qrels, few gold queries, many unlabeled ones.

    Example:
        >>> spec = RetrievalSpec(task="premise", train_queries=300, candidates_per_query=20)
        >>> spec.source, spec.student_loss, spec.train_name, spec.test_name
        ('arguana', 'margin_mse', 'training', 'validation')
    """

    source: RetrievalSource = Field(
        "arguana", description="arguana: the ArguAna counterargs tree (data dir's arguana/, or 'path'); beir: a folder in "
        "BEIR's layout ('path'); files: corpus, queries and qrels per split ('files')."
    )
    task: Literal["counter", "premise"] = Field(
        "counter", description="ArguAna's task: counter (a point -> its counter) or premise (a conclusion -> its premise)."
    )
    path: Path | None = Field(None, description="The ArguAna root (default: <data dir>/arguana) or the BEIR folder.")
    files: RetrievalFilesSpec | None = Field(None, description="source: files: the train, test (and dev) files.")
    train_split: str | None = Field(
        None, description="The split the gold queries come from: default ArguAna's training, BEIR's qrels train."
    )
    test_split: str | None = Field(None, description="The split that is evaluated: default ArguAna's validation, BEIR's test.")
    dev_split: str | None = Field(
        None, description="A split of its own for dev; None: dev and test are halves of test_split, by group (seeded)."
    )
    split_seed: int | None = Field(None, ge=0, description="Seeds the dev/test halves; default: the job's seed.")
    dev_fraction: float = Field(0.5, gt=0, lt=1, description="The share of test_split's groups that go to dev.")
    train_queries: int | None = Field(300, gt=0, description="Gold train queries (a seeded subset); null: all judged ones.")
    unlabeled: Literal["rest", "distant"] | Path = Field(
        "rest", description="rest: the judged train queries not used as gold, their judgements ignored; distant: a "
        "query from each train document's first line (or title), its rest the document; or a queries file (JSONL/Parquet)."
    )
    distant_source: Literal["first_line", "title"] = Field("first_line", description="unlabeled: distant: where a query comes from.")
    unlabeled_queries: int | None = Field(None, gt=0, description="A seeded subset of that many unlabeled queries; null: all.")
    eval_queries: int | None = Field(None, gt=0, description="A seeded subset of that many dev and test queries each (the corpus stays whole).")
    candidates: CandidateSearch = Field(
        "bm25+dense", description="First-stage search for the unlabeled queries: BM25, dense (the zero-shot model, faiss), "
        "or both interleaved."
    )
    candidates_per_query: int = Field(20, ge=2, description="Documents per unlabeled query that the teacher labels.")
    hard_negatives: int = Field(4, gt=0, description="Negatives mined per gold pair (zero-shot model, gold documents excluded).")
    student_loss: StudentLoss = Field("margin_mse", description="margin_mse (GPL's MarginMSE) or kl (listwise DistillKLDivLoss).")
    student_negatives: int = Field(4, gt=0, description="Negatives per unlabeled query in the student's rows (kl: the list's width - 1).")
    student_start: Literal["sbert", "base"] = Field(
        "sbert", description="The student's starting point: the gold-only SBERT (gold, then silver, as AugSBERT) or the "
        "untrained bi_encoder.model (silver alone, as GPL)."
    )
    knrm: bool = Field(True, description="Fit KNRM over the student's token embeddings on the gold triplets, as a re-ranker.")
    depth: int = Field(100, gt=0, description="Documents each first-stage ranker returns per query (metrics go to @100).")
    rerank_depth: int = Field(100, gt=0, description="BM25's top documents the teacher and KNRM re-rank per query.")
    aggregation: Literal["regression", "grid"] = Field(
        "regression", description="The linear aggregation's fit on dev: least squares (the thesis) or a weight grid on dev nDCG@10."
    )

    @field_validator("unlabeled")
    @classmethod
    def _queries_file(cls, value: str | Path) -> str | Path:
        if isinstance(value, Path):
            if not value.exists() and value.suffix not in RETRIEVAL_SUFFIXES:
                raise ValueError(f"expected rest, distant or a queries file (.jsonl or .parquet), got {str(value)!r}")
            return _existing_file(value, "the unlabeled queries")
        return value

    @model_validator(mode="after")
    def _source_fits(self) -> "RetrievalSpec":
        if self.source == "files" and self.files is None:
            raise ValueError("source: files needs 'files' with train and test (corpus, queries, qrels each)")
        if self.source != "files" and self.files is not None:
            raise ValueError(f"'files' is for source: files, not {self.source}")
        if self.source == "beir" and self.path is None:
            raise ValueError("source: beir needs 'path', the folder with corpus.jsonl, queries.jsonl and qrels/")
        if self.path is not None and not self.path.is_dir():
            raise ValueError(f"path {self.path}: no such folder")
        if self.student_loss == "kl" and self.student_negatives >= self.candidates_per_query:
            raise ValueError(f"student_negatives ({self.student_negatives}): kl lists a positive and that many negatives "
                             f"from each query's {self.candidates_per_query} candidates; lower it or raise candidates_per_query")
        if self.rerank_depth > self.depth:
            raise ValueError(f"rerank_depth ({self.rerank_depth}) exceeds depth ({self.depth}), BM25's documents per query")
        return self

    @property
    def train_name(self) -> str:
        """The train split's name (ArguAna's folder or BEIR's qrels file)."""
        return self.train_split or ("train" if self.source == "beir" else "training")

    @property
    def test_name(self) -> str:
        return self.test_split or ("test" if self.source == "beir" else "validation")
