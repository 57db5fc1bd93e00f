"""Turn per-sentence ranked neighbour lists (from BM25 or faiss) into top-k candidate pairs."""

from __future__ import annotations

import numpy as np

from augsbert_ray.sampling.pairs import SentencePool


def check_top_k(pool: SentencePool, top_k: int, setting: str = "sampling.top_k") -> None:
    """``top_k`` neighbours (named ``setting`` in the error) must exist in the pool."""
    if top_k <= 0:
        raise ValueError(f"{setting} must be positive, got {top_k}")
    if len(pool) == 0:
        raise ValueError("cannot sample pairs from an empty corpus")
    if len(pool) == 1:
        raise ValueError(f"cannot sample pairs from a corpus with a single sentence: {pool.sentences[0]!r}")
    if top_k > len(pool) - 1:
        raise ValueError(f"{setting}={top_k} asks for more neighbours than the {len(pool) - 1} other sentences")


def search_depth(pool: SentencePool, top_k: int, excluded: np.ndarray) -> int:
    """Hits to retrieve per query so that dropping itself and its gold partners still leaves top_k."""
    gold_i, gold_j = pool.decode(excluded)
    degree = np.bincount(np.concatenate([gold_i, gold_j]), minlength=len(pool)) if len(excluded) else np.zeros(1, int)
    return int(min(len(pool), top_k + 1 + degree.max()))


def top_k_pairs(
    pool: SentencePool, neighbours: np.ndarray, scores: np.ndarray, top_k: int, excluded: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scores) of each query's best ``top_k`` usable neighbours, one row per pair.

    ``neighbours[q]`` lists sentence ids ranked for query q (-1 = no hit). Self-matches, gold
    pairs and hits with score <= 0 are skipped before counting; a pair found from both ends is
    kept once, with its higher score.
    """
    query = np.broadcast_to(np.arange(len(pool))[:, None], neighbours.shape)
    found = neighbours >= 0
    codes = np.where(found, pool.encode(query, np.where(found, neighbours, 0)), -1)
    usable = found & (neighbours != query) & (scores > 0) & ~np.isin(codes, excluded)
    keep = usable & (np.cumsum(usable, axis=1) <= top_k)
    codes, scores = codes[keep], scores[keep].astype(np.float32)
    order = np.lexsort((-scores, codes))
    codes, scores = codes[order], scores[order]
    first = np.r_[True, codes[1:] != codes[:-1]] if len(codes) else np.zeros(0, bool)
    return codes[first], scores[first]


def merge_ranked(parts: list[tuple[np.ndarray, np.ndarray]], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-shard ranked hits (ids already global) into one ranking of ``depth`` per query.

    Ties are broken by sentence id, so the merge does not depend on the shard layout.
    """
    ids = np.concatenate([p[0] for p in parts], axis=1)
    scores = np.concatenate([p[1] for p in parts], axis=1)
    order = np.lexsort((ids, -scores), axis=1)[:, :depth]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)
