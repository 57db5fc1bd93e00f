"""Seed optimization benchmark: culled search (all seeds to 20%, the best to the end) against full
training of every seed, on several 1k STSb gold subsets. Prints a table, writes bench/results/seed_opt.json.

    .venv/bin/python -m bench.seed_opt                       # 5 seeds, MiniLM, 3 subsets of 1,000 gold pairs
    .venv/bin/python -m bench.seed_opt --repeats 1 --train-limit 300   # a quick look
    .venv/bin/python -m bench.seed_opt --train-limit 200 --epochs 4 --learning-rate 1e-4 --output bench/results/seed_opt_small_gold.json

Per subset it runs, one after the other and with the same resources:
  culled: augsbert's sync seed search (every seed to cull_at; on 2 CPUs all 5 run at once, so the best goes on in
          place, on both cores);
  full:   every seed trained uninterrupted to the end, side by side (dev scored at the cull step and the end).
Each search's wall time is split into the trials' start (to the first line of the trial), the model load and
trainer set-up, the steps, dev scoring, and the rest, from the clocks the trials report.
The "best full-training seed" is the seed with the best dev Spearman after full training; the chosen seed
is "within 0.5" when its full-training dev Spearman is at most 0.5 points below that best one, and its rank is its
place among the fully trained seeds by dev Spearman (1 = best; ties share the better place).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import ray

import augsbert_ray as ar
from augsbert_ray.data import load_gold
from augsbert_ray.evaluation import score_pairs, spearman_x100
from augsbert_ray.runtime import init_ray
from augsbert_ray.tuning import SearchSetup, cull_step, plan_trials, record, run_phase, search, trial_config

ROOT = Path(__file__).resolve().parents[1]


def one_repeat(args: argparse.Namespace, subset_seed: int, work: Path) -> dict:
    spec = ar.load_spec(ROOT / "jobs" / "stsb_seed_opt.yaml", [
        f"seed={subset_seed}", f"data.train_limit={args.train_limit}", f"bi_encoder.epochs={args.epochs}",
        f"tuning.seeds={args.seeds}", "tuning.eval_every=1.0", f"tuning.cpus_per_trial={args.cpus_per_trial}",
        f"bi_encoder.learning_rate={args.learning_rate}",
    ])
    gold = load_gold(spec.data, spec.seed, args.data_dir)
    pq.write_table(gold.train, work / "train.parquet")
    pq.write_table(gold.dev.slice(0, args.dev_limit), work / "dev.parquet")  # dev scoring dominates on 2 cores
    files = {None: [(str(work / "train.parquet"), "label")]}
    setup = SearchSetup(spec, "sbert", ar.resolve_model(spec.bi_encoder.model), str(work / "dev.parquet"), work / "tune")

    started = time.time()
    culled = search(setup, files, work / "chosen")
    culled_wall = time.time() - started
    culled_parts = wall_parts(setup.storage / "sbert-search", started, culled_wall)

    full_trials = plan_trials(setup, files)
    started = time.time()
    results = run_phase(setup, [trial_config(setup, trial, "full", None, None) for trial in full_trials], "full")
    full_wall = time.time() - started
    full_parts = wall_parts(setup.storage / "sbert-full", started, full_wall)
    one_fit = full_trials[0].total_steps
    cull = cull_step(one_fit, spec.tuning.cull_at)
    for trial in full_trials:
        record(trial, results[trial.name], cull)
    full_by_seed = {trial.seed: trial for trial in full_trials}

    full_dev = {trial.seed: trial.final_score for trial in full_trials}
    chosen = next(trial for trial in culled.trials if trial.name == culled.chosen)
    best_seed = max(full_dev, key=full_dev.get)
    best_dir = next(trial.checkpoint for trial in full_trials if trial.seed == best_seed)
    tests = {name: ray.get(test_score.remote(model, gold.test)) for name, model in (("chosen", str(work / "chosen")), ("best_full", best_dir))}
    return {
        "subset_seed": subset_seed,
        "train_pairs": gold.train.num_rows,
        "steps_one_fit": one_fit,
        "cull_step": cull,
        "culled_steps": culled.steps_spent,
        "full_steps": sum(trial.steps for trial in full_trials),
        "culled_wall_s": round(culled_wall, 1),
        "full_wall_s": round(full_wall, 1),
        "culled_wall_parts_s": culled_parts,
        "full_wall_parts_s": full_parts,
        "cull_dev": {trial.seed: round(trial.cull_score, 2) for trial in culled.trials},
        "full_dev": {seed: round(score, 2) for seed, score in full_dev.items()},
        "chosen_seed": chosen.seed,
        "best_full_seed": best_seed,
        "gap_dev": round(full_dev[best_seed] - full_dev[chosen.seed], 2),
        "chosen_rank": 1 + sum(score > full_dev[chosen.seed] for score in full_dev.values()),
        "chosen_test": round(tests["chosen"], 2),
        "best_full_test": round(tests["best_full"], 2),
        # to the cull step the chosen trial trains exactly as its uninterrupted run; after it, on more threads
        # (in place), float sums run in another order
        "same_as_full_to_cull": [h for h in chosen.history if h[0] <= cull] == [h for h in full_by_seed[chosen.seed].history if h[0] <= cull],
        "final_dev_minus_full": round(chosen.final_score - full_dev[chosen.seed], 4),
    }


def wall_parts(experiment: Path, started: float, wall: float) -> dict[str, float]:
    """A search's wall time in parts, from the clocks its trials reported (result.json): to the trials' first
    line (Tune, the trial processes, imports), model load and trainer set-up, dev scoring, and the rest (the
    steps, with saves and Tune's round trips). Each part spans the first trial's start to the last trial's end."""
    reports = [json.loads(line) for path in experiment.glob("*/result.json") for line in path.read_text().splitlines() if line.strip()]
    loop_start = max(r["clock_loop_start"] for r in reports)
    train_begin = max(r["clock_train_begin"] for r in reports)
    # scoring runs in every trial at once at the cull step: count each span of overlapping scoring once
    spans = sorted((r["clock_scoring"], r["clock_scored"]) for r in reports)
    scoring, end = 0.0, -math.inf
    for low, high in spans:
        scoring += max(0.0, high - max(low, end))
        end = max(end, high)
    parts = {"to_trial_start": loop_start - started, "load_and_setup": train_begin - loop_start, "dev_scoring": scoring}
    parts["steps_and_rest"] = wall - sum(parts.values())
    return {name: round(value, 1) for name, value in parts.items()}


@ray.remote(num_cpus=1)
def test_score(model: str, test: pa.Table) -> float:
    scores = score_pairs("bi_encoder", model, test.column("sentence1").to_pylist(), test.column("sentence2").to_pylist(), threads=1)
    return spearman_x100(scores, test.column("label").to_numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="data subsets (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--train-limit", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--cpus-per-trial", type=float, default=0.4)
    parser.add_argument("--dev-limit", type=int, default=500, help="dev pairs that score the trials (default: %(default)s)")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "seed_opt.json"))
    args = parser.parse_args()
    ar.setup_logging()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    init_ray()
    repeats: list[dict] = []
    for subset_seed in range(1, args.repeats + 1):
        with tempfile.TemporaryDirectory(prefix="seed_opt_") as work:
            repeats.append(one_repeat(args, subset_seed, Path(work)))
        print(json.dumps(repeats[-1]), flush=True)
        summary = summarize(args, repeats)  # written after every repeat, so a cut-short run keeps what it measured
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print_table(summary)


