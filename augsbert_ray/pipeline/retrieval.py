"""The steps of ``scenario: retrieval`` (the RETRIEVAL list in scenarios.py): hard negatives mined for the gold
pairs and a cross-encoder re-ranker fitted on them (the teacher), the gold-only SBERT (MNRL with the hard negatives),
first-stage candidates (BM25, dense) for the unlabeled queries, every (query, candidate) pair labeled by the teacher
on the Ray Data labeling engine, the student distilled from those labels (MarginMSE or listwise KL), KNRM, and the
evaluation of every ranker. Each fit goes through the run's ledger, so ``--resume`` reuses the finished ones; the
mined negatives and the candidates are kept in the run directory and reused too, and labeling skips the shards
already written."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from augsbert_ray.config import JobSpec
from augsbert_ray.evaluation.retrieval import RankerModels, RetrievalEvaluation, document_texts, evaluate_retrieval, most_excluded
from augsbert_ray.files import atomic_path, atomic_write_text
from augsbert_ray.labeling import LabelJob, Teacher, TeacherMember, label_dataset, labels_in_process
from augsbert_ray.labeling.engine import MANIFEST, save_pairs
from augsbert_ray.models import resolve_model
from augsbert_ray.pipeline.context import FitRecord, Fitted, RunContext
from augsbert_ray.pipeline.retrieval_data import RetrievalData
from augsbert_ray.pipeline.teacher import copy_trained_model
from augsbert_ray.runtime import configure_torch_threads, log
from augsbert_ray.sampling.queries import bm25_search, dense_search, embed_texts, hits_by_query
from augsbert_ray.training.distillation import distillation_rows, fit_distilled_student, fit_gold_baseline
from augsbert_ray.training.knrm import fit_knrm
from augsbert_ray.training.reranker import MinedGold, fit_reranker, mine_negatives, relevant_pairs, reranker_pairs

CANDIDATES = "retrieval"  # the candidates' name under candidates/ and silver/
MINED = "mined.json"
GOLD_SBERT = "gold_sbert"  # the sbert row's model


def retrieval_dir(ctx: RunContext) -> Path:
    """RUN_DIR/retrieval: the mined gold files and the student's training rows."""
    return ctx.layout.root / "retrieval"


def student_name(spec: JobSpec) -> str:
    assert spec.retrieval is not None
    return f"augsbert_{spec.retrieval.student_loss}"


# -- the teacher --------------------------------------------------------------------------------------------------


def gold_tables(rdata: RetrievalData) -> pa.Table:
    """The gold (query, relevant document) pairs as text: ``query_id``, ``query``, ``doc_id``, ``document``."""
    gold = rdata.gold
    queries = pa.table({"query_id": list(gold.queries.ids), "text": list(gold.queries.texts)})
    corpus = pa.table({"doc_id": list(gold.corpus.ids), "text": document_texts(gold.corpus)})
    judged = [(query, doc, grade) for query in gold.queries.ids for doc, grade in gold.qrels.relevant(query).items()]
    qrels = pa.table({"query_id": [q for q, _, _ in judged], "doc_id": [d for _, d, _ in judged],
                      "relevance": pa.array([g for _, _, g in judged], pa.int64())})
    return relevant_pairs(queries, corpus, qrels)


def without_excluded(triplets: pa.Table, rdata: RetrievalData, wanted: int) -> pa.Table:
    """Mined negatives less each query's excluded documents (in ArguAna's counter task the query's own point, which
    the miner finds nearest), at most ``wanted`` per gold pair."""
    gold, texts = rdata.gold, dict(zip(rdata.gold.corpus.ids, document_texts(rdata.gold.corpus)))
    banned: dict[str, set[str]] = {}
    for query, docs in gold.excluded.items():  # by text: the miner returns texts
        banned.setdefault(gold.queries.text_of[query], set()).update(texts[doc] for doc in docs)
    frame = triplets.to_pandas()
    frame = frame[[negative not in banned.get(query, ()) for query, negative in zip(frame["query"], frame["negative"])]]
    frame = frame.groupby(["query", "positive"], sort=False).head(wanted)
    # plain strings: the miner's are large_string, the gold pairs' string, and reranker_pairs concatenates both
    return pa.table({name: pa.array(frame[name].tolist(), pa.string()) for name in ("query", "positive", "negative")})


