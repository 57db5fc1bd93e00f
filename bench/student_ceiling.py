"""How far more gold lifts the student: the job's SBERT (its bi-encoder recipe, one plain fit) on the whole gold train
split instead of the job's data.train_limit subset, scored on dev and test. Silver labels, noisier than gold, of
pairs among the same sentences are not expected to lift the student past it.

    .venv/bin/python -m bench.student_ceiling --job jobs/stsb_indomain_all_strategies.yaml --seed 43 \
        --set data.duplicates=keep data.on_overlap=keep training.bf16=true

Writes bench/results/student_ceiling.json (one entry per job, seed and settings); the fit is kept under --work and
reused on a rerun.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import ray

import augsbert_ray as ar
from augsbert_ray.evaluation import evaluate_on_ray
from augsbert_ray.files import atomic_write_text
from augsbert_ray.pipeline import PlainFit, RunContext, read_gold, train_bi_encoder
from augsbert_ray.runtime import init_ray, log

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "student_ceiling.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default="jobs/stsb_indomain_all_strategies.yaml")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="job spec overrides")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "student_ceiling")
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    ar.setup_logging()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = ar.load_spec(ROOT / args.job, [f"seed={args.seed}", f"output_dir={args.work}", *args.set, "data.train_limit=null"])
    key = f"{Path(args.job).stem} seed {args.seed}" + "".join(f" {setting}" for setting in args.set)
    run_dir = args.work / key.replace(" ", "_").replace("=", "-")
    run_dir.mkdir(parents=True, exist_ok=True)
    init_ray()
    ctx = RunContext.open(spec, run_dir, args.data_dir)
    gold = read_gold(ctx)
    fit = train_bi_encoder(ctx, "sbert", [gold.train_file], PlainFit())
    result = ray.get(evaluate_on_ray("bi_encoder", str(fit.model_dir), spec.task, gold.splits.dev, gold.splits.test,
                                     int(ray.cluster_resources()["CPU"]), spec.evaluation.gpus))
    entry = {"gold_train": fit.trained_on, "dev": result.dev, "test": result.test,
             "fit_seconds": fit.wall_seconds}
    log.info("%s: %s", key, json.dumps(entry))
    results = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    results[key] = entry
    atomic_write_text(RESULTS, json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
