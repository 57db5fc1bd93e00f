"""Sentence pools and pair identity shared by every sampling strategy.

Sentences are numbered in sorted order, so that a run does not depend on file order.
A pair is stored as one int64 code ``i * n + j`` with ``i < j``: (a,b) and (b,a) are one
pair, and exclusion sets stay small even for millions of candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa


class SentencePool:
    """The unique sentences that candidates recombine, numbered in sorted order; a pair is one int64 code.

    Args:
        sentences: Sentences in any order, repeats allowed.

    Example:
        ::

            pool = SentencePool.from_pairs(gold.train)
            codes = pool.gold_codes([gold.train, gold.dev, gold.test])  # never candidates
            pool.candidates(codes[:3], "gold")  # a candidate table of three gold pairs
    """

    def __init__(self, sentences: Iterable[str]) -> None:
        self.sentences: list[str] = sorted(set(sentences))
        self.index = {sentence: i for i, sentence in enumerate(self.sentences)}

    @classmethod
    def from_pairs(cls, table: pa.Table) -> "SentencePool":
        return cls(table.column("sentence1").to_pylist() + table.column("sentence2").to_pylist())

    def __len__(self) -> int:
        return len(self.sentences)

    def encode(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        low, high = np.minimum(i, j).astype(np.int64), np.maximum(i, j).astype(np.int64)
        return low * len(self) + high

    def decode(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return codes // len(self), codes % len(self)

    def gold_codes(self, tables: Iterable[pa.Table]) -> np.ndarray:
        """Codes of gold pairs whose both sentences are in the pool: these never become candidates."""
        codes = []
        for table in tables:
            for a, b in zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()):
                i, j = self.index.get(a), self.index.get(b)
                if i is not None and j is not None and i != j:
                    codes.append(int(self.encode(np.array([i]), np.array([j]))[0]))
        return np.unique(np.asarray(codes, dtype=np.int64))

    def candidates(self, codes: np.ndarray, strategy: str, retrieval_score: np.ndarray | None = None) -> pa.Table:
        """The candidate table of pair codes, in code order (deterministic)."""
        order = np.argsort(codes, kind="stable")
        i, j = self.decode(codes[order])
        scores = pa.nulls(len(codes), pa.float32()) if retrieval_score is None else pa.array(retrieval_score[order], pa.float32())
        columns = {
            "sentence1": pa.array([self.sentences[k] for k in i], pa.string()),
            "sentence2": pa.array([self.sentences[k] for k in j], pa.string()),
            "strategy": pa.array([strategy] * len(codes), pa.string()),
            "retrieval_score": scores,
        }
        return pa.table(columns)


def given_pairs(table: pa.Table, held_out: list[pa.Table]) -> tuple[pa.Table, dict[str, int]]:
    """Pairs used as given (a transfer target's unlabeled pairs) as candidates with strategy `given`.

    Self-pairs, repeats ((a,b) = (b,a)) and pairs that are also in ``held_out`` (dev/test) are left out and
    counted: ``pairs_in = candidates + self_pairs + duplicates + held_out``.

    Args:
        table: The pairs (sentence1, sentence2); other columns, labels among them, are dropped.
        held_out: Tables whose pairs never become candidates, e.g. the target's dev and test.

    Returns:
        The candidate table (sentence1, sentence2, strategy, retrieval_score null) in pair-code order, and the counts.

    Example:
        ::

            candidates, counts = given_pairs(target.train, [target.dev, target.test])
    """
    pool = SentencePool.from_pairs(table)
    first = np.fromiter((pool.index[s] for s in table.column("sentence1").to_pylist()), dtype=np.int64, count=table.num_rows)
    second = np.fromiter((pool.index[s] for s in table.column("sentence2").to_pylist()), dtype=np.int64, count=table.num_rows)
    distinct = first != second
    codes = np.unique(pool.encode(first[distinct], second[distinct]))
    kept = np.setdiff1d(codes, pool.gold_codes(held_out), assume_unique=True)
    counts = {
        "pairs_in": table.num_rows,
        "candidates": len(kept),
        "self_pairs": int((~distinct).sum()),
        "duplicates": int(distinct.sum()) - len(codes),
        "held_out": len(codes) - len(kept),
    }
    return pool.candidates(kept, "given"), counts
