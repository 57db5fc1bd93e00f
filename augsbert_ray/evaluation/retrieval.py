"""The retrieval scenario's evaluation: every ranker over the whole corpus of the dev and test tasks, scored with one
metric implementation (``retrieval_metrics``): nDCG@10, MRR@10, MAP@100 and Recall@100.

Rows: ``bm25`` (bm25s), each bi-encoder by faiss inner product of unit embeddings (``zero_shot``, ``sbert``,
``augsbert_<loss>``), the teacher re-ranking BM25's top ``rerank_depth`` (``teacher_rerank``, through the cross-encoder
``PairScorer``), KNRM re-ranking the same (``knrm``), and two fusions of BM25, the teacher, the student (and KNRM):
``aggregation`` (a linear fit on dev over min-max normalized scores, the thesis's) and ``rrf``. Each model ranks in a
Ray task of its own (``cpus``/``gpus`` each), so that they run side by side, on a cluster's workers too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import ray

from augsbert_ray.data.retrieval import RetrievalCorpus, RetrievalSet
from augsbert_ray.evaluation.retrieval_metrics import evaluate_run, fit_linear_aggregation, reciprocal_rank_fusion
from augsbert_ray.runtime import configure_torch_threads, log
from augsbert_ray.sampling.queries import bm25_search, dense_search, embed_texts, hits_by_query

Run = dict[str, dict[str, float]]
SPLITS = ("dev", "test")


def document_texts(corpus: RetrievalCorpus) -> list[str]:
    """The text a model reads of each document: its title, where it has one, before its text (as BEIR's models read)."""
    if corpus.titles is None:
        return list(corpus.texts)
    return [f"{title} {text}" if title.strip() else text for title, text in zip(corpus.titles, corpus.texts)]


def most_excluded(rset: RetrievalSet) -> int:
    return max((len(docs) for docs in rset.excluded.values()), default=0)


def bm25_run(rset: RetrievalSet, depth: int, threads: int = 1) -> Run:
    """BM25's top ``depth`` documents of each query (its excluded ones and those sharing no term left out)."""
    rows, scores = bm25_search(document_texts(rset.corpus), rset.queries.texts, depth + most_excluded(rset), threads)
    return hits_by_query(rows, scores, rset.queries.ids, rset.corpus.ids, rset.excluded, depth, positive_only=True)


def dense_runs(model: str, sets: list[RetrievalSet], depth: int, threads: int = 1, gpu: bool = False,
               max_seq_length: int | None = None) -> list[Run]:
    """A bi-encoder's top ``depth`` documents of each query of each task, by faiss inner product (exact), each text
    cut to ``max_seq_length`` tokens (None: the model's own)."""
    configure_torch_threads(threads)
    runs = []
    for rset in sets:
        corpus = embed_texts(model, document_texts(rset.corpus), threads, gpu, max_seq_length=max_seq_length)
        queries = embed_texts(model, rset.queries.texts, threads, gpu, max_seq_length=max_seq_length)
        rows, scores = dense_search(corpus, queries, depth + most_excluded(rset))
        runs.append(hits_by_query(rows, scores, rset.queries.ids, rset.corpus.ids, rset.excluded, depth))
    return runs


def rerank_runs(kind: Literal["cross_encoder", "knrm"], model: str, sets: list[RetrievalSet], first: list[Run], depth: int,
                threads: int = 1, gpu: bool = False, onnx_cache: str | None = None) -> list[Run]:
    """Each query's top ``depth`` documents of a first-stage run, scored again by a cross-encoder or KNRM (a
    cross-encoder on a CPU through ONNX Runtime at fp32, its export kept in ``onnx_cache``: labeling's, reused)."""
    configure_torch_threads(threads)
    if kind == "knrm":
        from augsbert_ray.training.knrm import KNRM

        knrm = KNRM.from_pretrained(model)
        if gpu:
            knrm = knrm.to("cuda")
        score = knrm.score
    else:
        from augsbert_ray.scoring import CrossEncoderScorer

        # the labeling engine's choice: ONNX Runtime on a CPU (1.7-1.9x torch there), torch on a GPU
        score = CrossEncoderScorer(model, 32, threads=threads, runtime="torch" if gpu else "auto",
                                   cache_dir=Path(onnx_cache) if onnx_cache else None, gpu=gpu).score
    runs = []
    for rset, run in zip(sets, first):
        texts, queries = dict(zip(rset.corpus.ids, document_texts(rset.corpus))), rset.queries.text_of
        pairs = [(query, doc) for query, hits in run.items() for doc in sorted(hits, key=lambda d: (-hits[d], d))[:depth]]
        scores = score([queries[q] for q, _ in pairs], [texts[d] for _, d in pairs]) if pairs else []
        reranked: Run = {query: {} for query in run}
        for (query, doc), value in zip(pairs, scores):
            reranked[query][doc] = float(value)
        runs.append(reranked)
    return runs


@dataclass(frozen=True)
class RankerModels:
    """The models a retrieval run ranks with.

    Attributes:
        dense: Row name -> bi-encoder (directory or Hugging Face id), e.g. ``{"zero_shot": ..., "sbert": ...}``.
        student: The row of the student among ``dense`` (an input of the fusions).
        teacher: The cross-encoder re-ranker's directory.
        knrm: KNRM's directory (``KNRM.from_pretrained``), or None.
        onnx_cache: Where the teacher's ONNX export is kept (a run's silver/_onnx); None: beside the model.
        max_seq_length: Tokens per text of every bi-encoder (the zero-shot one too, so that all read as much as the
            fitted ones were trained on); None: each model's own.
    """

    dense: dict[str, str]
    student: str
    teacher: str
    knrm: str | None = None
    onnx_cache: str | None = None
    max_seq_length: int | None = None


@dataclass
class RetrievalEvaluation:
    """Each row's metrics per split (``metrics[split][row]``: ``ndcg@10``, ``mrr@10``, ``map@100``, ``recall@100``,
    ``queries``, ``missing``) and the fitted aggregation."""

    metrics: dict[str, dict[str, dict[str, float | int]]]
    aggregation: dict[str, Any] = field(default_factory=dict)

    def main(self, split: str) -> dict[str, float]:
        """nDCG@10 of each row on ``split``."""
        return {row: float(values["ndcg@10"]) for row, values in self.metrics[split].items()}


def evaluate_retrieval(
    dev: RetrievalSet, test: RetrievalSet, models: RankerModels, depth: int = 100, rerank_depth: int = 100,
    cpus: float = 1, gpus: float = 0, aggregation: Literal["regression", "grid"] = "regression",
) -> RetrievalEvaluation:
    """Rank the dev and test corpora with every ranker and score the runs (see the module's doc).

    Args:
        dev: The dev task: the aggregation's weights are fitted on it.
        test: The test task.
        models: The bi-encoders, the teacher and KNRM.
        depth: Documents per query of the first-stage rankers.
        rerank_depth: BM25's top documents re-ranked by the teacher and KNRM.
        cpus: CPUs of each model's Ray task (its torch threads).
        gpus: GPUs of each model's Ray task.
        aggregation: ``regression`` (least squares, the thesis) or ``grid`` (weights best for dev nDCG@10).

    Returns:
        The metrics of each row on dev and test, and the aggregation's weights.

    Example:
        ::

            models = RankerModels({"zero_shot": resolve_model("minilm"), "sbert": "runs/r/models/sbert"}, "sbert",
                                  "runs/r/models/reranker")
            evaluate_retrieval(data.dev, data.test, models).main("test")["bm25"]
    """
    sets, threads, gpu = [dev, test], max(1, int(cpus)), gpus > 0
    dense = ray.remote(num_cpus=cpus, num_gpus=gpus)(dense_runs)
    rerank = ray.remote(num_cpus=cpus, num_gpus=gpus)(rerank_runs)
    # every model's task is started before BM25 runs here: they overlap
    dense_refs = {row: dense.remote(model, sets, depth, threads, gpu, models.max_seq_length) for row, model in models.dense.items()}
    bm25 = [bm25_run(rset, depth, threads) for rset in sets]
    rerank_refs = {"teacher_rerank": rerank.remote("cross_encoder", models.teacher, sets, bm25, rerank_depth, threads, gpu,
                                                    models.onnx_cache)}
    if models.knrm is not None:
        rerank_refs["knrm"] = rerank.remote("knrm", models.knrm, sets, bm25, rerank_depth, threads, gpu)
    runs: dict[str, list[Run]] = {"bm25": bm25}
    for row, ref in {**dense_refs, **rerank_refs}.items():
        runs[row] = ray.get(ref)
        log.info("evaluation: %s ranked dev and test", row)
    fused = ["bm25", "teacher_rerank", models.student, *(["knrm"] if models.knrm is not None else [])]
    fit = fit_linear_aggregation({row: runs[row][0] for row in fused}, dev.qrels, dev.excluded, method=aggregation)
    runs["aggregation"] = [fit.apply({row: runs[row][i] for row in fused}, rset.excluded) for i, rset in enumerate(sets)]
    runs["rrf"] = [reciprocal_rank_fusion([runs[row][i] for row in fused]) for i in range(len(sets))]
    metrics = {split: {row: evaluate_run(split_runs[i], rset.qrels, rset.excluded).as_dict() for row, split_runs in runs.items()}
               for i, (split, rset) in enumerate(zip(SPLITS, sets))}
    return RetrievalEvaluation(metrics, {**asdict(fit), "fused": fused})
