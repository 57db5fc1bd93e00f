"""Random sampling: pairs drawn uniformly without replacement from all n(n-1)/2 combinations."""

from __future__ import annotations

import numpy as np

from augsbert_ray.sampling.pairs import SentencePool


def _triangle_to_pair(index: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Map a linear index over the upper triangle (i < j) of an n x n matrix to (i, j)."""
    index = index.astype(np.float64)
    i = n - 2 - np.floor(np.sqrt(-8 * index + 4 * n * (n - 1) - 7) / 2.0 - 0.5)
    j = index + i + 1 - n * (n - 1) / 2 + (n - i) * ((n - i) - 1) / 2
    return i.astype(np.int64), j.astype(np.int64)


def available_pairs(pool: SentencePool, excluded: np.ndarray) -> int:
    """How many distinct pairs random sampling can draw: all n(n-1)/2 combinations less the excluded ones.

    Args:
        pool: The sentences to recombine.
        excluded: Distinct pair codes of this pool never to draw (``pool.gold_codes``).

    Example:
        ::

            available_pairs(pool, pool.gold_codes([gold.train, gold.dev, gold.test]))
    """
    return len(pool) * (len(pool) - 1) // 2 - len(excluded)


def sample_random(pool: SentencePool, n_pairs: int, excluded: np.ndarray, seed: int) -> np.ndarray:
    """Codes of ``n_pairs`` distinct random pairs, never a code in ``excluded``.

    Draws in rounds of random triangle indices and keeps new ones, so the n(n-1)/2
    combinations are never materialized.

    Args:
        pool: The sentences to recombine; at least two.
        n_pairs: Pairs to draw; positive, at most ``available_pairs`` (else ValueError).
        excluded: Pair codes never to draw (``pool.gold_codes``: the gold pairs).
        seed: Seeds the draws: the same pool, exclusions and seed give the same codes in the same (draw) order.

    Example:
        ::

            pool.candidates(sample_random(pool, 1000, pool.gold_codes([gold.train]), seed=42), "random")
    """
    if n_pairs <= 0:
        raise ValueError(f"the number of random pairs must be positive, got {n_pairs}")
    if len(pool) < 2:
        raise ValueError(f"cannot sample pairs from a corpus of {len(pool)} sentence(s)")
    available = available_pairs(pool, excluded)
    if n_pairs > available:
        raise ValueError(f"asked for {n_pairs} random pairs but the pool of {len(pool)} sentences has only {available}")
    n = len(pool)
    total = n * (n - 1) // 2
    rng = np.random.default_rng(seed)
    if 2 * n_pairs > total:  # most of the pairs: rejection draws would redraw the few left for many rounds
        codes = pool.encode(*_triangle_to_pair(rng.permutation(total), n))
        return codes[~np.isin(codes, excluded)][:n_pairs]
    kept = np.empty(0, dtype=np.int64)
    while len(kept) < n_pairs:
        draw = rng.integers(0, total, size=max(2 * (n_pairs - len(kept)), 1024))
        codes = pool.encode(*_triangle_to_pair(draw, n))
        # keep first occurrences in draw order, so the result depends only on the seed
        _, first = np.unique(codes, return_index=True)
        codes = codes[np.sort(first)]
        codes = codes[~np.isin(codes, excluded) & ~np.isin(codes, kept)]
        kept = np.concatenate([kept, codes[: n_pairs - len(kept)]])
    return kept
