"""Ranking metrics over a whole corpus (nDCG@k, MRR@k, MAP@k, Recall@k) and the fusion of several rankers:
reciprocal rank fusion, and a linear aggregation of min-max normalized scores fitted on dev (the thesis in seeds/).

A run is, per query id, either a ranked list of doc ids (best first) or a {doc id: score} mapping; a mapping is
ranked by score descending, ties by doc id ascending (as sentence-transformers' InformationRetrievalEvaluator
does), so a run gives one ranking whatever its dict order. Metrics are percentages (0-100), averaged over the
queries that have a relevant doc in the qrels (grade above 0); such a query missing from the run scores 0.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from augsbert_ray.data.retrieval import Qrels
from augsbert_ray.evaluation.metrics import UnusableScores

Ranking = Sequence[str] | Mapping[str, float]
Run = Mapping[str, Ranking]
QrelsLike = Qrels | Mapping[str, Mapping[str, int]]
DEFAULT_CUTOFFS: tuple[tuple[str, int], ...] = (("ndcg", 10), ("mrr", 10), ("map", 100), ("recall", 100))


def ranked_ids(ranking: Ranking, excluded: Collection[str] = (), depth: int | None = None) -> list[str]:
    """The doc ids best first: a list as given (a repeat dropped, the first kept), a mapping by score descending
    and doc id ascending; ``excluded`` ids left out (before any cutoff, so that they take no rank); only the first
    ``depth`` when given (a full-corpus score dict need not be sorted whole for metrics at 100)."""
    if isinstance(ranking, Mapping):
        bad = next((doc for doc, score in ranking.items() if not math.isfinite(float(score))), None)
        if bad is not None:  # NaN sorts anywhere: the ranking would depend on dict order
            raise UnusableScores(f"doc {bad!r} has score {ranking[bad]}: NaN or infinite (a fit that diverged?)")
        items = ((doc, float(score)) for doc, score in ranking.items() if doc not in excluded)
        key = lambda item: (-item[1], item[0])  # noqa: E731
        order = sorted(items, key=key) if depth is None else heapq.nsmallest(depth, items, key=key)
        return [doc for doc, _ in order]
    docs = [doc for doc in dict.fromkeys(ranking) if doc not in excluded]
    return docs if depth is None else docs[:depth]


def ndcg_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """nDCG@k in [0, 1]: DCG = sum over the top k of grade / log2(rank + 1) (linear gain, as trec_eval's
    ndcg_cut and pytrec_eval; a grade of 0 or below gains 0), over the ideal DCG of the qrels' own grades sorted
    best first. Equal to sentence-transformers' value for binary grades."""
    dcg = sum(max(grades.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k]))
    ideal = sorted((grade for grade in grades.values() if grade > 0), reverse=True)[:k]
    idcg = sum(grade / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def reciprocal_rank_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """1 / the rank of the first relevant doc (grade above 0) in the top k; 0 when none is there."""
    return next((1.0 / (rank + 1) for rank, doc in enumerate(ranking[:k]) if grades.get(doc, 0) > 0), 0.0)


def average_precision_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """AP@k: the sum, over the relevant docs in the top k, of the precision at their rank, divided by
    min(relevant docs, k). That is sentence-transformers' InformationRetrievalEvaluator's MAP@k; pytrec_eval's
    ``map_cut_k`` (BEIR) divides by all relevant docs instead. The two agree whenever a query has at most k
    relevant docs (always, for ArguAna and MAP@100)."""
    relevant = sum(1 for grade in grades.values() if grade > 0)
    hits, total = 0, 0.0
    for rank, doc in enumerate(ranking[:k]):
        if grades.get(doc, 0) > 0:
            hits += 1
            total += hits / (rank + 1)
    return total / min(relevant, k) if relevant else 0.0


def recall_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """The share of the relevant docs (grade above 0) that are in the top k."""
    relevant = {doc for doc, grade in grades.items() if grade > 0}
    return len(relevant.intersection(ranking[:k])) / len(relevant) if relevant else 0.0


METRICS = {"ndcg": ndcg_at_k, "mrr": reciprocal_rank_at_k, "map": average_precision_at_k, "recall": recall_at_k}


@dataclass(frozen=True)
class RetrievalMetrics:
    """Metrics of one run as percentages, e.g. ``values["ndcg@10"]``; ``queries``: how many they average over;
    ``missing``: of those, the queries the run has no ranking for (each scored 0); ``per_query``: query id ->
    metric -> value in [0, 1], for paired tests."""

    values: Mapping[str, float]
    queries: int
    missing: int = 0
    per_query: Mapping[str, Mapping[str, float]] = field(default_factory=dict, repr=False, compare=False)

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def as_dict(self) -> dict[str, float | int]:
        """The values and the query counts, for metrics.json."""
        return {**self.values, "queries": self.queries, "missing": self.missing}


def _grades_of(qrels: QrelsLike) -> Mapping[str, Mapping[str, int]]:
    return qrels.grades if isinstance(qrels, Qrels) else qrels


def evaluate_run(
    run: Run, qrels: QrelsLike, excluded: Mapping[str, Collection[str]] | None = None,
    cutoffs: Sequence[tuple[str, int]] = DEFAULT_CUTOFFS,
) -> RetrievalMetrics:
    """Score a run against qrels: nDCG@10, MRR@10, MAP@100 and Recall@100 by default, as percentages averaged over
    the queries with a relevant doc.

    Args:
        run: Query id -> ranked doc ids (best first) or {doc id: score}.
        qrels: Query id -> {doc id: grade}; a ``Qrels`` or a plain mapping.
        excluded: Query id -> doc ids removed from its ranking before the cutoffs (``RetrievalSet.excluded``: in
            ArguAna the query's own argument, which any ranker would put first).
        cutoffs: (metric, k) pairs; metrics ``ndcg``, ``mrr``, ``map``, ``recall``.

    Returns:
        The metrics, named ``<metric>@<k>``.

    Example:
        ::

            metrics = evaluate_run({"q1": ["d3", "d1"]}, {"q1": {"d1": 1}})
            metrics["mrr@10"], metrics["ndcg@10"]  # (50.0, 63.09...)
    """
    unknown = [name for name, _ in cutoffs if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}; known: {', '.join(METRICS)}")
    grades = _grades_of(qrels)
    excluded = excluded or {}
    depth = max((k for _, k in cutoffs), default=0)
    per_query: dict[str, dict[str, float]] = {}
    missing = 0
    for query, judged in grades.items():
        if not any(grade > 0 for grade in judged.values()):
            continue  # no relevant doc: every metric is undefined (and 0 would punish every ranker alike)
        missing += query not in run
        ranking = ranked_ids(run.get(query, ()), excluded.get(query, ()), depth)
        per_query[query] = {f"{name}@{k}": METRICS[name](ranking, judged, k) for name, k in cutoffs}
    values = {f"{name}@{k}": 100 * float(np.mean([scores[f"{name}@{k}"] for scores in per_query.values()])) if per_query else 0.0
              for name, k in cutoffs}
    return RetrievalMetrics(values, len(per_query), missing, per_query)


def _as_scores(ranking: Ranking) -> dict[str, float]:
    """Scores of a ranking: a mapping's own, or for a list n, n-1, ..., 1 (linear in rank)."""
    if isinstance(ranking, Mapping):
        return {doc: float(score) for doc, score in ranking.items()}
    docs = list(dict.fromkeys(ranking))
    return {doc: float(len(docs) - rank) for rank, doc in enumerate(docs)}


def reciprocal_rank_fusion(runs: Sequence[Run], k: int = 60) -> dict[str, dict[str, float]]:
    """Reciprocal rank fusion (Cormack et al., 2009): a doc's score is the sum over runs of 1 / (k + its rank in
    that run), ranks from 1; a run that does not rank the doc adds nothing.

    Args:
        runs: Runs over the same queries (a query missing from a run fuses the others' rankings).
        k: The damping constant; 60 as in the paper.

    Returns:
        Query id -> {doc id: fused score}, to rank or pass to ``evaluate_run``.

    Example:
        ::

            reciprocal_rank_fusion([{"q": ["a", "b"]}, {"q": ["b", "c"]}], k=60)
            # {"q": {"a": 1/61, "b": 1/62 + 1/61, "c": 1/62}}
    """
    fused: dict[str, dict[str, float]] = {}
    for run in runs:
        for query, ranking in run.items():
            scores = fused.setdefault(query, {})
            for rank, doc in enumerate(ranked_ids(ranking), start=1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return fused


def min_max_normalize(ranking: Ranking, excluded: Collection[str] = ()) -> dict[str, float]:
    """One query's scores mapped onto [0, 1] (the best 1, the worst 0; all 1 when they are equal), ``excluded``
    docs left out first, so that, say, the query itself scoring far above the rest squeezes nothing."""
    scores = {doc: score for doc, score in _as_scores(ranking).items() if doc not in excluded}
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    return {doc: (score - low) / (high - low) if high > low else 1.0 for doc, score in scores.items()}


@dataclass(frozen=True)
class LinearAggregation:
    """A fitted weighted sum of runs' min-max normalized scores: score = intercept + sum(weight * normalized
    score), a doc a run does not rank counting 0 for that run. ``method``: ``regression`` (least squares on dev
    labels) or ``grid`` (the weights best for dev nDCG@10)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    intercept: float
    method: Literal["regression", "grid"]

    def apply(
        self, runs: Mapping[str, Run], excluded: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, dict[str, float]]:
        """The aggregated run: query id -> {doc id: score}, over the docs any of the runs ranks.

        Example:
            ::

                test_run = aggregation.apply({"bm25": bm25_test, "sbert": sbert_test}, test.excluded)
        """
        absent = [name for name in self.names if name not in runs]
        if absent:
            raise ValueError(f"runs {', '.join(map(repr, absent))} are missing; the aggregation weighs {', '.join(self.names)}")
        queries, docs, features = _features(runs, self.names, excluded or {})
        return {query: dict(zip(query_docs, (self.intercept + x @ np.asarray(self.weights)).tolist()))
                for query, query_docs, x in zip(queries, docs, features)}


def _features(
    runs: Mapping[str, Run], names: Sequence[str], excluded: Mapping[str, Collection[str]], only: Collection[str] | None = None,
) -> tuple[list[str], list[list[str]], list[np.ndarray]]:
    """(queries, per query its docs sorted by id, per query a docs x runs matrix of normalized scores)."""
    queries = sorted({query for name in names for query in runs[name]} if only is None else set(only))
    all_docs, matrices = [], []
    for query in queries:
        banned = excluded.get(query, ())
        normalized = [min_max_normalize(runs[name].get(query, {}), banned) for name in names]
        docs = sorted(set().union(*normalized))
        all_docs.append(docs)
        matrix = [[scores.get(doc, 0.0) for scores in normalized] for doc in docs]
        matrices.append(np.array(matrix, dtype=np.float64).reshape(len(docs), len(names)))
    return queries, all_docs, matrices


def _grid_weights(runs: int, step: float) -> np.ndarray:
    """Every weight vector on the simplex in steps of ``step`` (weights >= 0, summing to 1), in a fixed order."""
    parts = int(round(1 / step))
    rows = [combo for combo in itertools.product(range(parts + 1), repeat=runs) if sum(combo) == parts]
    return np.array(rows, dtype=np.float64) / parts


def fit_linear_aggregation(
    runs: Mapping[str, Run], qrels: QrelsLike, excluded: Mapping[str, Collection[str]] | None = None, *,
    method: Literal["regression", "grid"] = "regression", grid_step: float = 0.1, max_grid: int = 5000,
) -> LinearAggregation:
    """Fit how to weigh several rankers on dev, as the thesis does: a linear regression of the relevance grade on
    the rankers' min-max normalized scores.

    ``regression`` fits ordinary least squares with an intercept (numpy's lstsq: the same fit as sklearn's
    LinearRegression) over every (query, doc) that any run ranks for a dev query with a relevant doc; the label is
    the doc's grade (0 when unjudged), a run's feature 0 where it does not rank the doc. Least squares with a rare
    positive class still orders docs well, but it is unsuited when the labels do not vary or no weight comes out
    positive (the sum would rank worst first): then, and with ``method="grid"``, the weights are those of a grid on
    the simplex (steps of ``grid_step``) with the best mean nDCG@10 on dev, the first such in grid order.

    Args:
        runs: Ranker name -> its dev run (query id -> ranking or scores).
        qrels: The dev qrels.
        excluded: Query id -> docs never ranked for it, left out of the features and normalization.
        method: ``regression`` (the thesis) or ``grid``.
        grid_step: The grid's step, in (0, 1].
        max_grid: The most grid points tried; more (many runs, a fine step) is a ValueError.

    Returns:
        The fitted aggregation; ``method`` says which fit made it.

    Example:
        ::

            aggregation = fit_linear_aggregation({"bm25": bm25_dev, "sbert": sbert_dev}, dev.qrels, dev.excluded)
            metrics = evaluate_run(aggregation.apply({"bm25": bm25_test, "sbert": sbert_test}), test.qrels, test.excluded)
    """
    names = tuple(runs)
    if not names:
        raise ValueError("fit_linear_aggregation: no runs")
    grades = _grades_of(qrels)
    judged = [query for query, docs in grades.items() if any(grade > 0 for grade in docs.values())]
    queries, docs, features = _features(runs, names, excluded or {}, judged)
    labels = [np.array([max(grades[query].get(doc, 0), 0) for doc in query_docs], dtype=np.float64)
              for query, query_docs in zip(queries, docs)]
    x = np.concatenate(features) if features else np.zeros((0, len(names)))
    y = np.concatenate(labels) if labels else np.zeros(0)
    if method == "regression" and len(y) and np.ptp(y) > 0:
        solution = np.linalg.lstsq(np.column_stack([x, np.ones(len(x))]), y, rcond=None)[0]
        weights, intercept = solution[:-1], float(solution[-1])
        if np.all(np.isfinite(solution)) and np.any(weights > 0):
            return LinearAggregation(names, tuple(float(w) for w in weights), intercept, "regression")
    grid = _grid_weights(len(names), grid_step)
    if len(grid) > max_grid:
        raise ValueError(f"a grid of {len(grid)} weight vectors for {len(names)} runs at step {grid_step}: above "
                         f"max_grid={max_grid}; use a larger grid_step")
    total = np.zeros(len(grid))
    for query_docs, x_query, y_query in zip(docs, features, labels):
        ideal = np.sort(y_query[y_query > 0])[::-1][:10]
        idcg = float(np.sum(ideal / np.log2(np.arange(len(ideal)) + 2)))
        if idcg == 0 or not len(query_docs):
            continue  # its relevant docs are in no run: every weighting scores it 0
        scores = x_query @ grid.T  # docs x weightings; docs sorted by id, so a stable sort breaks ties by id
        top = np.argsort(-scores, axis=0, kind="stable")[:10]
        gains = y_query[top] / np.log2(np.arange(len(top)) + 2)[:, None]
        total += gains.sum(axis=0) / idcg
    best = grid[int(np.argmax(total))]
    return LinearAggregation(names, tuple(float(w) for w in best), 0.0, "grid")
