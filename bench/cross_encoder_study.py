"""Why is the cross-encoder weak? Fit it on the same gold subset as a job would, over a grid of learning
rates and epochs, and score it on the dev split (never test): the reproduction picks its settings from this.

    .venv/bin/python -m bench.cross_encoder_study --dataset stsb --train-limit 1000 --lrs 2e-5 5e-5 1e-4 --epochs 4
    .venv/bin/python -m bench.cross_encoder_study --dataset bws --bws-split cross-topic --lrs 2e-5 1e-4

Runs in this process (no Ray), with the job's cross-encoder recipe: both orders, BCE on a sigmoid head,
batch 16, 10% warmup, the packaged MiniLM with a fresh one-logit head. Prints one line per setting and
writes bench/results/cross_encoder_study.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import augsbert_ray as ar
from augsbert_ray.config import CrossEncoderSpec, DataSpec
from augsbert_ray.data import load_gold
from augsbert_ray.evaluation import metrics_from_scores, score_pairs
from augsbert_ray.runtime import configure_torch_threads
from augsbert_ray.training import both_orders, training_arguments

ROOT = Path(__file__).resolve().parents[1]


def fit_cross_encoder(train: pa.Table, spec: CrossEncoderSpec, seed: int, output_dir: str) -> float:
    """The job's cross-encoder recipe in this process; saves the model to ``output_dir``, returns seconds."""
    from datasets import Dataset
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from transformers import set_seed

    set_seed(seed)  # before the model: its new head draws from the global RNG, as in the job's worker_setup
    table = train.select(["sentence1", "sentence2", "label"])
    table = both_orders(table) if spec.both_orders else table
    model = CrossEncoder(ar.resolve_model(spec.model), num_labels=1, max_length=spec.max_seq_length)
    args = training_arguments(CrossEncoderTrainingArguments, spec, seed, output_dir, False, distributed=False)
    started = time.perf_counter()
    CrossEncoderTrainer(model=model, args=args, train_dataset=Dataset(table), loss=BinaryCrossEntropyLoss(model)).train()
    seconds = time.perf_counter() - started
    model.save_pretrained(output_dir)
    return seconds


def fit_and_score(gold, spec: CrossEncoderSpec, seed: int) -> dict[str, float]:
    import torch

    with tempfile.TemporaryDirectory() as output_dir:
        seconds = fit_cross_encoder(gold.train, spec, seed, output_dir)
        dev = gold.dev
        scores = score_pairs("cross_encoder", output_dir, dev.column("sentence1").to_pylist(),
                             dev.column("sentence2").to_pylist(), threads=torch.get_num_threads())
    labels = dev.column("label").to_numpy()
    return {"dev": round(metrics_from_scores(gold.task, scores, labels, scores, labels).dev, 2), "train_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="stsb", choices=["stsb", "bws", "mrpc"])
    parser.add_argument("--bws-split", default="cross-topic", choices=["cross-topic", "in-topic"])
    parser.add_argument("--train-limit", type=int, help="gold train pairs, a seeded subset (default: all)")
    parser.add_argument("--lrs", type=float, nargs="+", default=[2e-5, 5e-5, 1e-4])
    parser.add_argument("--epochs", type=int, nargs="+", default=[4])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "cross_encoder_study.json"))
    parser.add_argument("--key", help="the JSON key of the rows (default: DATASET[_BWS-SPLIT]_TRAIN-LIMIT, e.g. stsb_1000)")
    args = parser.parse_args()
    configure_torch_threads(args.threads)

    data = DataSpec(dataset=args.dataset, bws_split=args.bws_split, train_limit=args.train_limit)
    gold = load_gold(data, args.seed)
    key = args.key or f"{args.dataset}{'_' + args.bws_split if args.dataset == 'bws' else ''}_{args.train_limit or 'all'}"
    out = Path(args.json)
    results = json.loads(out.read_text()) if out.exists() else {}
    rows = results.setdefault(key, {})
    print(f"{key}: {gold.train.num_rows} train pairs (fed in both orders), {gold.dev.num_rows} dev pairs", flush=True)
    for epochs in args.epochs:
        for lr in args.lrs:
            spec = CrossEncoderSpec(epochs=epochs, learning_rate=lr)
            rows[f"lr={lr:g},epochs={epochs}"] = row = fit_and_score(gold, spec, args.seed)
            print(f"lr {lr:g}, epochs {epochs}: dev {row['dev']:.2f} ({row['train_seconds']:.0f} s training)", flush=True)
            out.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
