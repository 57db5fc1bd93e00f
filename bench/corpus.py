"""Synthetic sentence corpora for benchmarks: STSb and BWS sentences recombined with random word edits."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from augsbert_ray.config import DataSpec
from augsbert_ray.data import load_gold


def seed_sentences(data_dir: Path | None = None) -> list[str]:
    sentences: set[str] = set()
    for dataset in ("stsb", "bws"):
        gold = load_gold(DataSpec(dataset=dataset), seed=0, data_dir=data_dir)
        for table in (gold.train, gold.dev, gold.test):
            sentences.update(table.column("sentence1").to_pylist())
            sentences.update(table.column("sentence2").to_pylist())
    return sorted(sentences)


def edited_corpus(size: int, seed: int = 0, data_dir: Path | None = None) -> list[str]:
    """``size`` distinct sentences: each a seed sentence with 1-3 random word edits (replace, delete, swap)."""
    rng = np.random.default_rng(seed)
    base = seed_sentences(data_dir)
    vocabulary = sorted({word for sentence in base for word in sentence.split()})
    out: set[str] = set(base[:size])
    while len(out) < size:
        words = base[rng.integers(len(base))].split()
        for _ in range(rng.integers(1, 4)):
            position = rng.integers(len(words))
            edit = rng.integers(3)
            if edit == 0:
                words[position] = vocabulary[rng.integers(len(vocabulary))]
            elif edit == 1 and len(words) > 3:
                del words[position]
            else:
                other = rng.integers(len(words))
                words[position], words[other] = words[other], words[position]
        out.add(" ".join(words))
    return sorted(out)[:size]
