"""Retrieval metrics on hand-made rankings (the arithmetic in the comments), checked against sentence-transformers'
InformationRetrievalEvaluator, and the fusion of runs (RRF, the linear aggregation fitted on dev)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from augsbert_ray.data.retrieval import Qrels
from augsbert_ray.evaluation.metrics import UnusableScores
from augsbert_ray.evaluation.retrieval_metrics import (
    average_precision_at_k, evaluate_run, fit_linear_aggregation, min_max_normalize, ndcg_at_k, ranked_ids,
    reciprocal_rank_at_k, reciprocal_rank_fusion, recall_at_k,
)

log2 = math.log2
QRELS = Qrels({
    "q1": {"d1": 2, "d2": 1, "d5": 1, "d9": 0},  # graded; d9 judged not relevant; d5 never retrieved
    "q2": {"d7": 1},
    "q3": {"d1": 0},  # no relevant doc: not averaged over
    "q4": {"d2": 1},  # not in the run: scores 0
})
RUN = {
    "q1": ["d3", "d1", "d9", "d2", "d4"],
    "q2": {"d7": 0.9, "d8": 0.9, "d6": 0.95},  # by score, ties by id: d6, d7, d8
    "q3": ["d1"],
}


def test_per_query_metrics_by_hand() -> None:
    ranking, grades = RUN["q1"], QRELS.grades["q1"]
    # DCG@10 = 0/log2(2) + 2/log2(3) + 0/log2(4) + 1/log2(5) + 0/log2(6) (d1 at rank 2, d2 at rank 4)
    dcg = 2 / log2(3) + 1 / log2(5)
    # IDCG@10: the qrels' grades best first, 2, 1, 1 -> 2/log2(2) + 1/log2(3) + 1/log2(4)
    idcg = 2 / 1 + 1 / log2(3) + 1 / 2
    assert ndcg_at_k(ranking, grades, 10) == pytest.approx(dcg / idcg) == pytest.approx(0.540586, abs=1e-6)  # 1.69254 / 3.13093
    assert ndcg_at_k(ranking, grades, 1) == 0.0  # d3 alone: no gain
    # the first relevant doc (d1) is at rank 2
    assert reciprocal_rank_at_k(ranking, grades, 10) == 0.5 and reciprocal_rank_at_k(ranking, grades, 1) == 0.0
    # hits at ranks 2 and 4: precisions 1/2 and 2/4; 3 relevant docs -> (1/2 + 2/4) / min(3, 100) = 1/3
    assert average_precision_at_k(ranking, grades, 100) == pytest.approx(1 / 3)
    # at k=2 only the hit at rank 2 counts, over min(3, 2) = 2 -> (1/2) / 2
    assert average_precision_at_k(ranking, grades, 2) == pytest.approx(0.25)
    # d1 and d2 of {d1, d2, d5}
    assert recall_at_k(ranking, grades, 100) == pytest.approx(2 / 3) and recall_at_k(ranking, grades, 2) == pytest.approx(1 / 3)
    assert ranked_ids(RUN["q2"]) == ["d6", "d7", "d8"]


def test_evaluate_run_averages_over_queries_with_a_relevant_doc() -> None:
    metrics = evaluate_run(RUN, QRELS)
    assert (metrics.queries, metrics.missing) == (3, 1)  # q1, q2, q4 (q4 missing from the run); q3 has no relevant doc
    # q2: d7 at rank 2 -> nDCG (1/log2(3)) / 1, RR 1/2, AP 1/2 / min(1, 100), recall 1; q4: all 0
    q1_ndcg = (2 / log2(3) + 1 / log2(5)) / (2 + 1 / log2(3) + 1 / 2)
    assert metrics["ndcg@10"] == pytest.approx(100 * (q1_ndcg + 1 / log2(3) + 0) / 3)  # 39.05
    assert metrics["mrr@10"] == pytest.approx(100 * (1 / 2 + 1 / 2 + 0) / 3)  # 33.33
    assert metrics["map@100"] == pytest.approx(100 * (1 / 3 + 1 / 2 + 0) / 3)  # 27.78
    assert metrics["recall@100"] == pytest.approx(100 * (2 / 3 + 1 + 0) / 3)  # 55.56
    assert metrics.as_dict() == {**metrics.values, "queries": 3, "missing": 1}
    assert set(metrics.per_query) == {"q1", "q2", "q4"} and metrics.per_query["q4"]["recall@100"] == 0.0
    assert evaluate_run(RUN, QRELS.grades)["ndcg@10"] == metrics["ndcg@10"]  # a plain mapping does as well


def test_excluded_docs_take_no_rank() -> None:
    """BEIR's ArguAna: the query's own argument would rank first; left out, its counter moves up to rank 1."""
    run = {"q": {"q": 0.99, "c": 0.8, "x": 0.5}}
    qrels = {"q": {"c": 1}}
    assert evaluate_run(run, qrels)["mrr@10"] == 50.0
    assert evaluate_run(run, qrels, excluded={"q": {"q"}})["mrr@10"] == 100.0
    assert evaluate_run(run, qrels, cutoffs=[("ndcg", 1)], excluded={"q": {"q"}}).values == {"ndcg@1": 100.0}
    with pytest.raises(ValueError, match="unknown metric 'p'"):
        evaluate_run(run, qrels, cutoffs=[("p", 5)])
    with pytest.raises(UnusableScores, match="NaN or infinite"):
        evaluate_run({"q": {"c": float("nan"), "x": 0.1}}, qrels)


def test_matches_sentence_transformers_information_retrieval_evaluator() -> None:
    """The same numbers as sentence-transformers' own computation on random binary-graded runs (its MAP divides by
    min(relevant, k), as ours; each query here has at most 5 relevant docs)."""
    evaluation = pytest.importorskip("sentence_transformers.sentence_transformer.evaluation.information_retrieval")
    rng = np.random.default_rng(0)
    docs = [f"d{i:02d}" for i in range(40)]
    queries = {f"q{i}": f"query {i}" for i in range(30)}
    relevant = {q: set(rng.choice(docs, size=int(rng.integers(1, 6)), replace=False)) for q in queries}
    relevant["q29"] = set()  # no relevant doc: both leave it out
    run = {q: {d: float(rng.integers(0, 8)) / 8 for d in rng.choice(docs, size=25, replace=False)} for q in queries}
    del run["q5"]  # a query the run did not answer
    evaluator = evaluation.InformationRetrievalEvaluator(
        queries, dict.fromkeys(docs, "text"), relevant, mrr_at_k=[10], ndcg_at_k=[10], map_at_k=[100],
        accuracy_at_k=[10], precision_recall_at_k=[100], write_csv=False)
    results = [[{"corpus_id": d, "score": s} for d, s in run.get(q, {}).items()] for q in evaluator.queries_ids]
    theirs = evaluator.compute_metrics(results)
    ours = evaluate_run(run, {q: dict.fromkeys(ds, 1) for q, ds in relevant.items()})
    assert ours.queries == len(evaluator.queries_ids) == 29
    assert ours["ndcg@10"] == pytest.approx(100 * theirs["ndcg@k"][10])
    assert ours["mrr@10"] == pytest.approx(100 * theirs["mrr@k"][10])
    assert ours["map@100"] == pytest.approx(100 * theirs["map@k"][100])
    assert ours["recall@100"] == pytest.approx(100 * theirs["recall@k"][100])


def test_reciprocal_rank_fusion_by_hand() -> None:
    bm25 = {"q": ["a", "b", "c"]}
    dense = {"q": {"c": 0.9, "a": 0.5}, "r": ["z"]}  # c first, a second
    fused = reciprocal_rank_fusion([bm25, dense], k=1)
    # a: 1/(1+1) + 1/(1+2) = 5/6; b: 1/(1+2) = 1/3; c: 1/(1+3) + 1/(1+1) = 3/4; z: 1/(1+1)
    assert fused["q"] == pytest.approx({"a": 5 / 6, "b": 1 / 3, "c": 3 / 4})
    assert fused["r"] == {"z": 0.5}
    assert ranked_ids(fused["q"]) == ["a", "c", "b"]
    # k=60: a 1/61 + 1/62, c 1/63 + 1/61, b 1/62
    assert reciprocal_rank_fusion([bm25, dense])["q"] == pytest.approx({"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61})


def test_min_max_normalize() -> None:
    assert min_max_normalize({"a": 3.0, "b": 1.0, "c": 2.0}) == {"a": 1.0, "b": 0.0, "c": 0.5}
    assert min_max_normalize({"q": 100.0, "a": 3.0, "b": 1.0}, excluded={"q"}) == {"a": 1.0, "b": 0.0}
    assert min_max_normalize(["a", "b", "c"]) == {"a": 1.0, "b": 0.5, "c": 0.0}  # a list: scores linear in rank
    assert min_max_normalize({"a": 2.0, "b": 2.0}) == {"a": 1.0, "b": 1.0}


def noisy_dev(seed: int, queries: int = 40) -> tuple[dict, dict, dict]:
    """A good ranker, a noise ranker, and qrels with one relevant doc per query among 20."""
    rng = np.random.default_rng(seed)
    good, noise, qrels = {}, {}, {}
    for i in range(queries):
        docs = [f"q{i}d{j}" for j in range(20)]
        answer = docs[int(rng.integers(20))]
        qrels[f"q{i}"] = {answer: 1}
        good[f"q{i}"] = {d: float(rng.normal()) + (2.5 if d == answer else 0.0) for d in docs}
        noise[f"q{i}"] = {d: float(rng.normal()) for d in docs}
    return good, noise, qrels


def test_linear_aggregation_regression_weighs_the_informative_run() -> None:
    good, noise, qrels = noisy_dev(0)
    fitted = fit_linear_aggregation({"good": good, "noise": noise}, qrels)
    assert fitted.method == "regression" and fitted.names == ("good", "noise")
    assert fitted.weights[0] > 0.3 > abs(fitted.weights[1])
    test_good, test_noise, test_qrels = noisy_dev(1)
    combined = evaluate_run(fitted.apply({"good": test_good, "noise": test_noise}), test_qrels)
    assert combined["ndcg@10"] >= evaluate_run(test_noise, test_qrels)["ndcg@10"] + 20
    with pytest.raises(ValueError, match="runs 'noise' are missing"):
        fitted.apply({"good": test_good})


def test_linear_aggregation_grid_and_its_fallback() -> None:
    good, noise, qrels = noisy_dev(0)
    grid = fit_linear_aggregation({"noise": noise, "good": good}, qrels, method="grid", grid_step=0.25)
    assert grid.method == "grid" and sum(grid.weights) == pytest.approx(1.0) and grid.weights[1] >= 0.75
    # an inverted ranker alone: least squares gives it a negative weight, which would rank worst first -> grid
    inverted = {q: {d: -s for d, s in scores.items()} for q, scores in good.items()}
    fallback = fit_linear_aggregation({"inverted": inverted}, qrels)
    assert fallback.method == "grid" and fallback.weights == (1.0,)
    with pytest.raises(ValueError, match="above max_grid=10"):
        fit_linear_aggregation({"a": good, "b": noise, "c": good}, qrels, method="grid", max_grid=10)
