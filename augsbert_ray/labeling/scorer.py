"""The Ray Data actor that labels whole shards: read, check, tokenize, length-bucket, score, write.

One call labels one shard and writes it under a temporary name, then renames it: a shard file that
exists is complete. The call returns only the shard's counts, so nothing large reaches the driver.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from augsbert_ray.config import SpecError
from augsbert_ray.data.rejects import EMPTY, NUL, Reject, is_blank
from augsbert_ray.files import atomic_path, atomic_write_text
from augsbert_ray.labeling.plan import Shard, read_shard
from augsbert_ray.runtime import log
from augsbert_ray.scoring import Teacher, TeacherScorer
from augsbert_ray.scoring.backend import CALIBRATION_PAIRS

WINDOW = 4096  # pairs sorted by length together; bounds actor memory and padding
PROGRESS_EVERY_S = 30.0  # a progress line within a shard, at most this often
STATS_KEY = b"augsbert.label"
COUNT_KEYS = ("pairs_in", "labeled", "rejected", "truncated", "tokens", "tokens_sq", "padded_tokens")
OUTPUT_COLUMNS = ("score", "labeler")


def output_schema(schema: pa.Schema) -> pa.Schema:
    """Input columns (a stale score/labeler replaced), then score, labeler and strategy."""
    fields = [field for field in schema if field.name not in OUTPUT_COLUMNS]
    fields += [pa.field("score", pa.float32()), pa.field("labeler", pa.string())]
    if "strategy" not in schema.names:
        fields.append(pa.field("strategy", pa.string()))
    return pa.schema(fields)


def is_sentence(text: str | None) -> bool:
    return text is not None and not is_blank(text)


def check_pairs(table: pa.Table, text_columns: tuple[str, str], path: str, lines: np.ndarray) -> tuple[np.ndarray, list[Reject]]:
    """Rows whose two sentences are both non-empty text; every other row becomes a reject with its reason
    and the line where its record starts in its file (``lines``, one per row)."""
    valid = np.ones(table.num_rows, dtype=bool)
    rejects: list[Reject] = []
    columns = {name: table.column(name).to_pylist() for name in text_columns}
    for row in range(table.num_rows):
        for name in text_columns:
            text = columns[name][row]
            if not is_sentence(text) or "\x00" in text:
                valid[row] = False
                other = columns[text_columns[1] if name == text_columns[0] else text_columns[0]][row]
                reason = "missing sentence" if text is None else EMPTY if is_blank(text) else NUL
                rejects.append(Reject(path, int(lines[row]), name, reason, (other or "").replace("\x00", "\\x00")))
                break
    return valid, rejects


def calibration_pairs(shards: list[Shard], text_columns: tuple[str, str]) -> list[tuple[str, str]]:
    """The input's first CALIBRATION_PAIRS pairs with two sentences: what int8 calibrates on, the same for every actor."""
    pairs: list[tuple[str, str]] = []
    for shard in shards:
        for window in read_shard(shard, CALIBRATION_PAIRS):
            first, second = (window.table.column(name).to_pylist() for name in text_columns)
            pairs += [(a, b) for a, b in zip(first, second) if is_sentence(a) and is_sentence(b)]
            if len(pairs) >= CALIBRATION_PAIRS:
                return pairs[:CALIBRATION_PAIRS]
    return pairs


