"""Search a corpus with queries (retrieval), where the pair samplers search sentences with themselves: BM25 with
bm25s (query and corpus tokenized with one vocabulary, ties ranked by document row) and dense search with a
bi-encoder and faiss (inner product of unit embeddings). Both return the top hits as row numbers and scores, and
``hits_by_query`` turns them into {query id: {doc id: score}}, leaving out the documents never to be ranked."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from augsbert_ray.sampling.bm25 import _has_tokens, _plain_index, _retrieve, bm25s
from augsbert_ray.sampling.semantic import build_index
from augsbert_ray.scoring import BiEncoderScorer


def bm25_search(corpus: Sequence[str], queries: Sequence[str], depth: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``depth`` best BM25 documents.

    Args:
        corpus: The documents' texts.
        queries: The queries' texts.
        depth: Hits per query (at most the corpus size).
        threads: Retrieval threads.

    Returns:
        (rows, scores), each (len(queries), depth): document rows ranked by score, then row; a hit with no shared
        term has score 0 (``hits_by_query`` drops it).

    Example:
        >>> rows, scores = bm25_search(["the cat sat", "dogs bark"], ["cat"], 1)
        >>> rows.tolist(), bool(scores[0, 0] > 0)
        ([[0]], True)
    """
    # one vocabulary for both: query terms the corpus lacks match nothing, and the index needs no second tokenizer
    tokens = bm25s.tokenize(list(corpus) + list(queries), stopwords="en", show_progress=False)
    corpus_ids, query_ids = tokens.ids[: len(corpus)], tokens.ids[len(corpus):]
    depth = min(depth, len(corpus))
    if not _has_tokens(corpus_ids):  # bm25s cannot index a corpus without a term
        return np.full((len(queries), depth), -1, np.int64), np.zeros((len(queries), depth), np.float32)
    retriever = _plain_index(bm25s.tokenization.Tokenized(ids=corpus_ids, vocab=tokens.vocab))
    return _retrieve(retriever, 0, query_ids, tokens.vocab, depth, threads)


def embed_texts(
    model: str, texts: Sequence[str], threads: int = 1, gpu: bool = False, batch_size: int = 64, max_seq_length: int | None = None,
) -> np.ndarray:
    """Unit-length float32 embeddings of ``texts`` by a bi-encoder (directory or Hugging Face id), each cut to
    ``max_seq_length`` tokens (None: the model's own)."""
    return BiEncoderScorer(model, batch_size, threads=threads, max_seq_length=max_seq_length, gpu=gpu).embed(list(texts))


def dense_search(
    corpus_vectors: np.ndarray, query_vectors: np.ndarray, depth: int, index: str = "flat", ann_threshold: int = 100_000,
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``depth`` nearest documents by inner product of unit embeddings (cosine), with faiss.

    Args:
        corpus_vectors: (documents, dim), unit length.
        query_vectors: (queries, dim), unit length.
        depth: Hits per query (at most the corpus size).
        index: ``flat`` (exact), ``hnsw``, ``ivf`` or ``auto`` (flat below ``ann_threshold`` documents).
        ann_threshold: See ``index``.

    Returns:
        (rows, scores), each (queries, depth).

    Example:
        >>> rows, _ = dense_search(np.eye(3, dtype=np.float32), np.eye(3, dtype=np.float32)[[2]], 1)
        >>> rows.tolist()
        [[2]]
    """
    depth = min(depth, len(corpus_vectors))
    found = build_index(np.ascontiguousarray(corpus_vectors, dtype=np.float32), index, ann_threshold)
    scores, rows = found.search(np.ascontiguousarray(query_vectors, dtype=np.float32), depth)
    return rows.astype(np.int64), scores.astype(np.float32)


def hits_by_query(
    rows: np.ndarray, scores: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str],
    excluded: Mapping[str, Collection[str]], keep: int, positive_only: bool = False,
) -> dict[str, dict[str, float]]:
    """{query id: {doc id: score}} of each query's best ``keep`` hits, its excluded documents (and with
    ``positive_only`` hits scoring 0 or less: BM25's "no shared term") left out first.

    Example:
        >>> hits_by_query(np.array([[1, 0]]), np.array([[2.0, 1.0]]), ["q"], ["a", "b"], {"q": {"b"}}, 1)
        {'q': {'a': 1.0}}
    """
    run: dict[str, dict[str, float]] = {}
    for query, query_rows, query_scores in zip(query_ids, rows, scores):
        banned = excluded.get(query, ())
        hits: dict[str, float] = {}
        for row, score in zip(query_rows.tolist(), query_scores.tolist()):
            if len(hits) == keep:
                break
            if row < 0 or (positive_only and score <= 0) or doc_ids[row] in banned:
                continue
            hits[doc_ids[row]] = float(score)
        run[query] = hits
    return run
