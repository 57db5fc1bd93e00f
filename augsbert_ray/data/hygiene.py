"""Gold pairs that repeat. Within a split a repeat is removed (the first kept); a dev or test pair that is also in
train would inflate the dev/test metrics, so it is counted and, per ``on_overlap``, dropped from train; a test pair
that dev also has is counted only (dev picks seeds and checkpoints, never fits). A pair and its swap, (a,b) and
(b,a), are one pair. Removed pairs are counted, never rejects: they were valid rows."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa

from augsbert_ray.config import SpecError

OnOverlap = Literal["error", "drop", "keep"]


def pair_keys(table: pa.Table) -> list[tuple[str, str]]:
    """Each row's pair with its sentences in sorted order, so that (a,b) and (b,a) share a key."""
    first, second = table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()
    return [(a, b) if a <= b else (b, a) for a, b in zip(first, second)]


def dedupe(table: pa.Table) -> tuple[pa.Table, int, int]:
    """(the table with each pair's first row only, repeats removed, of those the repeats whose label differs
    from the kept row's)."""
    first_label: dict[tuple[str, str], object] = {}
    kept: list[int] = []
    conflicts = 0
    for row, (key, label) in enumerate(zip(pair_keys(table), table.column("label").to_pylist())):
        if key not in first_label:
            first_label[key] = label
            kept.append(row)
        elif label != first_label[key]:
            conflicts += 1
    return table.take(pa.array(kept, pa.int64())), table.num_rows - len(kept), conflicts


def split_overlap(train: pa.Table, held_out: dict[str, pa.Table], on_overlap: OnOverlap) -> tuple[pa.Table, dict[str, int], int]:
    """(train, per held-out split the pairs also in train, train rows dropped). ``on_overlap``: drop those
    pairs from train, keep them, or stop with an error naming the count and the first such pair."""
    train_keys = pair_keys(train)
    in_train = set(train_keys)
    overlap = {split: shared_pairs(table, train) for split, table in held_out.items()}
    if on_overlap == "keep" or not any(overlap.values()):
        return train, overlap, 0
    if on_overlap == "error":
        split, row = next((split, row) for split, table in held_out.items()
                          for row, key in enumerate(pair_keys(table)) if key in in_train)
        pair = (held_out[split]["sentence1"][row].as_py(), held_out[split]["sentence2"][row].as_py())
        counts = " and ".join(f"{count} {name}" for name, count in overlap.items())
        raise SpecError(
            f"{counts} pairs are also in train (either order; on_overlap: error), the first in {split}: {pair!r}; "
            "on_overlap: drop removes them from train"
        )
    held = {key for table in held_out.values() for key in pair_keys(table)}
    kept = [row for row, key in enumerate(train_keys) if key not in held]
    return train.take(pa.array(kept, pa.int64())), overlap, train.num_rows - len(kept)


def shared_pairs(table: pa.Table, other: pa.Table) -> int:
    """How many of ``table``'s rows hold a pair that ``other`` also has (either order)."""
    in_other = set(pair_keys(other))
    return sum(key in in_other for key in pair_keys(table))
