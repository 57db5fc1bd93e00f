"""Reproduce the paper's experiments (Tables 5 and 6 in form): mean +- std test scores over seeds for every
model, in-domain on STSb-1k, BWS cross-topic, BWS in-topic and MRPC, and transfer STSb -> BWS / MRPC.

    .venv/bin/python -m bench.reproduce --quick        # small version: 1 seed, small splits, RS and BM25 (see QUICK)
    .venv/bin/python -m bench.reproduce                # full: 3 seeds, every job spec as shipped (about a day on 2 cores)
    .venv/bin/python -m bench.reproduce --only stsb_1k --seeds 42 43 44
    .venv/bin/python -m bench.reproduce --gpu --seeds 42 --cpus 5     # on a GPU machine: fits, labeling, evaluation there
    .venv/bin/python -m bench.reproduce --collect      # tabulate the finished runs only (e.g. copied from elsewhere)
    .venv/bin/python -m bench.reproduce --collect --beside OTHER_RUNS   # and another set's (e.g. another teacher's) beside them
    .venv/bin/python -m bench.reproduce --only bws_in_topic --seeds 43 --part kde   # one seed in shorter runs
    .venv/bin/python -m bench.reproduce --set teacher.kind=bi-encoder   # every run with other spec settings

The job specs are read from jobs/ of this source checkout, with RESULTS.md's MiniLM cross-encoder teacher
(MINILM_TEACHER) where a job's default teacher is another; --set replaces it.

Each (experiment, seed) is one run of a job spec in jobs/ (``ar.run``, as `augsbert run`), with `seed` set (it drives the splits,
train_limit subsets, sampling and training). Runs land in --runs; on a rerun a finished run (its metrics.json)
is reused and an unfinished one is resumed (as `augsbert run --resume`: its finished fits are kept), so a long
run can be stopped and continued. Writes docs/RESULTS.md and bench/results/reproduce.json for the whole reproduction,
else RESULTS.md and reproduce.json in --runs; a hand-written section "## What was tried where a target is missed" in
the page is kept when the page is written again.

--part splits an in-domain seed into runs that are each short enough for a machine that cannot keep a run across
sessions (see PARTS and SPLITS): rest + kde, or lexical + semantic + kde where the rest part may not fit in one;
lexical + kde alone makes a seed without the semantic strategies. Every part draws the splits, the teacher and the
pools that a whole run draws (BM25 sizes the KDE pool even when it is not run), and a seed whose parts of one split
have all finished is tabulated as one run. A part started after another part of its seed has finished on this
machine copies that part's teacher models (cross_encoder.trained, teacher.bi_encoder.trained) instead of fitting
the same ones again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import yaml

import augsbert_ray as ar
from augsbert_ray.pipeline import comparable_spec, describe, flatten
from augsbert_ray.report import MODEL_TITLES

ROOT = Path(__file__).resolve().parents[1]  # the source checkout: jobs/, docs/, bench/results/
COMMAND = [".venv/bin/python", "-m", "bench.reproduce"]  # as the results page records it

# RESULTS.md's teacher, where a job's default is now a stronger one (README "Teachers"); --set can still replace it.
MINILM_TEACHER = ["teacher.kind=cross-encoder", "cross_encoder.model=minilm", "cross_encoder.learning_rate=1.0e-4"]
# experiment -> (job spec, overrides of the full run)
EXPERIMENTS: dict[str, tuple[str, list[str]]] = {
    "stsb_1k": ("jobs/stsb_indomain_all_strategies.yaml", []),
    "bws_cross_topic": ("jobs/bws_cross_topic.yaml", []),
    "bws_in_topic": ("jobs/bws_in_topic.yaml", MINILM_TEACHER),
    "mrpc": ("jobs/mrpc_indomain.yaml", []),
    "transfer_stsb_bws": ("jobs/transfer_stsb_bws.yaml", []),
    "transfer_stsb_mrpc": ("jobs/transfer_stsb_mrpc.yaml", []),
}
IN_DOMAIN = [name for name in EXPERIMENTS if not name.startswith("transfer_")]
TRANSFER = [name for name in EXPERIMENTS if name.startswith("transfer_")]
IN_DOMAIN_ROWS = ["jaccard", "zero_shot", "cross_encoder", "teacher_bi_encoder", "teacher", "sbert", "augsbert_rs", "augsbert_kde", "augsbert_bm25",
                  "augsbert_ss", "augsbert_bm25_ss"]
TRANSFER_ROWS = ["jaccard", "zero_shot", "cross_encoder", "teacher_bi_encoder", "teacher", "sbert_source", "augsbert", "sbert_target"]
# The row that scores the whole teacher, by teacher.kind: its one model, or the ensemble.
TEACHER_ROW = {"cross-encoder": "cross_encoder", "bi-encoder": "teacher_bi_encoder", "ensemble": "teacher"}
# SBERT is seed-optimized in the in-domain experiments of the full run (the paper's section 5).
SEED_OPTIMIZED_SBERT = ["tuning.seeds=5", "tuning.models=[sbert]", "tuning.cpus_per_trial=1"]
# The small version: fewer and shorter fits, subsampled evaluation, no seed optimization, and in-domain only the
# two strategies the targets compare (random and BM25): every fit costs ~25 s of Ray Train start on 2 cores.
QUICK = ["data.train_limit=100", "data.eval_limit=200", "cross_encoder.epochs=1", "cross_encoder.max_seq_length=64",
         "bi_encoder.max_seq_length=64", "sampling.strategies=[random,bm25]", "sampling.top_k=1", "training.cpus_per_worker=2"]
QUICK_TARGET = ["target.data.train_limit=300", "target.data.eval_limit=200"]
# --gpu: every fit, labeling actor and evaluation on the (one) GPU; tuning trials share it.
GPU = ["training.use_gpu=true", "labeling.gpus_per_actor=0.25", "evaluation.gpus=0.25"]
GPU_TUNING = ["tuning.gpus_per_trial=0.2"]
# An in-domain seed as shorter runs: on BWS, KDE's fit alone is longer than the four other fits together (its pool is
# 10x BM25's). MRPC's rest part (seeds 42, 43: 3.1 and 2.5 hours of fits and stages on 2 cores shared with other
# work) was cut off at a session's end both times; lexical + semantic split it.
# fitted or scored alike by every part of a seed: the baselines and whichever teacher models the teacher has
SHARED_ROWS = ["jaccard", "zero_shot", "cross_encoder", "teacher_bi_encoder", "teacher"]
# part -> (its strategies, the rows it gives). A part that gives SBERT's row, or retrieves with it (semantic),
# seed-optimizes it; kde trains SBERT once (the job always does) and leaves its row.
PARTS: dict[str, tuple[list[str], list[str]]] = {
    "rest": (["bm25", "random", "semantic", "bm25+semantic"],
             [*SHARED_ROWS, "sbert", "augsbert_bm25", "augsbert_rs", "augsbert_ss", "augsbert_bm25_ss"]),
    "kde": (["kde"], ["augsbert_kde"]),
    "lexical": (["bm25", "random"], [*SHARED_ROWS, "sbert", "augsbert_bm25", "augsbert_rs"]),
    "semantic": (["semantic", "bm25+semantic"], ["augsbert_ss", "augsbert_bm25_ss"]),
}
# Each split makes a seed; its first part gives SHARED_ROWS. The first two make a whole one; lexical + kde makes a
# seed without the semantic strategies (the minimum: BM25, RS, KDE) and counts only while semantic is missing.
SPLITS = [("rest", "kde"), ("lexical", "semantic", "kde"), ("lexical", "kde")]

def overrides_for(name: str, quick: bool, gpu: bool, part: str | None = None) -> list[str]:
    extra = EXPERIMENTS[name][1]
    transfer = name in TRANSFER
    if quick:
        return [*extra, *QUICK, *(QUICK_TARGET if transfer else []), *(GPU if gpu else [])]
    # a part that retrieves semantic neighbours does so with the run's SBERT (sampling.semantic_model: gold), which
    # must be the seed-optimized one of a whole run
    seed_search = not transfer and (part is None or "sbert" in PARTS[part][1] or "semantic" in PARTS[part][0])
    tuning = [*SEED_OPTIMIZED_SBERT, *(GPU_TUNING if gpu else [])] if seed_search else []
    strategies = [f"sampling.strategies=[{','.join(PARTS[part][0])}]"] if part else []
    return [*extra, *tuning, *strategies, *(GPU if gpu else [])]


def host() -> dict[str, str | int]:
    """Where and with what code a run ran: recorded beside it, so that results aggregated elsewhere still say."""
    import ray
    import torch

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:  # no git on this machine
        commit = ""
    return {"machine": platform.machine(), "node": platform.node(), "cpus_given_to_ray": int(ray.cluster_resources().get("CPU", 0)),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", "torch": torch.__version__,
            "commit": commit or "unknown"}


def finished_run(runs: Path, run_name: str) -> Path | None:
    finished = sorted(runs.glob(f"{run_name}-*/metrics.json"))
    return finished[-1].parent if finished else None


def base_name(name: str, seed: int, quick: bool) -> str:
    return f"{name}-{'quick' if quick else 'full'}-seed{seed}"


# teacher model (its directory under a run's models/) -> the setting that gives it to a run as already trained
TEACHER_MODELS = {"cross_encoder": "cross_encoder.trained", "teacher_bi_encoder": "teacher.bi_encoder.trained"}


def shared_teacher(runs: Path, base: str, part: str | None, stopped: Path | None) -> list[str]:
    """A part copies the teacher models of a finished part of its seed (any other part): the same teacher, not
    fitted again.

    A stopped run keeps the teacher its spec.yaml names, so that it resumes with the spec it started with."""
    if stopped:
        spec = yaml.safe_load((stopped / "spec.yaml").read_text())
        given = {setting: reduce(lambda section, key: (section or {}).get(key), setting.split("."), spec)
                 for setting in TEACHER_MODELS.values()}
        return [f"{setting}={model}" for setting, model in given.items() if model]
    for sibling in (finished_run(runs, f"{base}_{other}") for other in PARTS if part and other != part):
        given = [f"{setting}={sibling / 'models' / name}" for name, setting in TEACHER_MODELS.items()
                 if sibling and (sibling / "models" / name).is_dir()]
        if given:
            return given
    return []

def run_one(name: str, seed: int, options: Options, runs: Path) -> None:
    """One experiment at one seed (or one --part of it), unless it has finished; a stopped run is resumed."""
    base = base_name(name, seed, options.quick)
    run_name = f"{base}_{options.part}" if options.part else base
    job = EXPERIMENTS[name][0]
    # the first run starts the embedded Ray (inside its run.log), and the later ones join it
    cpus = [f"ray.num_cpus={options.cpus}"] if options.cpus else []
    overrides = [*overrides_for(name, options.quick, options.gpu, options.part), *cpus, *options.settings, f"seed={seed}",
                 f"output_dir={runs}", f"name={run_name}"]
    if finished := finished_run(runs, base) or finished_run(runs, run_name):
        check_finished_spec(finished, ROOT / job, overrides)
        return
    unfinished = sorted(path.parent for path in runs.glob(f"{run_name}-*/spec.yaml"))  # stopped runs: continue the latest
    stopped = unfinished[-1] if unfinished else None
    spec = ar.load_spec(ROOT / job, [*overrides, *shared_teacher(runs, base, options.part, stopped)])
    run_dir = ar.run(spec, data_dir=options.data_dir, resume=stopped, verbose=options.verbose).run_dir
    (run_dir / "host.json").write_text(json.dumps(host()), encoding="utf-8")


def check_finished_spec(run_dir: Path, job: Path, overrides: list[str]) -> None:
    """A finished run is reused only if it computed what ``job`` with ``overrides`` asks for (before: whatever --set
    asked). Its strategies (a whole run holds every part's) and a teacher copied from a sibling part may differ."""
    copied_teacher = [f"{setting}=null" for setting in TEACHER_MODELS.values()]  # may be gone with its sibling
    then, now = (flatten(comparable_spec(ar.load_spec(path, [*given, *copied_teacher])))
                 for path, given in ((run_dir / "spec.yaml", []), (job, overrides)))
    changed = {key: (then.get(key), now.get(key)) for key in sorted(then.keys() | now.keys())
               if then.get(key) != now.get(key) and key != "sampling.strategies"}
    if changed:
        raise ar.SpecError(f"{run_dir} finished with other settings than asked for: {describe(changed)}; give another --runs, or "
                        "move the run away to run it again")


def read_run(run_dir: Path) -> tuple[dict, dict, dict]:
    """A finished run's metrics.json, spec.yaml and host.json (absent for runs made before it was recorded). A file
    that cannot be read, or lacks what the tables take from it, is a SpecError naming it."""
    metrics = _read_mapping(run_dir / "metrics.json", json.loads)
    test, details = metrics.get("test"), metrics.get("details")
    if not (isinstance(test, dict) and isinstance(details, dict) and set(test) <= set(details)
            and all(isinstance(score, (int, float)) and isinstance(details[row], dict) for row, score in test.items())):
        raise ar.SpecError(f"{run_dir / 'metrics.json'}: no 'test' scores (numbers) with a 'details' entry for each")
    unusable = next((row for row, score in test.items() if not math.isfinite(score)), None)
    if unusable:
        raise ar.SpecError(f"{run_dir / 'metrics.json'}: the test score of {unusable} is {test[unusable]}, not a number a mean can take")
    spec = _read_mapping(run_dir / "spec.yaml", yaml.safe_load)
    if not isinstance(spec.get("sampling"), dict):
        raise ar.SpecError(f"{run_dir / 'spec.yaml'}: no 'sampling' section")
    host_file = run_dir / "host.json"
    return metrics, spec, _read_mapping(host_file, json.loads) if host_file.exists() else {}


def _read_mapping(path: Path, parse: Callable[[str], Any]) -> dict:
    try:
        value = parse(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:  # ValueError: JSON and UTF-8 errors
        raise ar.SpecError(f"{path}: cannot read: {str(exc).splitlines()[0]}") from None
    if not isinstance(value, dict):
        raise ar.SpecError(f"{path}: not a mapping but {type(value).__name__}")
    return value


def merge_parts(parts: dict[str, tuple[dict, dict, dict]]) -> tuple[dict, dict, dict]:
    """One seed's runs made as the parts of a split, as if one run: each part's rows (PARTS), the strategies of all,
    and their wall times added. Records how far the shared rows of the other parts are from the first part's on test
    (the same seed makes the same splits and teacher; a nonzero gap is nondeterminism of the fits)."""
    first, *others = parts
    metrics, spec, where = parts[first]
    metrics = {**metrics, "test": {}, "details": {}, "parts": {}}
    spec = {**spec, "sampling": {**spec["sampling"], "strategies": []}}
    for part, (part_metrics, part_spec, _) in parts.items():
        spec["sampling"]["strategies"] += part_spec["sampling"]["strategies"]
        for row in (row for row in PARTS[part][1] if row in part_metrics["test"]):  # a teacher has one or two models
            metrics["test"][row] = part_metrics["test"][row]
            metrics["details"][row] = part_metrics["details"][row]
    for part in others:
        part_metrics = parts[part][0]
        shared = [row for row in SHARED_ROWS if row in part_metrics["test"]]
        gaps = {row: round(abs(part_metrics["test"][row] - metrics["test"][row]), 4) for row in shared}
        metrics["parts"][part] = {"seconds": run_seconds(part_metrics), "test_gap_of_shared_rows": gaps}
    return metrics, spec, where

def run_seconds(metrics: dict) -> float:
    """A run's compute: its last attempt, the fits it reused from earlier attempts, and its other parts'."""
    return (metrics.get("wall_seconds", {}).get("total", 0.0) + sum(metrics.get("reused_fits", {}).values())
            + sum(part["seconds"] for part in metrics.get("parts", {}).values()))


def seed_result(name: str, seed: int, runs: Path, quick: bool = False) -> tuple[dict, dict, dict] | None:
    """The finished run of one experiment at one seed (or its finished parts, merged); None if there is none."""
    base = base_name(name, seed, quick)
    if whole := finished_run(runs, base):
        return read_run(whole)
    for split in SPLITS:
        parts = {part: finished_run(runs, f"{base}_{part}") for part in split}
        if all(parts.values()):
            return merge_parts({part: read_run(run_dir) for part, run_dir in parts.items()})
    return None


def tabulate(experiment: str, options: Options, runs: Path) -> tuple[dict, dict | None, dict[str, list]]:
    """One experiment's finished seeds in ``runs``: each row's test scores summarized over them, the first seed's
    spec (None when no seed has finished) and where and how long they ran."""
    scores: dict[str, list[float]] = {}
    auc05: dict[str, list[float]] = {}  # classification: AUC up to 5% false positives, x100, beside F1
    info: dict[str, list] = {"seconds": [], "hosts": [], "seeds": [], "parts": []}
    first_spec = None
    for seed in options.seeds:
        if (finished := seed_result(experiment, seed, runs, options.quick)) is None:
            continue
        metrics, spec, where = finished
        if "parts" in metrics:
            info["parts"].append(f"{experiment} seed {seed}: " + "; ".join(
                f"{part} part, test gaps to the first part: " + ", ".join(f"{row} {gap:.4f}" for row, gap in gaps["test_gap_of_shared_rows"].items())
                for part, gaps in metrics["parts"].items()))
        first_spec = first_spec or spec
        info["seeds"].append(seed)
        info["seconds"].append(run_seconds(metrics))
        info["hosts"].append(where)
        for row, value in metrics["test"].items():
            scores.setdefault(row, []).append(value)
            if "test_auc05" in metrics["details"][row]:
                auc05.setdefault(row, []).append(100 * metrics["details"][row]["test_auc05"])
    summary = {row: {**summarize(values), **({"auc05": summarize(auc05[row])} if row in auc05 else {})} for row, values in scores.items()}
    return summary, first_spec, info


def collect(options: Options, runs: Path) -> tuple[dict, dict, Path]:
    """The experiments' (``options.experiments``) finished seeds in another set of runs (e.g. another teacher's),
    summarized as ``tabulate`` does: (results, specs, runs)."""
    tabulated = {experiment: tabulate(experiment, options, runs) for experiment in options.experiments}
    return ({e: summary for e, (summary, spec, _) in tabulated.items() if spec},
            {e: spec for e, (_, spec, _) in tabulated.items() if spec}, runs)


def summarize(scores: list[float]) -> dict[str, float | int]:
    return {"mean": round(statistics.fmean(scores), 2), "std": round(statistics.stdev(scores), 2) if len(scores) > 1 else 0.0,
            "n_seeds": len(scores)}


def mean_std(entry: dict, seeds: int) -> str:
    """Mean ± std, with the number of seeds where it is one, or fewer than the ``seeds`` of its experiment."""
    n = entry["n_seeds"]
    text = f"{entry['mean']:.2f} ± {entry['std']:.2f}" if n > 1 else f"{entry['mean']:.2f}"
    if n < seeds:
        return f"{text} ({n} of {seeds} seeds)"
    return text + (" (1 seed)" if n == 1 else "")


def cell(results: dict, experiment: str, row: str) -> str:
    rows = results.get(experiment, {})
    if row not in rows:
        return "not run"
    seeds, entry = max(other["n_seeds"] for other in rows.values()), rows[row]
    return mean_std(entry, seeds) + (f" / {mean_std(entry['auc05'], seeds)}" if "auc05" in entry else "")


def table(results: dict, experiments: list[str], rows: list[str], headers: list[str]) -> list[str]:
    """Mean ± std per model and experiment; a model no experiment scored (e.g. another kind of teacher) is left out."""
    lines = ["| model | " + " | ".join(headers) + " |", "|---|" + "---:|" * len(headers)]
    for row in (row for row in rows if any(row in results.get(e, {}) for e in experiments)):
        lines.append(f"| {MODEL_TITLES.get(row, row)} | " + " | ".join(cell(results, e, row) for e in experiments) + " |")
    return lines


# The rows compared beside another set of runs: the teacher (each set's own teacher row), fine-tuning the teacher's
# bi-encoder alone, and the students.
BESIDE_ROWS = {"in-domain": ["teacher", "teacher_bi_encoder", "sbert", "augsbert_rs", "augsbert_kde", "augsbert_bm25"],
               "transfer": ["teacher", "sbert_source", "augsbert", "sbert_target"]}
BESIDE_TITLES = {"teacher": "Teacher (each set's own)", "teacher_bi_encoder": "teacher.bi_encoder fine-tuned on gold (its SBERT)"}


def beside_cell(results: dict, specs: dict, experiment: str, row: str, seeds: int) -> str:
    """One set's mean for a row of BESIDE_ROWS, with its number of seeds where fewer than ``seeds``."""
    if row == "teacher" and experiment in specs:
        row = TEACHER_ROW[teacher_kind(specs[experiment])]
    entry = results.get(experiment, {}).get(row)
    if not entry:
        return "-"
    return f"{entry['mean']:.2f}" + (f" ({entry['n_seeds']} seed{'s' * (entry['n_seeds'] > 1)})" if entry["n_seeds"] < seeds else "")


def beside_tables(results: dict, specs: dict, beside: tuple[dict, dict, Path], headers: dict[str, str]) -> list[str]:
    """This page's runs and another set's (``collect``) side by side: the teachers and the students, test means."""
    other_results, other_specs, other_runs = beside
    seeds = max((entry["n_seeds"] for rows in results.values() for entry in rows.values()), default=1)
    lines = [f"## Beside the runs in `{other_runs.as_posix()}`", "",
             "Test means over seeds, this page's runs / those runs (their full tables: the other results pages). Their "
             "teachers: " + "; ".join(f"{e}: {describe_teacher(spec)}" for e, spec in other_specs.items()) + ".", ""]
    for scenario, experiments in (("in-domain", IN_DOMAIN), ("transfer", TRANSFER)):
        shown = [e for e in experiments if e in results or e in other_results]
        if not shown:
            continue
        lines += ["| model | " + " | ".join(headers[e].replace(" / AUC(0.05)", "") for e in shown) + " |", "|---|" + "---:|" * len(shown)]
        for row in BESIDE_ROWS[scenario]:
            cells = [f"{beside_cell(results, specs, e, row, seeds)} / {beside_cell(other_results, other_specs, e, row, seeds)}" for e in shown]
            if any(cell != "- / -" for cell in cells):
                lines.append(f"| {BESIDE_TITLES.get(row, MODEL_TITLES.get(row, row))} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def verdict(value: float, target: float, at_least: bool = True) -> str:
    """Met or missed, judged on ``value`` as printed (2 decimals): 1.4999999 (two 2-decimal means apart) meets 1.5."""
    value = round(value, 2)
    met = value >= target if at_least else value <= target
    return f"target {'>=' if at_least else '<='} {target:+.1f}: {'met' if met else 'missed'}"


def teacher_kind(spec: dict) -> str:
    return spec.get("teacher", {}).get("kind", "cross-encoder")


def describe_teacher(spec: dict) -> str:
    """The teacher of a run, from its spec.yaml: its kind and models."""
    kind = teacher_kind(spec)
    models = {"cross-encoder": [f"cross-encoder from {spec.get('cross_encoder', {}).get('model', 'minilm')}"],
              "bi-encoder": [f"bi-encoder {spec.get('teacher', {}).get('bi_encoder', {}).get('model')} fine-tuned on gold"]}
    return f"ensemble of {models['cross-encoder'][0]} and {models['bi-encoder'][0]}" if kind == "ensemble" else models[kind][0]


def deltas(results: dict, specs: dict) -> list[str]:
    """The paper's effects, as measured, against the targets: AugSBERT-BM25 - SBERT >= +1.5 on STSb and both BWS
    splits and >= 0 on MRPC, RS no better than BM25, transfer STSb -> BWS AugSBERT - SBERT-source >= +5; and the
    teacher's: better than SBERT, and on STSb-1k AugSBERT-BM25 at least 97% of the teacher on test."""
    lines = []
    for experiment in IN_DOMAIN:
        rows = results.get(experiment, {})
        teacher = TEACHER_ROW[teacher_kind(specs.get(experiment, {}))]
        if teacher in rows and "sbert" in rows:
            lines.append(f"- {experiment}: teacher - SBERT = {rows[teacher]['mean'] - rows['sbert']['mean']:+.2f} (target > 0: "
                         f"{'met' if rows[teacher]['mean'] > rows['sbert']['mean'] else 'missed'})")
        if experiment == "stsb_1k" and teacher in rows and "augsbert_bm25" in rows:
            share = 100 * rows["augsbert_bm25"]["mean"] / rows[teacher]["mean"]
            lines.append(f"- {experiment}: AugSBERT-BM25 / teacher = {share:.1f}% (target >= 97%: {'met' if round(share, 1) >= 97 else 'missed'})")
        if "augsbert_bm25" in rows and "sbert" in rows:
            gain = rows["augsbert_bm25"]["mean"] - rows["sbert"]["mean"]
            target = 0.0 if experiment == "mrpc" else 1.5  # MRPC: F1 no lower than SBERT's
            line = f"- {experiment}: AugSBERT-BM25 - SBERT = {gain:+.2f} ({verdict(gain, target)})"
            if "augsbert_rs" in rows:  # a run of some strategies may lack it
                rs_over_bm25 = rows["augsbert_rs"]["mean"] - rows["augsbert_bm25"]["mean"]
                line += f"; AugSBERT-RS - AugSBERT-BM25 = {rs_over_bm25:+.2f} ({verdict(rs_over_bm25, 0.0, at_least=False)})"
            lines.append(line)
    for experiment in TRANSFER:
        rows = results.get(experiment, {})
        if "augsbert" in rows and "sbert_source" in rows:
            gain = rows["augsbert"]["mean"] - rows["sbert_source"]["mean"]
            lines.append(f"- {experiment}: AugSBERT - SBERT-source = {gain:+.2f}"
                         + (f" ({verdict(gain, 5.0)})" if experiment == "transfer_stsb_bws" else ""))
    return lines


NOTES_HEADING = "## What was tried where a target is missed"


def kept_notes(path: Path) -> list[str]:
    """The page's hand-written section under NOTES_HEADING, with its heading, so that writing the page again keeps
    what the measured effects cannot say: by how much a target is missed, what was tried and where it is measured."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    if NOTES_HEADING not in lines:
        return []
    start = lines.index(NOTES_HEADING)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return ["\n".join(lines[start:end]).rstrip(), ""]


def seed_optimization(specs: dict[str, dict]) -> str:
    """How the in-domain runs' ``specs`` seed-optimized SBERT, read from their tuning sections (--set may change it)."""
    def how(tuning: dict | None) -> str:
        if not tuning or "sbert" not in tuning.get("models", ["sbert"]):
            return "not seed-optimized"
        seeds, keep = tuning.get("seeds", 5), tuning.get("keep", 1)
        count = len(seeds) if isinstance(seeds, list) else seeds
        cull = (f"ASHA at {tuning.get('cull_at', 0.2):.0%} of the steps" if tuning.get("scheduler") == "asha"
                else f"all but the best{'' if keep == 1 else f' {keep}'} culled at {tuning.get('cull_at', 0.2):.0%} of the steps")
        return f"seed-optimized: {count} seeds, {cull}, chosen on dev"
    ways = {experiment: how(spec.get("tuning")) for experiment, spec in specs.items()}
    if not ways:
        return ""
    if len(set(ways.values())) == 1:
        return f" In-domain, SBERT is {next(iter(ways.values()))} (`tuning` in the specs linked below)."
    return " In-domain, SBERT is " + "; ".join(f"{e}: {way}" for e, way in ways.items()) + " (`tuning` in the specs linked below)."


def describe_hosts(hosts: list[dict]) -> str:
    kinds = sorted({f"{h.get('gpu', '?')} GPU, {h.get('cpus_given_to_ray', '?')} CPUs given to Ray, torch {h.get('torch', '?')}"
                    for h in hosts})
    return "; ".join(kinds) or "not recorded"


def write_results(path: Path, results: dict, specs: dict, runs: dict, options: Options, command: str, seconds: float,
                  beside: tuple[dict, dict, Path] | None = None) -> None:
    headers = {"stsb_1k": "STSb (1k gold), Spearman", "bws_cross_topic": "BWS cross-topic, Spearman",
               "bws_in_topic": "BWS in-topic, Spearman", "mrpc": "MRPC, F1 / AUC(0.05)", "transfer_stsb_bws": "STSb → BWS in-topic, Spearman",
               "transfer_stsb_mrpc": "STSb → MRPC, F1 / AUC(0.05)"}
    teachers = {experiment: describe_teacher(spec) for experiment, spec in specs.items()}
    lines = [
        "# Reproduction of the paper's experiments" + (" (quick version)" if options.quick else ""),
        "",
        f"Command: `{command}` ({seconds / 60:.1f} min; finished runs in `{options.runs}` are reused, not rerun)  ",
        f"Runs: {sum(len(r['seconds']) for r in runs.values())}, seeds {sorted({seed for r in runs.values() for seed in r['seeds']})}; their wall times add up to "
        f"{sum(sum(r['seconds']) for r in runs.values()) / 60:.1f} min. They ran on: {describe_hosts([h for r in runs.values() for h in r['hosts']])}.  ",
        "Seeds per experiment: " + "; ".join(f"{e} {', '.join(map(str, r['seeds'])) or 'none'}" for e, r in runs.items()) + ".  ",
        *([f"Seeds made as parts (`--part`, see `{shlex.join(COMMAND)} --help`): {'; '.join(parts)}.  "]
          if (parts := [p for r in runs.values() for p in r["parts"]]) else []),
        "Teacher: " + ("; ".join(f"{experiment}: {teacher}" for experiment, teacher in teachers.items())
                       if len(set(teachers.values())) > 1 else next(iter(teachers.values()))) + ".  ",
        *([f"Other teachers' tables: {', '.join(f'[{page.name}]({page.name})' for page in others)}.  "]
          if (others := sorted(page for page in path.parent.glob("RESULTS*.md") if page.name != path.name)) else []),
        "Backbone of every student: all-MiniLM-L6-v2 (the packaged `minilm`), not the paper's bert-base. Scores x100 on "
        "the test split, mean ± std over seeds; each seed is a whole run (splits, subsets, sampling, training)."
        + seed_optimization({e: spec for e, spec in specs.items() if e in IN_DOMAIN}),
        "",
        "## In-domain (the paper's Table 5)",
        "",
        *table(results, IN_DOMAIN, IN_DOMAIN_ROWS, [headers[e] for e in IN_DOMAIN]),
        "",
        "## Domain transfer (the paper's Table 6)",
        "",
        "The target is the target dataset's train pairs with their labels removed; every model is scored on the "
        "target's test split, whose pairs never enter training.",
        "",
        *table(results, TRANSFER, TRANSFER_ROWS, [headers[e] for e in TRANSFER]),
        "",
        *(beside_tables(results, specs, beside, headers) if beside else []),
        "## Effects against the targets",
        "",
        *deltas(results, specs),
        "",
        *kept_notes(path),
        "## Hyperparameters",
        "",
        "Each run's resolved spec, as the run saved it: spec.yaml in its run directory, beside its metrics.json. A seed "
        "made as parts (`--part`) has one run per part.",
        "",
        *run_links(path, specs, runs, options),
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def seed_run_dirs(name: str, seed: int, runs: Path, quick: bool = False) -> list[tuple[str, Path]]:
    """The run directories that seed_result tabulates for one experiment at one seed, as (part or "whole", directory)."""
    base = base_name(name, seed, quick)
    if whole := finished_run(runs, base):
        return [("whole", whole)]
    for split in SPLITS:
        parts = {part: finished_run(runs, f"{base}_{part}") for part in split}
        if all(parts.values()):
            return list(parts.items())
    return []


def run_links(path: Path, specs: dict, runs: dict, options: Options) -> list[str]:
    """A table of the tabulated runs (the experiments in specs, their seeds in runs), each linking its spec.yaml and
    metrics.json relative to the results page."""
    run_root, page_dir = options.runs.resolve(), path.resolve().parent
    lines = ["| experiment | seed | part | run directory (spec.yaml) | metrics |", "|---|---:|---|---|---|"]
    for experiment in specs:
        for seed in runs[experiment]["seeds"]:
            for part, run_dir in seed_run_dirs(experiment, seed, run_root, options.quick):
                spec, metrics = (Path(os.path.relpath(run_dir / file, page_dir)).as_posix() for file in ("spec.yaml", "metrics.json"))
                lines.append(f"| {experiment} | {seed} | {part} | [{run_dir.name}]({spec}) | [metrics.json]({metrics}) |")
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m bench.reproduce``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.reproduce",
        description="Run the job specs of jobs/ (in-domain STSb-1k, BWS cross-topic and in-topic, MRPC; transfer STSb -> BWS "
        "and STSb -> MRPC) once per seed, each as an `augsbert run` in --runs, and tabulate mean +- std test scores of every "
        "model (docs/RESULTS.md, bench/results/reproduce.json). A finished run is reused, a stopped one resumed, so a long "
        "reproduction can be stopped and continued. As with `augsbert run`, each run's Ray and library output goes to its "
        "run.log (-v: to the console). The full version is about a day on 2 CPU cores; --quick about 20 minutes.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, and Ray's and the libraries' output on the "
                        "console (else in each run's run.log)")
    parser.add_argument("--quick", action="store_true", help="the small version: 1 seed, small splits, RS and BM25, no seed optimization")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: 42 43 44 (quick: 42)")
    parser.add_argument("--only", nargs="+", choices=list(EXPERIMENTS), help="run these experiments only")
    parser.add_argument("--runs", default="runs/reproduce", help="where the run directories go (default: %(default)s)")
    parser.add_argument("--data-dir", help="named datasets' directory (default: as for augsbert run)")
    parser.add_argument("--cpus", type=int, help="CPUs for the embedded Ray (> 0; default: all)")
    parser.add_argument("--gpu", action="store_true", help="on the GPU: each fit on a whole GPU, labeling actors and evaluation on a quarter, seed-search trials on a fifth")
    parser.add_argument("--part", choices=list(PARTS), help="run only this part of each in-domain seed: rest + kde, or lexical + semantic + kde, make a seed "
                        "(lexical + kde: one without the semantic strategies)")
    parser.add_argument("--collect", action="store_true", help="run nothing: tabulate the finished runs in --runs")
    parser.add_argument("--beside", metavar="RUNS", help="another set of finished runs (e.g. another teacher's, "
                        "bench/results/reproduce_best_teacher_runs) to tabulate beside these: each teacher and student row, "
                        "this page's mean / that set's")
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="more overrides for every run's spec (several after one --set, or --set again)")
    parser.add_argument("--results", help=f"markdown output; its hand-written section '{NOTES_HEADING[3:]}' is kept (default: "
                        "docs/RESULTS.md for the whole reproduction, every experiment at the default seeds without --part or --quick; "
                        "else RESULTS.md in --runs, so that a part does not replace the page)")
    parser.add_argument("--json", help="JSON output (default: bench/results/reproduce.json, or reproduce.json in --runs, as --results)")
    return parser


# what reproduce sets in every run itself, and the option that sets it
OWN_SETTINGS = {"seed": "--seeds", "output_dir": "--runs", "name": "the experiment and seed"}


DEFAULT_SEEDS = (42, 43, 44)


@dataclass(frozen=True)
class Options:
    """The options of a reproduction (build_parser's), with the defaults that depend on the others filled in."""

    quick: bool
    seeds: tuple[int, ...]
    only: tuple[str, ...]  # empty: every experiment
    runs: Path
    data_dir: str | None
    cpus: int | None
    gpu: bool
    part: str | None
    collect: bool
    beside: Path | None
    settings: tuple[str, ...]  # --set
    results: Path
    json: Path
    verbose: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        """The parsed options. --seeds defaults to 42 43 44 (--quick: 42); --results and --json to the committed page
        and JSON for the whole reproduction, else to files in --runs (a quick run, a part or a few seeds would otherwise
        replace the committed page)."""
        seeds = tuple(args.seeds or ((42,) if args.quick else DEFAULT_SEEDS))
        whole = not (args.quick or args.only or args.part) and seeds == DEFAULT_SEEDS
        runs = Path(args.runs)
        return cls(
            quick=args.quick, seeds=seeds, only=tuple(args.only or ()), runs=runs, data_dir=args.data_dir, cpus=args.cpus,
            gpu=args.gpu, part=args.part, collect=args.collect, beside=Path(args.beside) if args.beside else None,
            settings=tuple(args.set),
            results=Path(args.results) if args.results is not None else ROOT / "docs" / "RESULTS.md" if whole else runs / "RESULTS.md",
            json=Path(args.json) if args.json is not None else ROOT / "bench" / "results" / "reproduce.json" if whole else runs / "reproduce.json",
            verbose=args.verbose,
        )

    @property
    def experiments(self) -> list[str]:
        return list(self.only or EXPERIMENTS)


def parse_options(argv: list[str]) -> Options:
    return Options.from_args(build_parser().parse_args(argv))


def check_options(options: Options) -> None:
    """The options' values that would otherwise fail after hours of runs, or be silently ignored."""
    repeated = sorted({seed for seed in options.seeds if options.seeds.count(seed) > 1})
    if repeated or min(options.seeds) < 0:
        raise ar.SpecError(f"--seeds: {repeated[0]} repeats" if repeated else "--seeds: must be >= 0")
    if options.cpus is not None and options.cpus < 1:
        raise ar.SpecError(f"--cpus {options.cpus}: must be > 0 (leave it out for all CPUs)")
    if options.part and (options.quick or set(options.experiments) & set(TRANSFER)):
        raise ar.SpecError("--part splits the full in-domain experiments only: give --only with in-domain ones, without --quick")
    for item in options.settings:
        if (key := item.split("=", 1)[0].strip()) in OWN_SETTINGS:
            raise ar.SpecError(f"--set {item}: reproduce sets {key} in every run from {OWN_SETTINGS[key]}")
    given = (("--set", options.settings), ("--part", options.part), ("--cpus", options.cpus), ("--gpu", options.gpu),
             ("--data-dir", options.data_dir))
    if options.collect and (ignored := [flag for flag, value in given if value]):
        raise ar.SpecError(f"{', '.join(ignored)}: --collect runs nothing, and tabulates the finished runs whatever they were made with")
    for flag, runs in (("--beside", options.beside), ("--runs", options.runs if options.collect else None)):
        if runs is not None and not runs.is_dir():
            raise ar.SpecError(f"{flag} {runs}: no such directory of runs")
    for flag, output in (("--results", options.results), ("--json", options.json)):
        if output.is_dir():
            raise ar.SpecError(f"{flag} {str(output)!r}: a directory; give a file")
        if not output.resolve().parent.is_dir() and output.resolve().parent != options.runs.resolve():  # runs: made
            raise ar.SpecError(f"{flag} {output}: its directory {output.resolve().parent} does not exist")


def reproduce(options: Options, command: str) -> int:
    """Run (or with ``options.collect`` only tabulate) the experiments and write the results page and its JSON.

    Args:
        options: What to run and where to write (``parse_options``).
        command: The command line, recorded on the results page.

    Example:
        >>> reproduce(parse_options(["--quick"]), ".venv/bin/python -m bench.reproduce --quick")  # doctest: +SKIP
    """
    check_options(options)
    if not options.collect:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the packaged MiniLM: nothing to download
    started = time.perf_counter()
    runs = options.runs.resolve()
    beside = collect(options, options.beside) if options.beside else None
    results: dict[str, dict] = {}
    specs: dict[str, dict] = {}
    run_info: dict[str, dict[str, list]] = {}
    for experiment in options.experiments:
        if not options.collect:
            for seed in options.seeds:
                run_one(experiment, seed, options, runs)
        summary, spec, run_info[experiment] = tabulate(experiment, options, runs)
        if spec is None:
            continue
        results[experiment], specs[experiment] = summary, spec
        seconds = time.perf_counter() - started
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps({"quick": options.quick, **results}, indent=2), encoding="utf-8")
        write_results(options.results, results, specs, run_info, options, command, seconds, beside)
        print(f"{experiment}: " + ", ".join(f"{row} {v['mean']:.2f}±{v['std']:.2f}" for row, v in results[experiment].items()), flush=True)
    if not results:  # e.g. one --part of a seed finished, and its other part has not run yet
        print(f"no experiment has a finished seed in {runs} yet: {options.results} is left as it was")
        return 0
    print(options.results.read_text(encoding="utf-8").split("## Hyperparameters")[0])
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.reproduce`` with ``argv`` (default: the command line); returns the exit status, 2 for bad
    options or run files."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options = parse_options(argv)
    ar.setup_logging(options.verbose)
    try:
        return reproduce(options, shlex.join([*COMMAND, *argv]))
    except (ar.SpecError, FileNotFoundError) as exc:
        print(f"bench.reproduce: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