def mine_gold(ctx: RunContext, rdata: RetrievalData) -> MinedGold:
    """Hard negatives for the gold pairs (the zero-shot model, positives excluded), written as the re-ranker's
    labeled pairs and the gold triplets; a resumed run reuses the files of an earlier attempt."""
    spec, rspec = ctx.spec, ctx.spec.retrieval
    assert rspec is not None
    out = retrieval_dir(ctx) / "gold"
    if (out / MINED).is_file():
        counts = json.loads((out / MINED).read_text(encoding="utf-8"))
        log.info("resume: reusing the mined gold negatives in %s", out)
        return MinedGold(out / "reranker.parquet", out / "triplets.parquet", counts["positives"], counts["negatives"])
    pairs = gold_tables(rdata)
    extra = most_excluded(rdata.gold)  # mined beyond the wanted number, since the excluded ones are dropped after
    log.info("mining %d hard negatives for each of %d gold pairs among %d documents", rspec.hard_negatives, pairs.num_rows,
             len(rdata.gold.corpus))
    triplets = mine_negatives(pairs, resolve_model(spec.evaluation.zero_shot_model), document_texts(rdata.gold.corpus),
                              num_negatives=rspec.hard_negatives + extra, seed=spec.seed,
                              max_seq_length=spec.bi_encoder.max_seq_length)
    triplets = without_excluded(triplets, rdata, rspec.hard_negatives)
    labeled = reranker_pairs(pairs, triplets)
    out.mkdir(parents=True, exist_ok=True)
    for table, name in ((labeled, "reranker.parquet"), (triplets, "triplets.parquet")):
        with atomic_path(out / name) as tmp:
            pq.write_table(table, tmp)
    positives = int(sum(labeled.column("label").to_pylist()))
    mined = MinedGold(out / "reranker.parquet", out / "triplets.parquet", positives, labeled.num_rows - positives)
    atomic_write_text(out / MINED, json.dumps({"positives": mined.positives, "negatives": mined.negatives,
                                               "triplets": triplets.num_rows}))
    return mined


def train_reranker(ctx: RunContext, rdata: RetrievalData) -> tuple[Teacher, list[FitRecord], MinedGold]:
    """The teacher: a cross-encoder re-ranker fitted on the gold pairs and their mined hard negatives (or
    ``cross_encoder.trained``, copied), into models/reranker."""
    spec, name = ctx.spec, "reranker"
    mined = mine_gold(ctx, rdata)
    model_dir = ctx.layout.model(name)

    def fit() -> Fitted:
        if spec.cross_encoder.trained:
            return copy_trained_model(Path(spec.cross_encoder.trained).expanduser(), model_dir, name)
        metrics = fit_reranker(spec.cross_encoder, resolve_model(spec.cross_encoder.model), mined.reranker_file, spec.training,
                               spec.seed, ctx.layout.ray_train, model_dir, name)
        return Fitted.from_metrics(int(metrics["train_rows"]), metrics)

    record = ctx.fit_once(name, fit)
    teacher = Teacher((TeacherMember("cross_encoder", str(record.model_dir)),))
    teacher.save(ctx.layout.models)
    return teacher, [record], mined


def train_gold_sbert(ctx: RunContext, mined: MinedGold) -> FitRecord:
    """The gold-only SBERT (the ``sbert`` row): MultipleNegativesRankingLoss on the gold triplets (hard negatives), into
    models/gold_sbert. (Not models/sbert: --force-resume keeps an in-domain SBERT whose inputs did not change, and this
    one's inputs are the retrieval section's.)"""
    spec = ctx.spec

    def fit() -> Fitted:
        metrics = fit_gold_baseline(spec.bi_encoder, resolve_model(spec.bi_encoder.model), mined.triplet_file, spec.training,
                                    spec.seed, ctx.layout.ray_train, ctx.layout.model(GOLD_SBERT), GOLD_SBERT)
        return Fitted.from_metrics(int(metrics["train_rows"]), metrics)

    return ctx.fit_once(GOLD_SBERT, fit)


# -- candidates and their labels ----------------------------------------------------------------------------------


def dense_candidates(
    model: str, corpus: list[str], queries: list[str], depth: int, threads: int, gpu: bool, max_seq_length: int | None,
) -> tuple[Any, Any]:
    """A Ray task's work: embed the corpus and the queries, then search with faiss."""
    configure_torch_threads(threads)
    embedded = [embed_texts(model, texts, threads, gpu, max_seq_length=max_seq_length) for texts in (corpus, queries)]
    return dense_search(*embedded, depth)


def interleaved(runs: list[dict[str, float]], keep: int) -> list[tuple[str, int, float]]:
    """Up to ``keep`` (doc id, run index, score) taken in turn from each run's ranking, a document once."""
    ranked = [sorted(run.items(), key=lambda item: (-item[1], item[0])) for run in runs]
    taken: dict[str, tuple[int, float]] = {}
    for rank in range(max((len(r) for r in ranked), default=0)):
        for source, ranking in enumerate(ranked):
            if rank < len(ranking) and ranking[rank][0] not in taken and len(taken) < keep:
                taken[ranking[rank][0]] = (source, ranking[rank][1])
    return [(doc, source, score) for doc, (source, score) in taken.items()]