def summarize(args: argparse.Namespace, repeats: list[dict]) -> dict:
    steps_ratios = [r["culled_steps"] / r["steps_one_fit"] for r in repeats]
    wall_ratios = [r["culled_wall_s"] / r["full_wall_s"] for r in repeats]
    summary = {
        "steps_ratio": round(statistics.mean(steps_ratios), 3),
        "wall_ratio": round(statistics.mean(wall_ratios), 3),
        "repeats": len(repeats),
        "chosen_within_0_5": sum(r["gap_dev"] <= 0.5 for r in repeats),
        "chosen_in_top_2": sum(r["chosen_rank"] <= 2 for r in repeats),
        "same_as_full_to_cull": all(r["same_as_full_to_cull"] for r in repeats),
        "full_dev_spread": [round(max(r["full_dev"].values()) - min(r["full_dev"].values()), 2) for r in repeats],
        "setup": {"seeds": args.seeds, "train_limit": args.train_limit, "epochs": args.epochs, "model": "minilm",
                  "learning_rate": args.learning_rate,
                  "cull_at": 0.2, "keep": 1, "cpus_per_trial": args.cpus_per_trial, "dev_limit": args.dev_limit,
                  "cpus": ray.cluster_resources().get("CPU")},
        "details": repeats,
    }
    return summary


def print_table(summary: dict) -> None:
    repeats = summary["details"]
    steps_ratios = [r["culled_steps"] / r["steps_one_fit"] for r in repeats]
    wall_ratios = [r["culled_wall_s"] / r["full_wall_s"] for r in repeats]
    print("\n| subset | steps culled / one fit | wall culled / full | chosen seed (rank) | best full seed | dev gap | chosen test | best-full test |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r, s, w in zip(repeats, steps_ratios, wall_ratios):
        print(f"| {r['subset_seed']} | {s:.2f} ({r['culled_steps']}/{r['steps_one_fit']}) | {w:.2f} ({r['culled_wall_s']:.0f}s/{r['full_wall_s']:.0f}s) "
              f"| {r['chosen_seed']} ({r['chosen_rank']}) | {r['best_full_seed']} | {r['gap_dev']:.2f} | {r['chosen_test']:.2f} | {r['best_full_test']:.2f} |")
    print("\n| subset | search | " + " | ".join(repeats[0]["culled_wall_parts_s"]) + " |")
    print("|---|---|" + "---:|" * len(repeats[0]["culled_wall_parts_s"]))
    for r in repeats:
        for search_name in ("culled", "full"):
            print(f"| {r['subset_seed']} | {search_name} | " + " | ".join(f"{v:.1f}" for v in r[f"{search_name}_wall_parts_s"].values()) + " |")
    print(json.dumps({k: summary[k] for k in ("steps_ratio", "wall_ratio", "repeats", "chosen_within_0_5", "chosen_in_top_2",
                                              "same_as_full_to_cull", "full_dev_spread")}))


if __name__ == "__main__":
    main()
