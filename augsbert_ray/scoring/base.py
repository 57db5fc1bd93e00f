"""The one interface every way of scoring sentence pairs implements, and the token counts a scorer keeps."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

# What a scorer counts into a labeling shard's stats: pairs truncated to max_seq_length, tokens (and their squares,
# for the spread) and the padded tokens the model ran on.
TOKEN_KEYS = ("truncated", "tokens", "tokens_sq", "padded_tokens")


def new_stats() -> dict[str, Any]:
    return dict.fromkeys(TOKEN_KEYS, 0)


def count_tokens(stats: dict[str, Any], lengths: np.ndarray) -> None:
    stats["tokens"] += int(lengths.sum())
    stats["tokens_sq"] += int((lengths**2).sum())


class PairScorer(Protocol):
    """Scores sentence pairs: a bi-encoder's cosine, a cross-encoder's output, a teacher's (mapped, combined) score,
    or word Jaccard. Evaluation, the teacher gate, tuning trials, labeling actors and semantic search all score
    through one.

    Example:
        >>> from augsbert_ray.scoring import JaccardScorer
        >>> scorer: PairScorer = JaccardScorer()
        >>> scorer.score(["A cat sat."], ["a cat ran"])
        array([0.5])
    """

    def score(self, first: list[str], second: list[str], stats: dict[str, Any] | None = None) -> np.ndarray:
        """One score per pair (``first[i]``, ``second[i]``); token counts are added to ``stats`` when given."""
        ...

    def reset(self) -> None:
        """Forget what was cached, so that the next scores do not depend on what was scored before."""
        ...
