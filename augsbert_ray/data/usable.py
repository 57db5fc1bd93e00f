"""Checks that the gold data can train and score every model of a job, made as soon as it is read: a split too
small or too uniform would otherwise fail a Ray Train fit, or KDE selection, minutes and several fits later."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from augsbert_ray.config import JobSpec, SpecError, TaskType
from augsbert_ray.data.gold import GoldData
from augsbert_ray.data.rejects import check_reject_fraction


METRIC = {"regression": "Spearman", "classification": "F1/AUC"}


def check_scorable(task: TaskType, labels: np.ndarray, what: str) -> None:
    """A split needs two pairs and two different labels, else its metric is NaN (or F1 of one class).

    Args:
        task: regression or classification.
        labels: the split's labels.
        what: the split and its origin, for the message, e.g. ``"pairs.csv (test split)"``.

    Example:
        ::

            check_scorable("regression", gold.test.column("label").to_numpy(), "stsb test split")
    """
    if len(labels) < 2:
        raise SpecError(f"{what}: {len(labels)} pair(s) to score; {METRIC[task]} needs at least 2")
    if len(np.unique(labels)) < 2:
        raise SpecError(f"{what}: all {len(labels)} labels are equal; {METRIC[task]} needs at least two different labels")


def check_reject_fractions(gold: GoldData, max_fraction: float, rejects_path: Path | None, what: str = "gold",
                           setting: str = "data.max_reject_fraction") -> None:
    """``max_fraction`` of the rows read overall and of each split's file (``what`` names the data in messages):
    a split's bad rows must not hide among the other splits' good ones.

    Args:
        gold: The splits as read, with their rejects and each split's file's read.
        max_fraction: The largest share of rejected rows allowed, in [0, 1] (``setting``).
        rejects_path: The file the rejects were written to, named in the error; None names none.
        what: The data's name in messages, e.g. ``"target"``.
        setting: The spec field that holds ``max_fraction``, named in messages.

    Example:
        ::

            check_reject_fractions(gold, spec.data.max_reject_fraction, Path("runs/x/rejects.jsonl"))
    """
    check_reject_fraction(gold.rows_read, gold.rejects, max_fraction, rejects_path, setting, scope=what)
    for split, read in gold.reads.items():
        if read.rows_read:  # an empty split is named by check_gold_usable
            scope = f"{what} {'file of every split' if split == 'all' else f'{split} split'}"
            check_reject_fraction(read.rows_read, read.rejects, max_fraction, rejects_path, setting, scope=scope)


def batch_need(setting: str, batch_size: int, workers: int, both_orders: bool = False) -> tuple[int, str]:
    """(the fewest train pairs that fill one batch of a fit on every worker, the setting that says so). Under DDP
    sentence-transformers drops an incomplete batch and splits the full ones over the workers, so fewer pairs
    train nothing; a cross-encoder with both_orders sees each pair twice."""
    rows = batch_size * max(1, workers)  # 0 workers: one fit in the calling process
    text = f"{setting}={batch_size}" + (" with both_orders" if both_orders else "")
    return (-(-rows // 2) if both_orders else rows), text + (f" on each of training.num_workers={workers}" if workers > 1 else "")


def train_batch_need(spec: JobSpec) -> tuple[int, str]:
    """The largest ``batch_need`` of the fits on the gold (or source) train split: SBERT and every teacher model
    the run fits (one given as ``trained`` is copied, not fitted)."""
    workers = spec.training.num_workers
    needs = [batch_need("bi_encoder.batch_size", spec.bi_encoder.batch_size, workers)]
    members = spec.teacher.member_kinds
    if "cross_encoder" in members and spec.cross_encoder.trained is None:
        needs.append(batch_need("cross_encoder.batch_size", spec.cross_encoder.batch_size, workers, spec.cross_encoder.both_orders))
    if "bi_encoder" in members and spec.teacher.bi_encoder.trained is None:
        needs.append(batch_need("teacher.bi_encoder.batch_size", spec.teacher.bi_encoder.batch_size, workers))
    return max(needs, key=lambda need: need[0])


def _unless_limited(gold: GoldData, train_limit: int | None) -> GoldData | None:
    """``gold``, unless its train split is as small as ``train_limit`` made it: then the limit, not the overlap, is why."""
    return None if train_limit is not None and gold.train.num_rows >= train_limit else gold


def check_train_size(rows: int, need: tuple[int, str], what: str, gold: GoldData | None = None, setting: str = "data.on_overlap") -> None:
    """A train split must fill one batch (``need``); where the pairs it shares with dev or test (``gold.overlap``)
    were dropped from it, the message says so, naming ``setting``: a dev or test file that is the train file
    empties train."""
    if rows < need[0]:
        dropped = ""
        if gold is not None and gold.overlap_dropped:
            shared = ", ".join(f"{split} {count}" for split, count in gold.overlap.items() if count)
            same_file = "; is a dev or test file the train file?" if gold.overlap.get("dev") or gold.overlap.get("test") else ""
            dropped = (f" after {setting}: drop removed {gold.overlap_dropped} pair{'' if gold.overlap_dropped == 1 else 's'} "
                       f"also in dev/test ({shared}{same_file})")
        raise SpecError(f"{what} train split: {rows} pair{'' if rows == 1 else 's'}{dropped}, fewer than one training batch ({need[1]}); "
                        f"needs at least {need[0]} pairs (a fit drops an incomplete batch)")


def check_scorable_split(gold: GoldData, split: str, what: str, task: TaskType) -> None:
    """A scored split (dev, test, or a calibration split) needs two pairs and two different labels."""
    check_scorable(task, gold.split(split).column("label").to_numpy(), f"{what} {split} split")


def check_gold_usable(gold: GoldData, spec: JobSpec, target: bool = False) -> None:
    """Stop with one line naming the split, its size and the smallest that works, before any fit. Gold (or, in
    transfer, source) train fills one batch of every fit on it, has two classes (classification) and two labels
    (kde); dev and test can be scored. A transfer target (``target``) needs dev and test, and a train split of a
    batch (SBERT-target, given pairs) unless it is empty and target.sentences are recombined instead.

    Args:
        gold: The splits as read (in transfer, the source's or the target's).
        spec: The job spec, for the task, the sampling strategies, the batch sizes and the workers of each fit.
        target: The splits are a domain-transfer target's; default False: the gold (or source) splits.

    Example:
        ::

            check_gold_usable(load_gold(spec.data, spec.seed), spec)  # or a SpecError
    """
    transfer = spec.scenario == "domain-transfer"
    what = "target" if target else "source" if transfer else "gold"
    train_rows = gold.train.num_rows
    if target:
        assert spec.target is not None
        if train_rows or spec.target.sentences is None:
            need = batch_need("bi_encoder.batch_size", spec.bi_encoder.batch_size, spec.training.num_workers)
            check_train_size(train_rows, need, what, _unless_limited(gold, spec.target.data.train_limit), "target.data.on_overlap")
        for split in ("dev", "test"):
            check_scorable_split(gold, split, what, spec.evaluation_task)
        return
    check_train_size(train_rows, train_batch_need(spec), what, _unless_limited(gold, spec.data.train_limit))
    labels = gold.train.column("label").to_numpy()
    if spec.task == "classification" and len(np.unique(labels)) < 2:
        raise SpecError(f"{what} train split: all {train_rows} labels are {labels[0]}; classification needs both classes, 0 and 1")
    if not transfer and "kde" in spec.sampling.strategies and len(np.unique(labels)) < 2:
        raise SpecError(f"{what} train split: all {train_rows} labels are {labels[0]:g}; sampling.strategies kde "
                        "fits a density to them and needs at least two different labels")
    if spec.task == "regression" and len(np.unique(labels)) < 2:  # before: every model fitted, to learn nothing
        raise SpecError(f"{what} train split: all {train_rows} labels are {labels[0]:g}; regression on one label value learns "
                        "nothing (check the label column and data.task)")
    if not transfer:
        for split in ("dev", "test"):
            check_scorable_split(gold, split, what, spec.task)
    elif spec.teacher.kind != "cross-encoder" and spec.teacher.calibration == "dev":
        check_scorable_split(gold, "dev", what, spec.task)

