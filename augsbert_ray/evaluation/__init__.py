"""Score pairs with a model (bi-encoder, cross-encoder, teacher or Jaccard, through augsbert_ray.scoring) and turn
scores into task metrics."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import ray

from augsbert_ray.config import TaskType
from augsbert_ray.evaluation.metrics import UnusableScores, auc_at_fpr, best_threshold, check_scores, dev_metric, f1_at, spearman_x100
from augsbert_ray.runtime import configure_torch_threads, log
from augsbert_ray.scoring import ScorerKind, jaccard_scores, scorer_for


@dataclass
class Evaluation:
    """The task's main metric on dev and test (Spearman x100 or F1 x100), plus classification extras.

    Attributes:
        dev: The metric on dev.
        test: The metric on test.
        threshold: Classification: the score threshold chosen on dev for F1.
        dev_auc05: Classification: AUC up to a false-positive rate of 0.05, on dev.
        test_auc05: The same on test.

    Example:
        >>> Evaluation(dev=81.2, test=78.9).to_dict()
        {'dev': 81.2, 'test': 78.9}
    """

    dev: float
    test: float
    threshold: float | None = None
    dev_auc05: float | None = None
    test_auc05: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def score_pairs(
    kind: ScorerKind, model: str | None, sentences1: list[str], sentences2: list[str], threads: int = 1, gpu: bool = False
) -> np.ndarray:
    """Similarity of each pair by the model kind's ``PairScorer`` (augsbert_ray.scoring): cosine of bi-encoder
    embeddings, cross-encoder output, a teacher's score (``model`` is its teacher.json), or Jaccard.

    Args:
        kind: ``bi_encoder``, ``cross_encoder``, ``teacher`` or ``jaccard``.
        model: The model directory or Hugging Face id, the teacher.json, or None for ``jaccard``.
        sentences1: The pairs' first sentences.
        sentences2: Their second sentences, as many.
        threads: Torch threads.
        gpu: Score on this process's GPU.

    Returns:
        One score per pair, shape (len(sentences1),).

    Example:
        >>> score_pairs("jaccard", None, ["A cat sat."], ["a cat ran"])
        array([0.5])
    """
    if kind != "jaccard":
        configure_torch_threads(threads)
    return scorer_for(kind, model, threads, gpu).score(sentences1, sentences2)


def score_pairs_on_ray(kind: ScorerKind, model: str | None, table: pa.Table, cpus: float, gpus: float) -> "ray.ObjectRef[np.ndarray]":
    """``score_pairs`` over a table's pairs, as a Ray task.

    Args:
        kind: ``bi_encoder``, ``cross_encoder``, ``teacher`` or ``jaccard``.
        model: The model directory or Hugging Face id, the teacher.json, or None for ``jaccard``.
        table: The pairs (sentence1, sentence2, label).
        cpus: CPUs the task reserves; its torch threads are their whole number (at least 1).
        gpus: GPUs the task reserves (0: none).

    Returns:
        A reference to the scores, one per row; ``ray.get`` it.

    Example:
        ::

            scores = ray.get(score_pairs_on_ray("cross_encoder", "runs/<run>/models/cross_encoder", gold.dev, 1, 0))
    """
    sentences1, sentences2, _ = _columns(table)
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus)(score_pairs)
    return remote.remote(kind, model, sentences1, sentences2, max(1, int(cpus)), gpus > 0)


def gather(refs: dict[str, ray.ObjectRef], what: str) -> dict[str, Any]:
    """``ray.get`` of named references, with a log line as each one comes in: the evaluation and the teacher gate
    ran for minutes without a word.

    Args:
        refs: A name for each reference, e.g. ``{"sbert": evaluate_on_ray(...)}``.
        what: The step, at the start of each line, e.g. ``"evaluate"``.

    Returns:
        Each name's value.

    Example:
        ::

            evaluations = gather({"sbert": evaluate_on_ray("bi_encoder", model, task, dev, test, 1, 0)}, "evaluate")
    """
    started, waiting, done = time.perf_counter(), {ref: name for name, ref in refs.items()}, {}
    while waiting:
        ready, _ = ray.wait(list(waiting), num_returns=1)
        for ref in ready:
            name = waiting.pop(ref)
            done[name] = ray.get(ref)
            log.info("%s: %s done (%d/%d, %.0fs)", what, name, len(done), len(refs), time.perf_counter() - started)
    return done


def metrics_from_scores(
    task: TaskType, dev_scores: np.ndarray, dev_labels: np.ndarray, test_scores: np.ndarray, test_labels: np.ndarray,
    model: str | None = None,
) -> Evaluation:
    """The task's metric on dev and test from their scores: Spearman x100, or F1 x100 at the threshold best on dev
    with AUC(0.05) of both. Scores that are NaN, infinite or all equal are an UnusableScores error naming ``model``.

    Args:
        task: ``regression`` or ``classification`` (labels 0/1).
        dev_scores: One score per dev pair.
        dev_labels: The dev labels, as many.
        test_scores: One score per test pair.
        test_labels: The test labels, as many.
        model: What scored them, for the error message.

    Example:
        ::

            metrics_from_scores("regression", dev_scores, gold.dev.column("label").to_numpy(),
                                test_scores, gold.test.column("label").to_numpy()).test
    """
    for split, scores in (("dev", dev_scores), ("test", test_scores)):
        check_scores(scores, f"{model}: {split} split" if model else f"{split} split")
    if task == "regression":
        return Evaluation(dev=spearman_x100(dev_scores, dev_labels), test=spearman_x100(test_scores, test_labels))
    threshold = best_threshold(dev_scores, dev_labels)
    return Evaluation(
        dev=f1_at(dev_scores, dev_labels, threshold),
        test=f1_at(test_scores, test_labels, threshold),
        threshold=threshold,
        dev_auc05=auc_at_fpr(dev_scores, dev_labels),
        test_auc05=auc_at_fpr(test_scores, test_labels),
    )


def majority_baseline(dev_labels: np.ndarray, test_labels: np.ndarray) -> Evaluation:
    """F1 x100 of the positive class when every pair is given dev's majority class (a tie: positive), the floor
    that a classifier must clear: MRPC's test is two thirds paraphrases, so saying "paraphrase" to all scores 79.9.

    Args:
        dev_labels: The dev labels (0/1), which choose the class.
        test_labels: The test labels (0/1).

    Example:
        ::

            majority_baseline(np.array([1, 1, 0]), np.array([1, 0, 0, 0])).test  # 40.0
    """
    positive = 2 * int(np.sum(dev_labels)) >= len(dev_labels)
    return Evaluation(*(f1_at(np.full(len(labels), float(positive)), labels, 1.0) for labels in (dev_labels, test_labels)))


def _columns(table: pa.Table) -> tuple[list[str], list[str], np.ndarray]:
    return table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist(), table.column("label").to_numpy()


def evaluate(
    kind: ScorerKind, model: str | None, task: TaskType, dev: pa.Table, test: pa.Table, threads: int = 1, gpu: bool = False
) -> Evaluation:
    """Score dev and test with one model and compute the task metric (threshold chosen on dev).

    Args:
        kind: ``bi_encoder`` (cosine), ``cross_encoder``, ``teacher`` (a run's teacher.json) or ``jaccard``.
        model: The model directory or Hugging Face id, the teacher.json, or None for ``jaccard``.
        task: ``regression`` (Spearman x100) or ``classification`` (F1 x100 at the dev-chosen threshold, AUC(0.05)).
        dev: The dev pairs (sentence1, sentence2, label).
        test: The test pairs.
        threads: Torch threads.
        gpu: Score on this process's GPU.

    Example:
        ::

            evaluate("jaccard", None, "regression", gold.dev, gold.test).test  # 56.6 on STSb
            evaluate("bi_encoder", "runs/<run>/models/sbert", "regression", gold.dev, gold.test)
    """
    dev_s1, dev_s2, dev_labels = _columns(dev)
    test_s1, test_s2, test_labels = _columns(test)
    scores = score_pairs(kind, model, dev_s1 + test_s1, dev_s2 + test_s2, threads, gpu)
    return metrics_from_scores(task, scores[: len(dev_s1)], dev_labels, scores[len(dev_s1) :], test_labels, model or kind)


def evaluate_on_ray(
    kind: ScorerKind, model: str | None, task: TaskType, dev: pa.Table, test: pa.Table, cpus: float, gpus: float
) -> "ray.ObjectRef[Evaluation]":
    """The same as ``evaluate``, as a Ray task, so that on a cluster it runs on a worker, not the head.

    Args:
        kind: ``bi_encoder``, ``cross_encoder``, ``teacher`` or ``jaccard``.
        model: The model directory or Hugging Face id, the teacher.json, or None for ``jaccard``.
        task: ``regression`` or ``classification``.
        dev: The dev pairs (sentence1, sentence2, label).
        test: The test pairs.
        cpus: CPUs the task reserves; its torch threads are their whole number (at least 1).
        gpus: GPUs the task reserves (0: none).

    Example:
        ::

            ref = evaluate_on_ray("bi_encoder", "runs/<run>/models/sbert", "regression", gold.dev, gold.test, 1, 0)
            ray.get(ref).test
    """
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus)(evaluate)
    return remote.remote(kind, model, task, dev, test, max(1, int(cpus)), gpus > 0)


__all__ = [
    "Evaluation",
    "UnusableScores",
    "auc_at_fpr",
    "best_threshold",
    "check_scores",
    "dev_metric",
    "evaluate",
    "evaluate_on_ray",
    "f1_at",
    "gather",
    "jaccard_scores",
    "majority_baseline",
    "metrics_from_scores",
    "score_pairs",
    "score_pairs_on_ray",
    "spearman_x100",
]
