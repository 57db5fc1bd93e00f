"""Candidate generators. Each recombines a sentence pool into candidate pairs (no self-pairs, no gold
pairs, (a,b) = (b,a)) with `sentence1`, `sentence2`, `strategy` and `retrieval_score` columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from augsbert_ray.config import LabelingSpec, SamplingSpec, Strategy
from augsbert_ray.sampling.bm25 import bm25_neighbours, sample_bm25, shares_a_term
from augsbert_ray.sampling.neighbours import search_depth, top_k_pairs
from augsbert_ray.sampling.pairs import SentencePool, given_pairs
from augsbert_ray.sampling.random_pairs import available_pairs, sample_random
from augsbert_ray.sampling.semantic import embed_sentences, faiss_search, sample_semantic


Neighbours = tuple[np.ndarray, np.ndarray]  # pair codes and their retrieval scores


def candidate_table(
    strategy: Strategy,
    pool: SentencePool,
    excluded: np.ndarray,
    spec: SamplingSpec,
    seed: int,
    *,
    n_random: int = 0,
    semantic_model: str | None = None,
    resources: LabelingSpec | None = None,
    found: dict[str, Neighbours] | None = None,
) -> pa.Table:
    """Candidates of one strategy. ``n_random`` sizes random and KDE pools; semantic search needs a
    bi-encoder and the actor resources to embed with. ``found`` keeps the BM25 and semantic neighbours of
    this pool between calls, so that bm25+semantic unites those already searched instead of searching again.

    Args:
        strategy: ``random``, ``kde`` (a random pool for selection), ``bm25``, ``semantic`` or ``bm25+semantic``.
        pool: The sentences to recombine.
        excluded: Pair codes never to return (``pool.gold_codes``: the gold pairs).
        spec: The sampling section of a job spec (``top_k``, BM25 shards, the faiss index).
        seed: Draws the random pairs.
        n_random: How many pairs ``random`` and ``kde`` draw.
        semantic_model: The bi-encoder that embeds for ``semantic`` and ``bm25+semantic``.
        resources: The actor pool that embeds (a job spec's labeling section).
        found: Neighbours already searched in this pool, filled by this call.

    Returns:
        The candidate pairs in a deterministic order: sentence1, sentence2, strategy and retrieval_score (BM25
        score or cosine; null for random pairs and the union).

    Example:
        ::

            pool = SentencePool.from_pairs(gold.train)
            gold_pairs = pool.gold_codes([gold.train, gold.dev, gold.test])
            bm25 = candidate_table("bm25", pool, gold_pairs, SamplingSpec(top_k=3), seed=42)
            random = candidate_table("random", pool, gold_pairs, SamplingSpec(), seed=42, n_random=bm25.num_rows)
    """
    found = {} if found is None else found

    def neighbours(kind: str) -> Neighbours:
        if kind not in found:
            if kind == "bm25":
                found[kind] = sample_bm25(pool, spec.top_k, excluded, spec.bm25_shard_size, spec.search_cpus)
            elif semantic_model is None or resources is None:
                raise ValueError(f"strategy {strategy!r} needs a semantic_model and resources")
            else:
                found[kind] = sample_semantic(pool, semantic_model, excluded, spec, resources)
        return found[kind]

    if strategy in ("random", "kde"):
        return pool.candidates(sample_random(pool, n_random, excluded, seed), strategy)
    if strategy in ("bm25", "semantic"):
        codes, scores = neighbours(strategy)
        return pool.candidates(codes, strategy, scores)
    if strategy == "bm25+semantic":
        # BM25 and cosine scores are not comparable, so the union carries no retrieval score
        return pool.candidates(np.union1d(neighbours("bm25")[0], neighbours("semantic")[0]), strategy)
    raise ValueError(f"unknown sampling strategy {strategy!r}")


__all__ = ["Neighbours", "SentencePool", "available_pairs", "bm25_neighbours", "candidate_table", "embed_sentences", "faiss_search", "given_pairs",
           "sample_bm25", "sample_random", "sample_semantic", "search_depth", "shares_a_term", "top_k_pairs"]
