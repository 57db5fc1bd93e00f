"""BM25 sampling with bm25s: every sentence queries the pool and keeps its top-k lexical neighbours.

The corpus is tokenized once. Up to ``shard_size`` sentences, one plain bm25s index is searched in this process.
Above it, document frequencies, the document count and the average length are computed over the whole corpus;
Ray tasks then each index one shard of the corpus with those global statistics and search it with a chunk of the
queries; per-shard hits merge into the ranking an unsharded index gives (scores equal to float rounding, so hits
whose scores differ only in their last bits may swap). Ties are ranked by sentence id, and a query whose hits tie
past the depth is searched deeper until the tie ends, so that bm25s does not choose among them. A sentence without
a token (``"1."``, stopwords only) finds nothing.
"""

from __future__ import annotations

import os

# Where jax is installed, importing bm25s runs a jax op (bm25s.selection); on a GPU machine jax would then take 75%
# of the GPU's memory in this process, and the fits and labeling actors sharing the GPU run out of it (seen on an
# H200). bm25s here retrieves with numba, so jax may as well stay on the CPU, unless the user chose otherwise.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import bm25s  # noqa: E402
import numpy as np  # noqa: E402
import ray  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from bm25s.scoring import _build_idf_array, _build_scores_and_indices_for_matrix, _calculate_doc_freqs, _select_idf_scorer

from augsbert_ray.sampling.neighbours import check_top_k, merge_ranked, search_depth, top_k_pairs
from augsbert_ray.sampling.pairs import SentencePool

QUERY_CHUNK = 50_000


class GlobalStatsBM25(bm25s.BM25):
    """A bm25s index over one shard, scored with whole-corpus IDF and average document length.

    bm25s documents ``build_index_from_ids`` as the hook to override for this.
    """

    def __init__(self, doc_frequencies: np.ndarray, n_docs: int, avg_doc_len: float) -> None:
        super().__init__(backend="numba")  # JIT-compiled retrieval: several times the numpy backend's speed
        self.global_doc_frequencies = doc_frequencies
        self.global_n_docs = n_docs
        self.global_avg_doc_len = avg_doc_len

    def build_index_from_ids(self, unique_token_ids, corpus_token_ids, show_progress=False, leave_progress=False):
        n_vocab = len(self.global_doc_frequencies)
        self.nonoccurrence_array = None  # only BM25L/BM25+ need one; this is bm25s' default variant
        global_frequencies = dict(enumerate(self.global_doc_frequencies.tolist()))
        idf = _build_idf_array(global_frequencies, self.global_n_docs, _select_idf_scorer(self.idf_method), self.dtype)
        scores, doc_idx, vocab_idx = _build_scores_and_indices_for_matrix(
            corpus_token_ids=corpus_token_ids,
            idf_array=idf,
            avg_doc_len=self.global_avg_doc_len,
            # bm25s sizes its buffers from these: they must be the shard's own frequencies
            doc_frequencies=_calculate_doc_freqs(corpus_token_ids, unique_token_ids, show_progress=False),
            k1=self.k1,
            b=self.b,
            delta=self.delta,
            nonoccurrence_array=None,
            method=self.method,
            dtype=self.dtype,
            int_dtype=self.int_dtype,
            show_progress=False,
        )
        matrix = sp.csc_matrix((scores, (doc_idx, vocab_idx)), shape=(len(corpus_token_ids), n_vocab), dtype=self.dtype)
        return {"data": matrix.data, "indices": matrix.indices, "indptr": matrix.indptr, "num_docs": len(corpus_token_ids)}


def _plain_index(tokens: bm25s.tokenization.Tokenized) -> bm25s.BM25:
    retriever = bm25s.BM25(backend="numba")  # JIT-compiled retrieval: several times the numpy backend's speed
    retriever.index(tokens, show_progress=False)
    return retriever


def _shard_index(shard_ids: list[list[int]], vocab: dict, stats: tuple) -> GlobalStatsBM25:
    retriever = GlobalStatsBM25(*stats)
    retriever.index((shard_ids, dict(vocab)), show_progress=False)  # a copy: bm25s adds "" to the vocab it gets
    return retriever


