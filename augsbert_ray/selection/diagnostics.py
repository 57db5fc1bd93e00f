"""How close a silver score distribution is to the gold one, from the merged score histogram."""

from __future__ import annotations

import numpy as np
from scipy.stats import gaussian_kde

from augsbert_ray.selection.kde import GRID, silver_density

HIGH_SIMILARITY = 0.6


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
