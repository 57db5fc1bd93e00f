"""Deterministic splits and subsets of gold pair tables."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The paper's BWS cross-topic split: T1-T5 train, T6 dev, T7-T8 test (alphabetical topic order).
BWS_CROSS_TOPIC = {
    "train": ["Abortion", "Cloning", "Death penalty", "Gun control", "Marijuana legalization"],
    "dev": ["Minimum wage"],
    "test": ["Nuclear energy", "School uniforms"],
}
# The paper's BWS in-topic proportions (pairs): 2471 / 478 / 451 of 3400.
BWS_IN_TOPIC = {"train": 2471, "dev": 478, "test": 451}


def random_subset(table: pa.Table, size: int, seed: int) -> pa.Table:
    """A reproducible random subset of ``size`` rows (all rows when the table is smaller), in file order."""
    if size >= table.num_rows:
        return table
    rows = np.sort(np.random.default_rng(seed).choice(table.num_rows, size=size, replace=False))
    return table.take(pa.array(rows))


def carve(table: pa.Table, fraction: float, seed: int) -> tuple[pa.Table, pa.Table]:
    """Split off a random ``fraction`` of rows: (rest, carved)."""
    order = np.random.default_rng(seed).permutation(table.num_rows)
    cut = max(1, int(round(table.num_rows * fraction)))
    return table.take(pa.array(np.sort(order[cut:]))), table.take(pa.array(np.sort(order[:cut])))


def bws_cross_topic(table: pa.Table) -> dict[str, pa.Table]:
    known = {topic for topics in BWS_CROSS_TOPIC.values() for topic in topics}
    unknown = set(table.column("topic").to_pylist()) - known
    if unknown:
        rows = sum(topic in unknown for topic in table.column("topic").to_pylist())
        raise ValueError(f"BWS cross-topic split: {rows} row(s) of topics it does not know, {sorted(unknown)}; its topics: "
                         f"{', '.join(sorted(known))} (data.bws_split: in-topic takes any)")
    return {
        split: table.filter(pc.is_in(table.column("topic"), pa.array(topics)))
        for split, topics in BWS_CROSS_TOPIC.items()
    }


def bws_in_topic(table: pa.Table, seed: int) -> dict[str, pa.Table]:
    """Disjoint random train/dev/test pairs, stratified by topic, in the paper's proportions."""
    total = sum(BWS_IN_TOPIC.values())
    rng = np.random.default_rng(seed)
    picked: dict[str, list[int]] = {split: [] for split in BWS_IN_TOPIC}
    topics = np.asarray(table.column("topic").to_pylist(), dtype=object)
    for topic in sorted(set(topics)):
        rows = rng.permutation(np.flatnonzero(topics == topic))
        n_train = int(round(len(rows) * BWS_IN_TOPIC["train"] / total))
        n_dev = int(round(len(rows) * BWS_IN_TOPIC["dev"] / total))
        picked["train"].extend(rows[:n_train])
        picked["dev"].extend(rows[n_train : n_train + n_dev])
        picked["test"].extend(rows[n_train + n_dev :])
    return {split: table.take(pa.array(np.sort(rows))) for split, rows in picked.items()}
