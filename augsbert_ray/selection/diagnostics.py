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
    """KL(F_gold || F_silver) on [0,1], both densities renormalized on the grid (trapezoid rule)."""
    if len(np.unique(gold_labels)) < 2 or silver_counts.sum() == 0:
        return float("nan")
    p = np.maximum(gaussian_kde(gold_labels)(GRID), 1e-12)
    q = np.maximum(silver_density(silver_counts, GRID), 1e-12)
    p, q = p / np.trapezoid(p, GRID), q / np.trapezoid(q, GRID)
    return float(np.trapezoid(p * np.log(p / q), GRID))


def high_similarity_share(silver_counts: np.ndarray) -> float:
    """Share of scores above 0.6; exact when 0.6 is a bin edge (any bin count divisible by 5)."""
    total = silver_counts.sum()
    first_high = int(np.ceil(HIGH_SIMILARITY * len(silver_counts) - 1e-9))
    return float(silver_counts[first_high:].sum() / total) if total else float("nan")


def silver_diagnostics(gold_labels: np.ndarray, candidates: int, kept_counts: np.ndarray) -> dict[str, float | int]:
    return {
        "candidates": candidates,
        "kept": int(kept_counts.sum()),
        "kl_gold_silver": kl_divergence(gold_labels, kept_counts),
        "high_similarity_share": high_similarity_share(kept_counts),
    }


def thin_silver_warning(strategy: str, labeled: int, kept_counts: np.ndarray, gold_rows: int, task: TaskType) -> str | None:
    """A one-line warning when a strategy keeps fewer silver pairs than THIN_SILVER_SHARE of the gold train split,
    saying why where the cause is known (class-ratio selection keeps only as many pairs as the teacher finds
    positives); None otherwise.

    Example:
        thin_silver_warning("kde", 160580, kept_histogram, 3668, "classification")
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
    if strategy == "kde":
        return f"{line}; a larger pool (sampling.kde_pool) keeps more"
    return line
