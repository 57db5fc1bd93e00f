"""Load the gold train/dev/test pairs a job spec names, with their rejects and counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from augsbert_ray.config import DataSpec, SourceSpec, TaskType
from augsbert_ray.data.hygiene import dedupe, shared_pairs, split_overlap
from augsbert_ray.data.paths import named_dataset_files, resolve_data_dir
from augsbert_ray.data.readers import ReadResult, read_pairs
from augsbert_ray.data.rejects import Reject
from augsbert_ray.data.splits import bws_cross_topic, bws_in_topic, carve, random_subset


@dataclass
class GoldData:
    task: TaskType
    train: pa.Table
    dev: pa.Table
    test: pa.Table
    rows_read: int = 0
    rejects: list[Reject] = field(default_factory=list)
    train_before_limit: int = 0
    reads: dict[str, ReadResult] = field(default_factory=dict)  # split ('all': one file for every split) -> its file's read
    duplicates: dict[str, int] = field(default_factory=dict)  # split -> repeated pairs (removed, the first kept, unless kept)
    duplicates_kept: bool = False  # data.duplicates: keep
    label_conflicts: dict[str, int] = field(default_factory=dict)  # split -> of those, repeats with another label
    overlap: dict[str, int] = field(default_factory=dict)  # dev/test -> its pairs also in train
    overlap_dropped: int = 0  # train pairs removed because dev or test has them
    dev_test_overlap: int = 0  # test pairs also in dev (counted only)
    replaced_by_files: int = 0  # a one-file dataset's (BWS's) pairs of the splits given as files of their own
    eval_limit_dropped: dict[str, int] = field(default_factory=dict)  # dev/test -> pairs left out by eval_limit

    def split(self, name: str) -> pa.Table:
        return {"train": self.train, "dev": self.dev, "test": self.test}[name]

    def cleaning_counts(self, prefix: str) -> dict[str, Any]:
        """The accepted pairs removed on purpose, for metrics.json ``counts`` (keys ``<prefix>duplicates``, ...)."""
        return {
            f"{prefix}duplicates": self.duplicates,
            f"{prefix}duplicates_kept": self.duplicates_kept,
            f"{prefix}label_conflicts": self.label_conflicts,
            f"{prefix}overlap": self.overlap,
            f"{prefix}overlap_dropped": self.overlap_dropped,
            f"{prefix}dev_test_overlap": self.dev_test_overlap,
            f"{prefix}replaced_by_files": self.replaced_by_files,
            f"{prefix}eval_limit_dropped": self.eval_limit_dropped,
        }


def _named_sources(spec: DataSpec, data_dir: Path) -> dict[str, SourceSpec]:
    assert spec.dataset is not None
    files = named_dataset_files(spec.dataset, data_dir)
    return {split: SourceSpec(path=path, format=spec.dataset) for split, path in files.items()}


def gold_sources(spec: DataSpec, data_dir: str | Path | None = None) -> dict[str, SourceSpec]:
    """The file behind each split ('all' for a dataset shipped as one file): the named dataset's, replaced
    split by split by explicit files."""
    sources: dict[str, SourceSpec] = {}
    if spec.dataset is not None:
        sources = _named_sources(spec, resolve_data_dir(data_dir or spec.data_dir))
    sources.update({split: src for split in ("train", "dev", "test") if (src := getattr(spec, split)) is not None})
    return sources


def load_gold(
    spec: DataSpec, seed: int, data_dir: str | Path | None = None, held_out: dict[str, pa.Table] | None = None
) -> GoldData:
    """Read, validate and split the gold pairs; remove repeated pairs within each split, and dev/test pairs (and
    ``held_out``'s) from train per ``on_overlap``. ``eval_limit`` and ``train_limit`` then keep seeded random subsets.

    Args:
        spec: The data section of a job spec: a named dataset, explicit files, or both.
        seed: Draws the carved dev split, BWS's in-topic split and the ``train_limit``/``eval_limit`` subsets.
        data_dir: Where named datasets live (default: ``spec.data_dir``, $AUGSBERT_DATA_DIR, else ../shared/data).
        held_out: More pairs train must not hold, by name: a transfer target's dev and test for its source (STSb's
            train holds 498 of MRPC's 1,725 test pairs).

    Returns:
        The train, dev and test tables (sentence1, sentence2, label in [0, 1], topic), with the rows read, the
        rejects and what cleaning removed.

    Example:
        ::

            gold = load_gold(DataSpec(dataset="stsb", train_limit=1000), seed=42)
            gold.train.num_rows, gold.dev.num_rows  # (1000, 1497)
    """
    task = spec.resolved_task
    sources = gold_sources(spec, data_dir)
    # A file named for two splits (e.g. dev and test) is read, and its rows and rejects counted, once.
    reads: list[tuple[SourceSpec, ReadResult]] = []
    tables: dict[str, pa.Table] = {}
    split_reads: dict[str, ReadResult] = {}
    for split, source in sources.items():
        result = next((done for seen, done in reads if seen == source), None)
        if result is None:
            result = read_pairs(source, task)
            reads.append((source, result))
        tables[split], split_reads[split] = result.table, result
    replaced = 0
    if "all" in tables:  # BWS ships one file: split by topic or at random; a split given as a file stays that file
        whole = tables.pop("all")
        named = bws_cross_topic(whole) if spec.bws_split == "cross-topic" else bws_in_topic(whole, seed)
        replaced = sum(table.num_rows for split, table in named.items() if split in tables)
        tables.update({split: table for split, table in named.items() if split not in tables})
    if "train" not in tables:  # a transfer target known only by its sentences (the spec then requires dev)
        tables["train"] = tables["test"].slice(0, 0)
    # before dev is carved from train: a repeat in the train file counts as train's, not as an overlap
    duplicates = {split: 0 for split in ("train", "dev", "test")}
    conflicts = dict(duplicates)
    for split in list(tables):
        deduplicated, duplicates[split], conflicts[split] = dedupe(tables[split])
        if spec.duplicates == "drop":
            tables[split] = deduplicated
    if "dev" not in tables:
        tables["train"], tables["dev"] = carve(tables["train"], spec.dev_fraction, seed)

    eval_limit_dropped = {}
    if spec.eval_limit is not None:
        for split in ("dev", "test"):
            before = tables[split].num_rows
            tables[split] = random_subset(tables[split], spec.eval_limit, seed)
            eval_limit_dropped[split] = before - tables[split].num_rows
    # after eval_limit, so that only the dev/test pairs scored are taken out of train; before train_limit, so
    # that it keeps N pairs of what train may use
    tables["train"], overlap, dropped = split_overlap(tables["train"], {**{s: tables[s] for s in ("dev", "test")}, **(held_out or {})},
                                                      spec.on_overlap)
    train_before_limit = tables["train"].num_rows
    if spec.train_limit is not None:
        tables["train"] = random_subset(tables["train"], spec.train_limit, seed)
    return GoldData(
        task=task,
        train=tables["train"],
        dev=tables["dev"],
        test=tables["test"],
        rows_read=sum(result.rows_read for _, result in reads),
        rejects=[reject for _, result in reads for reject in result.rejects],
        train_before_limit=train_before_limit,
        reads=split_reads,
        duplicates=duplicates,
        duplicates_kept=spec.duplicates == "keep",
        label_conflicts=conflicts,
        overlap=overlap,
        overlap_dropped=dropped,
        dev_test_overlap=shared_pairs(tables["test"], tables["dev"]),
        replaced_by_files=replaced,
        eval_limit_dropped=eval_limit_dropped,
    )