def find_candidates(ctx: RunContext, rdata: RetrievalData) -> pa.Table:
    """Each unlabeled query's ``candidates_per_query`` documents by BM25, dense search with the zero-shot model, or
    both in turn, its excluded documents left out: ``query_id``, ``query``, ``doc_id``, ``doc``, ``source``,
    ``retrieval_score``. Saved as candidates/retrieval.parquet, which a resumed run reads back."""
    spec, rspec = ctx.spec, ctx.spec.retrieval
    assert rspec is not None
    path = ctx.layout.candidates(CANDIDATES)
    if path.is_file():
        log.info("resume: reusing the candidates in %s", path)
        return pq.read_table(path)
    unlabeled, k = rdata.unlabeled, rspec.candidates_per_query
    texts, depth = document_texts(unlabeled.corpus), k + most_excluded(unlabeled)
    sources = rspec.candidates.split("+")
    runs: dict[str, dict[str, dict[str, float]]] = {}
    if "dense" in sources:
        search = ray.remote(num_cpus=spec.evaluation.cpus, num_gpus=spec.evaluation.gpus)(dense_candidates)
        ref = search.remote(resolve_model(spec.evaluation.zero_shot_model), texts, list(unlabeled.queries.texts), depth,
                            max(1, int(spec.evaluation.cpus)), spec.evaluation.gpus > 0, spec.bi_encoder.max_seq_length)
    if "bm25" in sources:
        rows, scores = bm25_search(texts, unlabeled.queries.texts, depth, max(1, int(spec.sampling.search_cpus)))
        runs["bm25"] = hits_by_query(rows, scores, unlabeled.queries.ids, unlabeled.corpus.ids, unlabeled.excluded, k, positive_only=True)
    if "dense" in sources:
        rows, scores = ray.get(ref)
        runs["dense"] = hits_by_query(rows, scores, unlabeled.queries.ids, unlabeled.corpus.ids, unlabeled.excluded, k)
    doc_text = dict(zip(unlabeled.corpus.ids, texts))
    columns: dict[str, list[Any]] = {name: [] for name in ("query_id", "query", "doc_id", "doc", "source", "retrieval_score")}
    for query, query_text in zip(unlabeled.queries.ids, unlabeled.queries.texts):
        for doc, source, score in interleaved([runs[name][query] for name in sources], k):
            for name, value in zip(columns, (query, query_text, doc, doc_text[doc], sources[source], score)):
                columns[name].append(value)
    table = pa.table({**columns, "retrieval_score": pa.array(columns["retrieval_score"], pa.float32())})
    save_pairs(table, path, spec.labeling.shard_rows)  # as label_dataset saves it: the same file on resume
    log.info("candidates: %d pairs for %d unlabeled queries (%s)", table.num_rows, len(unlabeled.queries), rspec.candidates)
    return table


@dataclass(frozen=True)
class RetrievalSilver:
    """The teacher's labels of the candidates: their directory, the pairs in, labeled and rejected, and the
    labeling throughput (``pairs_per_second`` over the shards' own seconds, resumed shards included)."""

    directory: Path
    candidates: int
    labeled: int
    rejected: int
    labeler: str
    seconds: float

    def counts(self) -> dict[str, Any]:
        speed = round(self.labeled / self.seconds, 2) if self.seconds else None
        return {"candidates": self.candidates, "labeled": self.labeled, "label_rejected": self.rejected,
                "labeler": self.labeler, "label_seconds": round(self.seconds, 2), "pairs_per_second": speed}

    def table(self) -> pa.Table:
        return pq.read_table(self.directory)


def label_candidates(ctx: RunContext, candidates: pa.Table, teacher: Teacher) -> RetrievalSilver:
    """Every (query, candidate) pair scored by the teacher on the Ray Data labeling engine into silver/retrieval/
    (resumable shards; ``score``, ``labeler`` and ``strategy`` added to the candidates' columns)."""
    spec, rspec = ctx.spec, ctx.spec.retrieval
    assert rspec is not None
    output = ctx.layout.labeled(CANDIDATES)
    job = LabelJob(teacher, spec.labeling, text_columns=("query", "doc"), strategy=rspec.candidates, onnx_cache=ctx.layout.onnx_cache)
    here = labels_in_process(spec.labeling, spec.ray.address)
    log.info("labeling %d (query, candidate) pairs with %s%s", candidates.num_rows, job.labeler, " in this process" if here else "")
    result = label_dataset(candidates, output, job, ctx.layout.candidates(CANDIDATES), here)
    shards = json.loads((output / MANIFEST).read_text(encoding="utf-8"))["shards"].values()
    seconds = sum(float(shard.get("seconds", 0.0)) for shard in shards)
    silver = RetrievalSilver(output, result.pairs_in, result.labeled, result.totals["rejected"], job.labeler, seconds)
    warn_if_flat(silver)
    return silver


