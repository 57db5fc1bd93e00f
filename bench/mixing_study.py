"""In domain, does weighting gold against silver help AugSBERT? Refit the bi-encoder from a finished run's own gold
and silver files with the gold pairs weighted up (repeated within the epoch) or fitted last, beside SBERT (gold
only) and the job's plain mix, for a few seeds, and score each on the dev split; test is printed beside it but never
used to choose.

    .venv/bin/python -m bench.mixing_study runs/study/stsb_1k-topk-study-seed42-* \
        --silver tuning_silver/top_k3/silver/bm25 --seeds 42 43

A variant costs one or two bi-encoder fits in this process (no cross-encoder refit, no Ray). Appends one row per
variant and seed to bench/results/mixing_study.json under RUN_NAME/SILVER, and prints the mean over the seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import augsbert_ray as ar
from augsbert_ray.config import BiEncoderSpec
from augsbert_ray.evaluation import evaluate
from augsbert_ray.runtime import configure_torch_threads
from augsbert_ray.training import read_training_pairs
from bench.refit import fit_student

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Variant:
    name: str
    gold_weight: int  # how many times each gold pair is seen per epoch
    silver: bool
    gold_last: bool = False  # fit the silver first, then the gold from that model


VARIANTS = [
    Variant("SBERT: gold only", 1, silver=False),
    Variant("SBERT: gold x4", 4, silver=False),  # as many gold passes as "gold x4 + silver", without the silver
    Variant("job: gold + silver", 1, silver=True),
    Variant("gold x2 + silver", 2, silver=True),
    Variant("gold x4 + silver", 4, silver=True),
    Variant("silver, then gold", 1, silver=True, gold_last=True),
]


def fit_variant(variant: Variant, gold: pa.Table, silver: pa.Table, backbone: str, encoder: BiEncoderSpec, seed: int,
                workdir: str) -> tuple[str, int]:
    """Fit ``variant`` from the backbone; return its model directory and the number of pairs it trained on."""
    if variant.gold_last:
        stages = [silver, gold]
    else:  # one table, so that gold and silver pairs are shuffled together, as the job does
        stages = [pa.concat_tables([gold] * variant.gold_weight + ([silver] if variant.silver else []))]
    model = backbone
    for number, pairs in enumerate(stages):
        fit_student(pairs, model, encoder, seed, f"{workdir}/stage{number}")
        model = f"{workdir}/stage{number}"
    return model, sum(pairs.num_rows for pairs in stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a finished in-domain run or tune directory (gold/, spec.yaml, silver)")
    parser.add_argument("--silver", default="silver/bm25", help="the silver shards' folder, relative to the run")
    parser.add_argument("--seeds", type=int, nargs="+", help="bi-encoder seeds (default: the run's seed)")
    parser.add_argument("--only", nargs="+", help="variant names to run (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "mixing_study.json"))
    args = parser.parse_args()
    configure_torch_threads(args.threads)

    spec = ar.load_spec(args.run / "spec.yaml")
    if spec.scenario != "in-domain":
        raise SystemExit(f"{args.run}: scenario {spec.scenario!r}, expected in-domain")
    silver_files = sorted((args.run / args.silver).glob("part-*.parquet"))
    if not silver_files:
        raise SystemExit(f"{args.run / args.silver}: no part-*.parquet silver shards")
    gold = read_training_pairs([(str(args.run / "gold" / "train.parquet"), "label")])
    silver = read_training_pairs([(str(path), "score") for path in silver_files])
    dev, test = (pq.read_table(args.run / "gold" / f"{split}.parquet") for split in ("dev", "test"))
    backbone = ar.resolve_model(spec.bi_encoder.model)
    out = Path(args.json)
    results = json.loads(out.read_text()) if out.exists() else {}
    rows = results.setdefault(f"{args.run.name}/{args.silver}", {})
    print(f"{args.run.name}: gold {gold.num_rows} pairs, silver {silver.num_rows} ({args.silver}), "
          f"dev {dev.num_rows}, test {test.num_rows}", flush=True)

    for variant in VARIANTS:
        if args.only and variant.name not in args.only:
            continue
        scores: dict[str, list[float]] = {"dev": [], "test": []}
        for seed in args.seeds or [spec.seed]:
            with tempfile.TemporaryDirectory() as workdir:
                started = time.perf_counter()
                model, train_rows = fit_variant(variant, gold, silver, backbone, spec.bi_encoder, seed, workdir)
                seconds = time.perf_counter() - started
                result = evaluate("bi_encoder", model, spec.task, dev, test, threads=args.threads)
            rows[f"{variant.name}, seed {seed}"] = row = {
                "dev": round(result.dev, 2), "test": round(result.test, 2),
                "train_rows": train_rows, "train_seconds": round(seconds, 1)}
            scores["dev"].append(row["dev"])
            scores["test"].append(row["test"])
            print(f"{variant.name:22s} seed {seed}: " + "  ".join(f"{key} {value}" for key, value in row.items()), flush=True)
            out.write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"{variant.name:22s} mean over {len(scores['dev'])} seed(s): dev {statistics.mean(scores['dev']):.2f}  "
              f"test {statistics.mean(scores['test']):.2f}", flush=True)


if __name__ == "__main__":
    main()
