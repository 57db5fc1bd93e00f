"""The gold step: a scenario's labeled splits read into the run directory, with their rejects and counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from augsbert_ray.config import DataSpec, JobSpec, SpecError
from augsbert_ray.data import GoldData, check_gold_usable, check_reject_fractions, load_gold, write_rejects
from augsbert_ray.layout import TrainFile
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.tuning.trial_loop import cull_step, total_steps


@dataclass(frozen=True)
class Gold:
    """Gold (or source, or target) splits as read, with their counts for metrics.json and the train file fits read."""

    splits: GoldData
    counts: dict[str, Any]
    train_file: TrainFile


def read_gold(ctx: RunContext, target: Gold | None = None) -> Gold:
    """The gold (in-domain) or source (transfer) pairs, into gold/ with rejects.jsonl and counts; a source's train
    holds none of the ``target``'s dev and test pairs (per data.on_overlap)."""
    held_out = {f"target_{split}": target.splits.split(split) for split in ("dev", "test")} if target is not None else None
    gold = read_splits(ctx, ctx.spec.data, "gold", "", held_out)
    check_gold_usable(gold.splits, ctx.spec)
    check_sbert_cullable(ctx.spec, gold.splits.train.num_rows)
    return gold


def check_sbert_cullable(spec: JobSpec, train_rows: int) -> None:
    """A seed search of SBERT needs a cull step; checked on reading gold, not after the teacher's fit. (An AugSBERT
    search adds silver to these pairs, so gold alone cannot refuse it.)"""
    if spec.tuning is not None and "sbert" in spec.tuned_models():
        try:
            cull_step(total_steps(train_rows, spec.bi_encoder.batch_size, spec.bi_encoder.epochs), spec.tuning.cull_at)
        except ValueError as exc:
            raise SpecError(f"tuning of sbert on {train_rows} gold train pairs (bi_encoder.batch_size="
                            f"{spec.bi_encoder.batch_size}, epochs={spec.bi_encoder.epochs}): {exc}") from None


def read_target(ctx: RunContext) -> Gold:
    """The transfer target's splits, into target/ with target_rejects.jsonl and target_* counts."""
    assert ctx.spec.target is not None
    target = read_splits(ctx, ctx.spec.target.data, "target", "target_")
    check_gold_usable(target.splits, ctx.spec, target=True)
    return target


def read_splits(
    ctx: RunContext, data: DataSpec, folder: str, prefix: str, held_out: dict[str, pa.Table] | None = None
) -> Gold:
    gold = load_gold(data, ctx.spec.seed, ctx.data_dir, held_out)
    rejects_path = ctx.layout.rejects(prefix)
    write_rejects(gold.rejects, rejects_path)
    counts = {
        f"{prefix}rows_read": gold.rows_read,
        f"{prefix}rejected": len(gold.rejects),
        f"{prefix}accepted": gold.rows_read - len(gold.rejects),
        f"{prefix or 'gold_'}train_before_limit": gold.train_before_limit,
        f"{prefix or 'gold_'}train": gold.train.num_rows,
        f"{prefix or 'gold_'}dev": gold.dev.num_rows,
        f"{prefix or 'gold_'}test": gold.test.num_rows,
        **gold.cleaning_counts(prefix or "gold_"),
    }
    check_reject_fractions(gold, data.max_reject_fraction, rejects_path, folder, f"{prefix.replace('_', '.')}data.max_reject_fraction")
    ctx.layout.split(folder, "train").parent.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        pq.write_table(gold.split(split), ctx.layout.split(folder, split))
    return Gold(gold, counts, ctx.layout.train_file(folder))


def train_labels(gold: GoldData) -> np.ndarray:
    return gold.train.column("label").to_numpy().astype(np.float64)


