"""Task metrics: Spearman x100 (regression), F1 of the positive class at a dev-chosen threshold and
AUC(0.05) (classification)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import spearmanr

from augsbert_ray.config import TaskType



def spearman_x100(scores: Sequence[float], labels: Sequence[float]) -> float:
    """Spearman's rank correlation of scores and labels, x100 (NaN when either is constant).

    Args:
        scores: One score per pair.
        labels: The gold labels, as many.

    Example:
        ::

            spearman_x100([0.1, 0.2, 0.3, 0.4], [1, 3, 2, 4])  # 80.0
    """
    return float(spearmanr(scores, labels).statistic * 100)


def f1_at(scores: Sequence[float], labels: Sequence[int], threshold: float) -> float:
    """F1 (x100) of the positive class when ``score >= threshold`` predicts positive.

    Args:
        scores: One score per pair.
        labels: 0/1 labels, as many.
        threshold: The lowest score predicted positive.

    Example:
        ::

            f1_at([0.1, 0.35, 0.4, 0.8], [0, 1, 0, 1], 0.35)  # 80.0
    """
    predicted = np.asarray(scores) >= threshold
    truth = np.asarray(labels).astype(bool)
    tp = int(np.sum(predicted & truth))
    precision_denominator, recall_denominator = int(predicted.sum()), int(truth.sum())
    if tp == 0:
        return 0.0
    precision, recall = tp / precision_denominator, tp / recall_denominator
    return float(200 * precision * recall / (precision + recall))


class UnusableScores(ValueError):
    """A model's scores that no metric can rank: NaN or infinite, or one value for every pair.

    Example:
        >>> check_scores(np.array([0.5, np.nan]), "sbert: dev split")
        Traceback (most recent call last):
        ...
        augsbert_ray.evaluation.metrics.UnusableScores: sbert: dev split: ...
    """


def check_finite(scores: np.ndarray, what: str) -> None:
    """Scores that are NaN or infinite (a model whose fit diverged) have no rank or threshold: UnusableScores."""
    bad = int(np.count_nonzero(~np.isfinite(scores)))
    if bad:
        raise UnusableScores(f"{what}: {bad} of {len(scores)} scores are NaN or infinite (a fit that diverged?)")


def check_scores(scores: np.ndarray, what: str) -> None:
    """``check_finite``, and scores that differ: one score for every pair (a model whose fit collapsed) has no
    Spearman, and its F1 is that of calling every pair positive.

    Example:
        ::

            check_scores(np.array([0.7, 0.7, 0.7]), "models/sbert: dev split")  # UnusableScores
    """
    scores = np.asarray(scores, dtype=np.float64)
    check_finite(scores, what)
    if len(scores) > 1 and np.ptp(scores) == 0:
        raise UnusableScores(f"{what}: all {len(scores)} scores are {scores[0]:.6g} (a fit that collapsed?)")


def best_threshold(scores: Sequence[float], labels: Sequence[int]) -> float:
    """The threshold (one of the scores) that maximizes F1; ties go to the higher threshold.

    One sort: at each distinct score t, the pairs scored >= t are those up to t's last tie in descending order,
    and F1 is computed from their counts with the same arithmetic as ``f1_at``.

    Args:
        scores: One score per pair.
        labels: 0/1 labels, as many.

    Example:
        ::

            best_threshold([0.1, 0.35, 0.4, 0.8], [0, 1, 0, 1])  # 0.35
    """
    scores = np.asarray(scores, dtype=np.float64)
    check_finite(scores, "threshold")
    truth = np.asarray(labels).astype(bool)
    order = np.argsort(-scores, kind="stable")
    descending, truth = scores[order], truth[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(descending)), len(descending) - 1]
    tp = np.cumsum(truth)[last_of_tie].astype(np.float64)
    predicted = (last_of_tie + 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision, recall = tp / predicted, tp / truth.sum()
        f1s = np.where(tp > 0, 200 * precision * recall / (precision + recall), 0.0)
    return float(descending[last_of_tie][int(np.argmax(f1s))])  # descending: the first maximum is the highest threshold


def dev_metric(task: TaskType, scores: np.ndarray, labels: np.ndarray) -> float:
    """The task's main metric on one split: Spearman x100, or F1 x100 at the threshold best on that split.

    Args:
        task: ``regression`` or ``classification``.
        scores: One score per pair.
        labels: The split's labels, as many (0/1 for classification).

    Example:
        ::

            dev_metric("regression", dev_scores, gold.dev.column("label").to_numpy())
    """
    if task == "regression":
        return spearman_x100(scores, labels)
    return f1_at(scores, labels, best_threshold(scores, labels))


def auc_at_fpr(scores: Sequence[float], labels: Sequence[int], max_fpr: float = 0.05) -> float:
    """Area under the ROC curve from FPR 0 to ``max_fpr``, divided by ``max_fpr`` (1.0 is perfect).

    This is the paper's AUC(0.05) (Shah et al., 2018), scaled to [0,1]; tied scores move
    along the diagonal, as in a standard ROC.

    Args:
        scores: One score per pair.
        labels: 0/1 labels, as many; both classes needed (else ValueError).
        max_fpr: The false-positive rate the area stops at; default 0.05, the paper's AUC(0.05).

    Example:
        ::

            auc_at_fpr([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0])  # 1.0
    """
    scores = np.asarray(scores, dtype=np.float64)
    truth = np.asarray(labels).astype(bool)
    positives, negatives = int(truth.sum()), int((~truth).sum())
    if positives == 0 or negatives == 0:
        raise ValueError("AUC needs both positive and negative labels")
    order = np.argsort(-scores, kind="stable")
    scores, truth = scores[order], truth[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    tpr = np.r_[0.0, np.cumsum(truth)[last_of_tie] / positives]
    fpr = np.r_[0.0, np.cumsum(~truth)[last_of_tie] / negatives]
    cut = np.searchsorted(fpr, max_fpr, side="right")
    xs = np.r_[fpr[:cut], max_fpr]
    ys = np.r_[tpr[:cut], np.interp(max_fpr, fpr, tpr)]
    return float(np.trapezoid(ys, xs) / max_fpr)
