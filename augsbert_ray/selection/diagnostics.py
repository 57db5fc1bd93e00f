"""How close a silver score distribution is to the gold one, from the merged score histogram."""

from __future__ import annotations

import numpy as np
from scipy.stats import gaussian_kde

from augsbert_ray.config import TaskType
from augsbert_ray.selection.kde import GRID, positives_and_negatives, silver_density

HIGH_SIMILARITY = 0.6
# Silver smaller than this share of the gold train split can hardly change the student's fit.
THIN_SILVER_SHARE = 0.1


def kl_divergence(gold_labels: np.ndarray, silver_counts: np.ndarray) -> float:
    """KL(F_gold || F_silver) on [0,1], both densities renormalized on the grid (trapezoid rule).

    Args:
        gold_labels: The gold train labels (F_gold is their KDE).
        silver_counts: The silver scores' histogram over [0,1] (``score_histogram``).

    Returns:
        The divergence in nats; NaN when the gold labels are all equal or the histogram is empty.

    Example:
        ::

            kl_divergence(gold.train.column("label").to_numpy(), score_histogram(silver, 100))
    """
    if len(np.unique(gold_labels)) < 2 or silver_counts.sum() == 0:
        return float("nan")
    p = np.maximum(gaussian_kde(gold_labels)(GRID), 1e-12)
    q = np.maximum(silver_density(silver_counts, GRID), 1e-12)
    p, q = p / np.trapezoid(p, GRID), q / np.trapezoid(q, GRID)
    return float(np.trapezoid(p * np.log(p / q), GRID))


def high_similarity_share(silver_counts: np.ndarray) -> float:
    """Share of scores at 0.6 or above; exact when 0.6 is a bin edge (any bin count divisible by 5).

    Args:
        silver_counts: The silver scores' histogram over [0,1] (``score_histogram``).

    Returns:
        The share in [0, 1]; NaN for an empty histogram.

    Example:
        ::

            high_similarity_share(score_histogram(silver, 100))
    """
    total = silver_counts.sum()
    first_high = int(np.ceil(HIGH_SIMILARITY * len(silver_counts) - 1e-9))
    return float(silver_counts[first_high:].sum() / total) if total else float("nan")


def silver_diagnostics(gold_labels: np.ndarray, candidates: int, kept_counts: np.ndarray) -> dict[str, float | int | None]:
    """A silver set's counts and how close its kept scores are to gold: ``candidates``, ``kept``, ``kl_gold_silver``
    (``kl_divergence``) and ``high_similarity_share``; None where a measure is undefined (nothing kept).

    Args:
        gold_labels: The gold train labels.
        candidates: The candidate pairs sampled for the set.
        kept_counts: The histogram of the kept silver scores (``score_histogram``).

    Example:
        ::

            silver_diagnostics(gold_labels, candidates.num_rows, score_histogram(kept, 100))["kept"]
    """
    measures = {"kl_gold_silver": kl_divergence(gold_labels, kept_counts), "high_similarity_share": high_similarity_share(kept_counts)}
    # undefined (nothing kept, or constant gold labels): null in metrics.json, not a bare NaN
    return {"candidates": candidates, "kept": int(kept_counts.sum()),
            **{name: None if np.isnan(value) else value for name, value in measures.items()}}


def thin_silver_warning(
    strategy: str, labeled: int, kept_counts: np.ndarray, gold_rows: int, task: TaskType, kde_mode: str = "paper"
) -> str | None:
    """A one-line warning when a strategy keeps fewer silver pairs than THIN_SILVER_SHARE of the gold train split,
    saying why where the cause is known (class-ratio selection keeps only as many pairs as the teacher finds
    positives); None otherwise.

    Args:
        strategy: The sampling strategy that made the silver set, e.g. ``kde``.
        labeled: The pairs the teacher labeled.
        kept_counts: The histogram of the kept silver scores (``score_histogram``; an even bin count for
            ``kde`` under classification).
        gold_rows: The gold train pairs.
        task: ``regression`` or ``classification``.
        kde_mode: ``sampling.kde_mode`` of a regression ``kde`` set.

    Example:
        ::

            thin_silver_warning("kde", 160580, kept_histogram, 3668, "classification")  # None once 367 pairs are kept
    """
    kept = int(kept_counts.sum())
    if kept >= THIN_SILVER_SHARE * gold_rows:
        return None
    line = (f"{strategy} silver: {kept:,} pairs kept of {labeled:,} labeled, {kept / gold_rows:.1%} of the "
            f"{gold_rows:,} gold train pairs: too few to change the student")
    if strategy == "kde" and task == "classification":
        positives = positives_and_negatives(kept_counts)[0]  # selection keeps every positive
        return (f"{line}; the teacher scored {positives:,} candidates positive (>= 0.5), and class-ratio selection keeps "
                f"the positives and negatives in gold's ratio, so a pool of few positives gives little silver "
                f"(bm25 or semantic sampling finds more)")
    if strategy == "kde" and kde_mode == "exact":
        return (f"{line}; kde_mode exact scales every score's acceptance by the one where gold has the most density for "
                f"the silver's, so scores gold has and the teacher rarely gives keep few pairs anywhere (kde_mode paper keeps more)")
    if strategy == "kde":
        return f"{line}; a larger pool (sampling.kde_pool) keeps more"
    return line
