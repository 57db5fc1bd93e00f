"""Word-set Jaccard similarity: the lexical baseline."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+")


def jaccard_scores(sentences1: Sequence[str], sentences2: Sequence[str]) -> np.ndarray:
    """Word-set Jaccard similarity of each pair (lower-cased \\w+ tokens).

    Args:
        sentences1: The pairs' first sentences.
        sentences2: Their second sentences, as many.

    Returns:
        One score in [0, 1] per pair; 0 when neither sentence has a word.

    Example:
        >>> jaccard_scores(["A cat sat."], ["a cat ran"])
        array([0.5])
    """
    out = np.empty(len(sentences1), dtype=np.float64)
    for i, (a, b) in enumerate(zip(sentences1, sentences2)):
        words_a, words_b = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
        union = words_a | words_b
        out[i] = len(words_a & words_b) / len(union) if union else 0.0
    return out


class JaccardScorer:
    """A ``PairScorer`` of word-set Jaccard similarity (no model, no tokens counted)."""

    def score(self, first: list[str], second: list[str], stats: dict[str, Any] | None = None) -> np.ndarray:
        return jaccard_scores(first, second)

    def reset(self) -> None:
        """Nothing is cached."""