class ShardLabeler:
    """Ray Data class UDF: the teacher's models are loaded once per actor; each row of a batch names a shard to label.

    Args:
        shards: Every shard the actor may be asked for (``plan_shards``); a batch names them by ``Shard.name``.
        output: An existing directory that the shards, and their rejects under _rejects/, are written to.
        teacher: The model(s) that score each pair.
        labeler: The provenance written into every pair's ``labeler`` column.
        text_columns: The input's two sentence columns.
        batch_size: Pairs per model call.
        threads: Torch or ONNX Runtime threads (on a GPU, the tokenizer's).
        precision: ``fp32``, ``bf16``, ``fp16`` or ``int8`` (``labeling.precision``).
        runtime: ``auto``, ``torch`` or ``onnx``: what runs a cross-encoder (``labeling.runtime``).
        max_seq_length: Tokens per pair (per sentence for a bi-encoder); None: the model's own.
        strategy: The ``strategy`` value of pairs whose input has no such column.
        onnx_cache: The directory a cross-encoder's ONNX export is kept in.
        calibration: The pairs an int8 export calibrates on; None for other precisions.
        gpu: Whether the labeler reserved a GPU (``labeling.gpus_per_actor`` above 0); without, it runs on the CPU.

    Example:
        ::

            labeler = ShardLabeler(shards, "silver", teacher, teacher.labeler, ("sentence1", "sentence2"), 64, 2,
                                   "fp32", "auto", None, "given", "silver/_onnx")
            labeler.label_or_refuse(shards[0])  # the shard's counts: {'shard': ..., 'labeled': ..., 'error': ''}
    """

    def __init__(
        self, shards: list[Shard], output: str, teacher: Teacher, labeler: str, text_columns: tuple[str, str],
        batch_size: int, threads: int, precision: str, runtime: str, max_seq_length: int | None, strategy: str,
        onnx_cache: str, calibration: list[tuple[str, str]] | None = None, gpu: bool = False,
    ) -> None:
        self.shards = {shard.name: shard for shard in shards}
        self.output = Path(output)
        self.teacher = teacher
        self.scorer = TeacherScorer(teacher, batch_size=batch_size, precision=precision, threads=threads,
                                    max_seq_length=max_seq_length, gpu=gpu, runtime=runtime, cache_dir=Path(onnx_cache),
                                    calibration=calibration)
        self.labeler, self.text_columns, self.strategy = labeler, text_columns, strategy

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        stats = [self.label_or_refuse(self.shards[name]) for name in batch["shard"].tolist()]
        return {key: np.array([s[key] for s in stats]) for key in stats[0]}

    def label_or_refuse(self, shard: Shard) -> dict[str, Any]:
        """The shard's counts with ``error`` empty; for input that cannot be labeled, zero counts and the one-line
        error, which the driver raises. (Raised here, it would reach the driver as a Ray task failure without it.)"""
        try:
            return {**self.label_shard(shard), "error": ""}
        except SpecError as exc:
            return {"shard": shard.name, **dict.fromkeys(COUNT_KEYS, 0), "seconds": 0.0, "error": str(exc)}

    def label_shard(self, shard: Shard) -> dict[str, Any]:
        started = time.perf_counter()
        self.scorer.reset()  # a shard's scores do not depend on which shards the actor labeled before
        stats: dict[str, Any] = {"shard": shard.name, **dict.fromkeys(COUNT_KEYS, 0)}
        schema = output_schema(shard.schema)
        rejects: list[Reject] = []
        shown = 0.0
        # the shard exists only once it is complete; a retried shard may overlap a dying actor's attempt
        with atomic_path(self.output / shard.name) as tmp:
            with pq.ParquetWriter(tmp, schema) as writer:
                for window in read_shard(shard, WINDOW):
                    table = window.table
                    valid, window_rejects = check_pairs(table, self.text_columns, shard.path, window.lines)
                    stats["pairs_in"] += table.num_rows + len(window.rejects)
                    rejects += window.rejects + window_rejects
                    kept = table.filter(pa.array(valid)) if not valid.all() else table
                    scores = self.score_window(kept, stats)
                    writer.write_table(self.with_scores(kept, scores, schema))
                    if (elapsed := time.perf_counter() - started) >= shown + PROGRESS_EVERY_S:  # a shard takes minutes
                        shown = elapsed
                        log.info("shard %s: %d pairs so far (%.0f pairs/s)", shard.name, stats["pairs_in"], stats["pairs_in"] / elapsed)
                stats["labeled"], stats["rejected"] = stats["pairs_in"] - len(rejects), len(rejects)
                stats["seconds"] = round(time.perf_counter() - started, 3)
                writer.add_key_value_metadata({STATS_KEY: json.dumps(stats).encode()})
            (self.output / "_rejects").mkdir(exist_ok=True)
            rejects.sort(key=lambda reject: reject.line)
            atomic_write_text(self.output / "_rejects" / f"{shard.name}.jsonl",
                              "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in rejects))
        return stats

    def score_window(self, table: pa.Table, stats: dict[str, Any]) -> np.ndarray:
        """The teacher's scores in row order; the first model's tokenization is what ``stats`` counts."""
        first, second = (table.column(name).to_pylist() for name in self.text_columns)
        if not first:
            return np.zeros(0, dtype=np.float32)
        return self.scorer.score(first, second, stats)

    def with_scores(self, table: pa.Table, scores: np.ndarray, schema: pa.Schema) -> pa.Table:
        columns = {field.name: table.column(field.name) for field in schema if field.name in table.column_names and field.name not in OUTPUT_COLUMNS}
        columns["score"] = pa.array(scores, pa.float32())
        columns["labeler"] = pa.array([self.labeler] * table.num_rows, pa.string())
        if "strategy" not in table.column_names:
            columns["strategy"] = pa.array([self.strategy] * table.num_rows, pa.string())
        return pa.table([columns[field.name] for field in schema], schema=schema)