def _retrieve(
    retriever: bm25s.BM25 | None, offset: int, query_ids: list[list[int]], vocab: dict, depth: int, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``depth`` hits of each query within the retriever's shard (None: a shard without a token), as global
    sentence ids ranked by score, then id (-1: none)."""
    docs_here = retriever.scores["num_docs"] if retriever is not None else 0
    hits = min(depth, docs_here)
    ids, scores = np.full((len(query_ids), hits), -1, dtype=np.int64), np.zeros((len(query_ids), hits), dtype=np.float32)
    # bm25s takes a list that starts with an empty query for a malformed one: a query without tokens finds nothing
    pending = np.flatnonzero([len(query) > 0 for query in query_ids]) if hits else np.zeros(0, dtype=np.int64)
    k = min(2 * hits, docs_here)
    while len(pending):
        queries = bm25s.tokenization.Tokenized(ids=[query_ids[q] for q in pending], vocab=vocab)
        docs, found = retriever.retrieve(queries, k=k, show_progress=False, n_threads=threads)  # type: ignore[union-attr]
        order = np.lexsort((docs, -found), axis=1)
        docs, found = np.take_along_axis(docs, order, axis=1), np.take_along_axis(found, order, axis=1)
        ids[pending], scores[pending] = docs[:, :hits] + offset, found[:, :hits]
        last = found[:, hits - 1]
        # a positive score tied up to the k-th hit may tie with hits past it, of which bm25s chose some
        pending = pending[(last > 0) & (last == found[:, -1])] if k < docs_here else pending[:0]
        k = min(2 * k, docs_here)
    return ids, scores


def _has_tokens(token_ids: list[list[int]]) -> bool:
    """Whether bm25s can index these sentences: it fails where none has a token."""
    return any(len(ids) for ids in token_ids)


def _search_shard(
    shard_ids: list[list[int]], offset: int, query_ids: list[list[int]], vocab: dict, stats: tuple, depth: int, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """A Ray task's work: index one shard and search it with a chunk of the queries."""
    retriever = _shard_index(shard_ids, vocab, stats) if _has_tokens(shard_ids) else None
    return _retrieve(retriever, offset, query_ids, vocab, depth, threads)


def bm25_neighbours(
    sentences: list[str], depth: int, shard_size: int, cpus: float = 1, query_chunk: int = QUERY_CHUNK
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, scores), each (n, depth): every sentence's best BM25 matches in the whole corpus, ties ranked by id."""
    threads = max(1, int(cpus))
    tokens = bm25s.tokenize(sentences, stopwords="en", show_progress=False)
    n = len(sentences)
    chunks = [tokens.ids[start : start + query_chunk] for start in range(0, n, query_chunk)]
    if n <= shard_size:
        # one plain bm25s index, built once in this process: its own statistics are the corpus's, and Ray tasks
        # would add only their overhead
        retriever = _plain_index(tokens) if _has_tokens(tokens.ids) else None
        per_chunk = [[_retrieve(retriever, 0, chunk, tokens.vocab, depth, threads)] for chunk in chunks]
    else:
        vocab_size = max(tokens.vocab.values(), default=-1) + 2  # room for the "" token bm25s may add
        doc_frequencies = np.zeros(vocab_size, dtype=np.int64)
        for ids in tokens.ids:
            doc_frequencies[np.unique(np.asarray(ids, dtype=np.int64))] += 1
        stats = (doc_frequencies, n, float(np.mean([len(ids) for ids in tokens.ids])))
        search = ray.remote(num_cpus=cpus)(_search_shard)
        vocab_ref, stats_ref = ray.put(tokens.vocab), ray.put(stats)
        shard_refs = [(start, ray.put(tokens.ids[start : start + shard_size])) for start in range(0, n, shard_size)]
        chunk_refs = [ray.put(chunk) for chunk in chunks]
        refs = [[search.remote(ids, start, chunk_ref, vocab_ref, stats_ref, depth, threads) for start, ids in shard_refs]
                for chunk_ref in chunk_refs]
        per_chunk = [ray.get(chunk_refs) for chunk_refs in refs]
    results = [merge_ranked(hits, depth) for hits in per_chunk]
    return np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results])


def shares_a_term(sentences: list[str], chunk: int = 10_000) -> bool:
    """Whether two of the sentences share a term that BM25 indexes (stopwords and punctuation are not terms):
    without one, BM25 finds no pair. Tokenizes chunk by chunk and stops at the first shared term.

    Args:
        sentences: The pool's sentences.
        chunk: Sentences tokenized at a time.

    Example:
        ::

            shares_a_term(["The cat sat.", "A cat ran."])  # True
            shares_a_term(["我喜欢猫。", "我喜欢狗。"])  # False: unsegmented text is one term per sentence
    """
    seen: set[str] = set()
    for start in range(0, len(sentences), chunk):
        for terms in bm25s.tokenize(sentences[start : start + chunk], stopwords="en", return_ids=False, show_progress=False):
            unique = set(terms)
            if unique & seen:
                return True
            seen |= unique
    return False


def sample_bm25(
    pool: SentencePool, top_k: int, excluded: np.ndarray, shard_size: int = 500_000, cpus: float = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(codes, BM25 scores) of the union of each sentence's top-k lexical neighbours.

    Zero-score hits (no shared term) are never neighbours.

    Args:
        pool: The sentences; each one queries all the others.
        top_k: Neighbours kept per sentence, after dropping itself, excluded pairs and zero scores.
        excluded: Pair codes never to return (``pool.gold_codes``: the gold pairs).
        shard_size: Sentences up to which one index is searched in this process; above it, Ray tasks search shards
            of this many sentences (``sampling.bm25_shard_size``).
        cpus: CPUs of each search task, and the retrieval threads (their whole number, at least 1).

    Returns:
        The pair codes, each once (a pair found from both ends keeps its higher score), in code order, and their
        BM25 scores (float32).

    Example:
        ::

            codes, scores = sample_bm25(pool, 3, pool.gold_codes([gold.train, gold.dev, gold.test]))
    """
    check_top_k(pool, top_k)
    neighbours, scores = bm25_neighbours(pool.sentences, search_depth(pool, top_k, excluded), shard_size, cpus)
    return top_k_pairs(pool, neighbours, scores, top_k, excluded)