def warn_if_flat(silver: RetrievalSilver, least: float = 0.01) -> None:
    """Warn when the teacher's scores barely vary: a re-ranker that has not learned to rank (too few steps on too
    little gold) gives the student margins of noise. Read from the labels themselves: no pair is scored again."""
    scores = pq.read_table(silver.directory, columns=["score"]).column("score").to_numpy()
    if len(scores) > 1 and float(np.std(scores)) < least:  # a re-ranker that learned spreads them over much of [0, 1]
        log.warning("the teacher's %d scores have a standard deviation of only %.4f (%.4f to %.4f): it has not learned to "
                    "rank, and the student would learn noise; give it more steps or gold (cross_encoder.epochs, "
                    "retrieval.train_queries, retrieval.hard_negatives) or a trained one (cross_encoder.trained)",
                    len(scores), float(np.std(scores)), float(scores.min()), float(scores.max()))


# -- the students -------------------------------------------------------------------------------------------------


def distil_student(ctx: RunContext, silver: RetrievalSilver, sbert: FitRecord) -> FitRecord:
    """The AugSBERT student, distilled from the teacher's labels with MarginMSE or listwise KL (the positive: each
    query's best-scored candidate; the negatives: others at random, as GPL), from the gold SBERT or the base model."""
    spec, rspec, name = ctx.spec, ctx.spec.retrieval, student_name(ctx.spec)
    assert rspec is not None
    rows_file = retrieval_dir(ctx) / f"{name}_rows.parquet"

    def fit() -> Fitted:
        rows = distillation_rows(silver.table(), rspec.student_loss, rspec.student_negatives, seed=spec.seed)
        rows_file.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(rows_file) as tmp:
            pq.write_table(rows, tmp)
        start = str(sbert.model_dir) if rspec.student_start == "sbert" else resolve_model(spec.bi_encoder.model)
        log.info("distilling %d %s rows into %s (from %s)", rows.num_rows, rspec.student_loss, name, rspec.student_start)
        metrics = fit_distilled_student(spec.bi_encoder, start, rows_file, rspec.student_loss, spec.training, spec.seed,
                                        ctx.layout.ray_train, ctx.layout.model(name), name)
        return Fitted.from_metrics(int(metrics["train_rows"]), metrics)

    return ctx.fit_once(name, fit)


def knrm_on(spec: JobSpec) -> bool:
    return spec.retrieval is not None and spec.retrieval.knrm


def train_knrm(ctx: RunContext, mined: MinedGold, student: FitRecord) -> FitRecord:
    """KNRM over the student's contextual token embeddings, fitted on the gold triplets (the thesis's KNRM BERT)."""
    spec = ctx.spec

    def fit() -> Fitted:
        metrics = fit_knrm(spec.bi_encoder, str(student.model_dir), mined.triplet_file, spec.training, spec.seed,
                           ctx.layout.ray_train, ctx.layout.model("knrm"), "knrm")
        return Fitted.from_metrics(int(metrics["train_rows"]), metrics)

    return ctx.fit_once("knrm", fit)


# -- evaluation ---------------------------------------------------------------------------------------------------


def evaluate_rankers(
    ctx: RunContext, rdata: RetrievalData, teacher_fits: list[FitRecord], sbert: FitRecord, student: FitRecord, knrm: FitRecord | None,
) -> RetrievalEvaluation:
    """Every ranker over the dev and test corpora (evaluation.retrieval)."""
    spec, rspec = ctx.spec, ctx.spec.retrieval
    assert rspec is not None
    dense = {"zero_shot": resolve_model(spec.evaluation.zero_shot_model), "sbert": str(sbert.model_dir),
             student.name: str(student.model_dir)}
    models = RankerModels(dense, student.name, str(teacher_fits[0].model_dir), str(knrm.model_dir) if knrm else None,
                          str(ctx.layout.onnx_cache), spec.bi_encoder.max_seq_length)
    return evaluate_retrieval(rdata.dev, rdata.test, models, rspec.depth, rspec.rerank_depth, spec.evaluation.cpus,
                              spec.evaluation.gpus, rspec.aggregation)


def fits_summary(fits: list[FitRecord | None]) -> dict[str, int | None]:
    """metrics.json ``counts.trained_on``: each fit's training rows."""
    return {fit.name: fit.trained_on for fit in fits if fit is not None}

