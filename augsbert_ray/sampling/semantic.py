"""Semantic-search sampling: embed every sentence with a bi-encoder on a Ray Data actor pool, then
take each sentence's top-k cosine neighbours with faiss (exact flat index for small corpora, HNSW or
IVF above a threshold, on GPU when one is there)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import ray
import ray.data

from augsbert_ray.config import LabelingSpec, SamplingSpec
from augsbert_ray.sampling.neighbours import check_top_k, search_depth, top_k_pairs
from augsbert_ray.sampling.pairs import SentencePool
from augsbert_ray.scoring import BiEncoderScorer


class SentenceEmbedder:
    """Ray Data UDF: the bi-encoder is loaded once per actor; output is L2-normalized float32."""

    def __init__(self, model: str, threads: int, batch_size: int, gpu: bool = False) -> None:
        self.scorer = BiEncoderScorer(model, batch_size, threads=threads, gpu=gpu)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"idx": batch["idx"], "embedding": self.scorer.embed(batch["sentence"].tolist())}


def embed_sentences(sentences: list[str], model: str, resources: LabelingSpec) -> ray.data.Dataset:
    """A materialized dataset of (idx, embedding), computed on the labeling actor pool's resources."""
    rows = ray.data.from_items([{"idx": i, "sentence": s} for i, s in enumerate(sentences)])
    return rows.map_batches(
        SentenceEmbedder,
        fn_constructor_kwargs={
            "model": model,
            "threads": resources.threads_per_actor or max(1, int(resources.cpus_per_actor)),
            "batch_size": resources.batch_size,
            "gpu": resources.gpus_per_actor > 0,
        },
        batch_size=resources.batch_size * 4,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(min_size=resources.min_actors, max_size=resources.max_actors),
        num_cpus=resources.cpus_per_actor,
        num_gpus=resources.gpus_per_actor,
    ).materialize()


def build_index(vectors: np.ndarray, kind: str, threshold: int) -> Any:
    """Inner product on unit vectors = cosine. ``auto``: exact below ``threshold`` vectors, else HNSW."""
    import faiss

    n, dim = vectors.shape
    if kind == "auto":
        kind = "flat" if n < threshold else "hnsw"
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = 128
    else:
        nlist = max(1, min(int(4 * math.sqrt(n)), n // 39))  # faiss wants >= 39 training points per list
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = min(nlist, max(16, nlist // 8))
    if kind in ("flat", "ivf") and faiss.get_num_gpus() > 0:
        index = faiss.index_cpu_to_all_gpus(index)
    index.add(vectors)
    return index


def faiss_search(
    embedded: ray.data.Dataset, n: int, depth: int, kind: str, threshold: int, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``depth`` nearest sentences of each of the ``n`` embedded sentences (rows ``idx``, ``embedding``), itself
    included: ids and inner-product scores, each ``(n, depth)``. ``kind``/``threshold`` choose the index as
    ``sampling.semantic_index``/``ann_threshold`` do."""
    import faiss

    faiss.omp_set_num_threads(threads)
    vectors = None
    for batch in embedded.iter_batches(batch_format="numpy", batch_size=8192):
        if vectors is None:
            vectors = np.empty((n, batch["embedding"].shape[1]), dtype=np.float32)
        vectors[batch["idx"]] = batch["embedding"]
    index = build_index(vectors, kind, threshold)
    scores, ids = index.search(vectors, depth)
    return ids.astype(np.int64), scores.astype(np.float32)


def semantic_neighbours(
    sentences: list[str], model: str, depth: int, spec: SamplingSpec, resources: LabelingSpec
) -> tuple[np.ndarray, np.ndarray]:
    embedded = embed_sentences(sentences, model, resources)
    search = ray.remote(num_cpus=spec.search_cpus, num_gpus=1 if resources.gpus_per_actor else 0)(faiss_search)
    threads = max(1, int(spec.search_cpus))
    return ray.get(search.remote(embedded, len(sentences), depth, spec.semantic_index, spec.ann_threshold, threads))


def sample_semantic(
    pool: SentencePool, model: str, excluded: np.ndarray, spec: SamplingSpec, resources: LabelingSpec
) -> tuple[np.ndarray, np.ndarray]:
    """(codes, cosine) of the union of each sentence's top-k semantic neighbours.

    Embeds on a Ray Data actor pool sized by ``resources``, then searches with faiss in a Ray task.

    Args:
        pool: The sentences; each one queries all the others.
        model: The bi-encoder that embeds them: a directory or Hugging Face id.
        excluded: Pair codes never to return (``pool.gold_codes``: the gold pairs).
        spec: ``top_k`` (neighbours kept per sentence), the faiss index (``semantic_index``, ``ann_threshold``) and
            the search task's CPUs (``search_cpus``).
        resources: The embedding actors: their number, CPUs, GPUs (GPU actors also give the faiss task a GPU), threads
            and batch size (a job spec's labeling section).

    Returns:
        The pair codes, each once, in code order, and their cosine similarities (float32).

    Example:
        ::

            gold_codes = pool.gold_codes([gold.train, gold.dev, gold.test])
            codes, scores = sample_semantic(pool, "runs/<run>/models/sbert", gold_codes, SamplingSpec(), LabelingSpec())
    """
    check_top_k(pool, spec.top_k)
    neighbours, scores = semantic_neighbours(pool.sentences, model, search_depth(pool, spec.top_k, excluded), spec, resources)
    return top_k_pairs(pool, neighbours, scores, spec.top_k, excluded)
