"""A cross-encoder as a ``PairScorer``: each window of pairs tokenized together, sorted by token length so that
batches carry little padding, and scored in batches by torch or ONNX Runtime (``PairModel``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from augsbert_ray.scoring.backend import PairModel
from augsbert_ray.scoring.base import count_tokens, new_stats


class CrossEncoderScorer:
    """Scores pairs with a cross-encoder (one output: num_labels 1), its activation applied.

    Args:
        model: A model directory or Hugging Face id, or a loaded ``PairModel``.
        batch_size: Pairs per model call.
        precision: ``fp32``, ``bf16``, ``fp16`` or ``int8``.
        threads: Torch or ONNX Runtime threads.
        max_seq_length: Tokens per pair; None: the model's own.
        runtime: ``torch``, ``onnx`` or ``auto`` (ONNX Runtime on a CPU at fp32/int8).
        cache_dir: Where an ONNX export is kept.
        gpu: Score on the GPU this process reserved.

    Example:
        ::

            CrossEncoderScorer("runs/<run>/models/cross_encoder").score(["A man plays."], ["A man is playing."])
    """

    def __init__(
        self, model: str | PairModel, batch_size: int = 64, precision: str = "fp32", threads: int = 1,
        max_seq_length: int | None = None, runtime: str = "torch", cache_dir: Path | None = None,
        calibration: list[tuple[str, str]] | None = None, gpu: bool = False,
    ) -> None:
        self.model = model if isinstance(model, PairModel) else PairModel(
            model, precision, threads, max_seq_length, cache_dir, runtime, calibration, gpu)
        self.batch_size = batch_size
        self.pad_id = self.model.tokenizer.pad_token_id or 0

    def reset(self) -> None:
        """Nothing carries over between calls."""

    def score(self, first: list[str], second: list[str], stats: dict[str, Any] | None = None) -> np.ndarray:
        stats = new_stats() if stats is None else stats
        encoded = self.model.tokenizer(first, second, truncation="longest_first", max_length=self.model.max_length)
        stats["truncated"] += sum(1 for encoding in encoded.encodings if encoding.overflowing)
        ids = encoded["input_ids"]
        lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
        count_tokens(stats, lengths)
        order = np.argsort(lengths, kind="stable")
        scores = np.empty(len(ids), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            features = self.pad(encoded, rows, self.batch_width(lengths[rows]))
            stats["padded_tokens"] += features["input_ids"].size
            scores[rows] = self.model.score(features)
        return scores

    def batch_width(self, lengths: np.ndarray) -> int:
        """The longest pair's tokens, rounded up to the model's width multiple."""
        multiple = self.model.width_multiple
        return -(-int(lengths.max()) // multiple) * multiple

    def pad(self, encoded: Any, rows: np.ndarray, width: int) -> dict[str, np.ndarray]:
        features = {}
        for name in self.model.input_names:
            fill = self.pad_id if name == "input_ids" else 0
            array = np.full((len(rows), width), fill, dtype=np.int64)
            for out_row, row in enumerate(rows):
                values = encoded[name][row]
                array[out_row, : len(values)] = values
            features[name] = array
        return features
