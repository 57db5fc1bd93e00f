"""How many sentences and pairs the specs' max_seq_length (128) truncates: MiniLM token counts of the gold train
splits, per sentence (what the bi-encoder reads) and per pair (what the cross-encoder reads).

    .venv/bin/python -m bench.token_lengths            # prints one line per dataset
"""

from __future__ import annotations

import argparse

import numpy as np
from transformers import AutoTokenizer

import augsbert_ray as ar
from augsbert_ray.config import DataSpec
from augsbert_ray.data import load_gold

DATASETS = {"stsb": DataSpec(dataset="stsb"), "mrpc": DataSpec(dataset="mrpc"),
            "bws in-topic": DataSpec(dataset="bws", bws_split="in-topic"), "bws cross-topic": DataSpec(dataset="bws")}


def describe(name: str, counts: np.ndarray, limit: int) -> str:
    return (f"{name} tokens p50 {np.median(counts):.0f}, p99 {np.percentile(counts, 99):.0f}, max {counts.max()}, "
            f"over {limit}: {(counts > limit).sum()} ({100 * (counts > limit).mean():.2f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="named datasets' directory (default: as for augsbert run)")
    parser.add_argument("--max-seq-length", type=int, default=128)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(ar.resolve_model("minilm"))
    for name, data in DATASETS.items():
        train = load_gold(data, seed=42, data_dir=args.data_dir).train
        first, second = train.column("sentence1").to_pylist(), train.column("sentence2").to_pylist()
        sentences = np.array([len(ids) for ids in tokenizer(first + second)["input_ids"]])
        pairs = np.array([len(ids) for ids in tokenizer(first, second)["input_ids"]])
        print(f"{name}, {len(first)} train pairs: {describe('sentence', sentences, args.max_seq_length)}; "
              f"{describe('pair', pairs, args.max_seq_length)}")


if __name__ == "__main__":
    main()
