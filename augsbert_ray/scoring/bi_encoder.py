"""A bi-encoder as a ``PairScorer``: the cosine of the two sentences' unit embeddings. With a cache, each distinct
sentence is embedded once (sampled candidates reuse their sentences many times) until ``reset``."""

from __future__ import annotations

from typing import Any

import numpy as np

from augsbert_ray.scoring.backend import EmbeddingModel
from augsbert_ray.scoring.base import count_tokens, new_stats

# Sentences whose embeddings a cached scorer keeps (about 3 KB each at width 768).
EMBEDDING_CACHE = 50_000


class BiEncoderScorer:
    """Scores pairs by the cosine of bi-encoder embeddings. A pair counts as truncated when either sentence is.

    Args:
        model: A model directory or Hugging Face id, a loaded ``EmbeddingModel``, or a SentenceTransformer in memory
            (a fit's model: scored in eval mode, then put back in the mode it was in).
        batch_size: Sentences per model call.
        precision: ``fp32``, ``bf16`` or ``fp16``.
        threads: Torch threads.
        max_seq_length: Tokens per sentence; None: the model's own.
        gpu: Embed on the GPU this process reserved.
        cache: Keep each distinct sentence's embedding (up to EMBEDDING_CACHE) until ``reset``.

    Example:
        ::

            BiEncoderScorer("minilm").score(["A man plays."], ["A man is playing."])  # array([0.9...], dtype=float32)
    """

    def __init__(
        self, model: Any, batch_size: int = 64, precision: str = "fp32", threads: int = 1, max_seq_length: int | None = None,
        gpu: bool = False, cache: bool = False,
    ) -> None:
        if isinstance(model, str):
            model = EmbeddingModel(model, precision, threads, max_seq_length, gpu)
        self.model = model if isinstance(model, EmbeddingModel) else EmbeddingModel.wrap(model)
        self.batch_size, self.cache_on = batch_size, cache
        self.cache: dict[str, tuple[np.ndarray, int]] = {}  # sentence -> (unit embedding, token length)

    def reset(self) -> None:
        self.cache.clear()

    def embed(self, sentences: list[str]) -> np.ndarray:
        """Unit-length float32 embeddings, one row per sentence (in eval mode)."""
        encoder = self.model.encoder
        was_training = encoder.training
        encoder.eval()
        try:
            return self.model.embed(sentences, self.batch_size)
        finally:
            encoder.train(was_training)

    def score(self, first: list[str], second: list[str], stats: dict[str, Any] | None = None) -> np.ndarray:
        if not self.cache_on:
            if stats is not None:
                self.count(first, second, stats)
            return np.sum(self.embed(first) * self.embed(second), axis=1)
        stats = new_stats() if stats is None else stats
        new = [sentence for sentence in dict.fromkeys(first + second) if sentence not in self.cache]
        if len(self.cache) + len(new) > EMBEDDING_CACHE:
            self.cache.clear()
            new = list(dict.fromkeys(first + second))
        if new:
            lengths = self.token_lengths(new)
            self.cache.update(zip(new, zip(self.embed(new), lengths)))
            stats["padded_tokens"] += int(np.minimum(lengths, self.model.max_length).sum())  # the tokens the model ran on
        cached = [self.cache[sentence] for sentence in first + second]
        embeddings = np.stack([embedding for embedding, _ in cached])
        self.count_lengths(np.array([length for _, length in cached], dtype=np.int64), len(first), stats)
        return np.sum(embeddings[: len(first)] * embeddings[len(first) :], axis=1)

    def token_lengths(self, sentences: list[str]) -> list[int]:
        return [len(ids) for ids in self.model.tokenizer(sentences)["input_ids"]]

    def count(self, first: list[str], second: list[str], stats: dict[str, Any]) -> None:
        lengths = np.array(self.token_lengths(first + second), dtype=np.int64)
        stats["padded_tokens"] += int(np.minimum(lengths, self.model.max_length).sum())
        self.count_lengths(lengths, len(first), stats)

    def count_lengths(self, lengths: np.ndarray, pairs: int, stats: dict[str, Any]) -> None:
        limit = self.model.max_length
        stats["truncated"] += int(np.sum((lengths[:pairs] > limit) | (lengths[pairs:] > limit)))
        count_tokens(stats, np.minimum(lengths, limit))
