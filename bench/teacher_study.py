"""Teacher study: which teacher should label the silver pairs for the MiniLM student?

For each task and seed it fits, on the gold train split the job's `augsbert run` draws for that seed:
the cross-encoder from mpnet, the mpnet bi-encoder fine-tuned on gold, and their ensemble (each mapped onto the
gold scale on dev, as `teacher.kind: ensemble` does), and scores each on dev and test. The MiniLM
cross-encoder (today's teacher) and the seed-optimized MiniLM SBERT are read from the same seed's committed
reproduction run (bench/results/reproduce_runs): same splits, same train subset. Once per task it also labels
the same BM25 candidates with each teacher through the labeling engine, for the time and pairs/s.

    make models   # mpnet, once
    .venv/bin/python -m bench.teacher_study --task stsb_1k --seeds 42
    .venv/bin/python -m bench.teacher_study --task stsb_1k bws_cross_topic bws_in_topic mrpc --seeds 42 43 44

Fits are kept under --work (default runs/teacher_study/<task>-seed<seed>) and reused on a rerun (progress.json),
so a stopped study continues where it stopped. Results accumulate in bench/results/teacher_study.json;
the best teacher per task is chosen on dev only. On a GPU machine, bench/teacher_study_lanes.sh runs several cells
at once, and --merge adds their results files to this one.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray
import torch

import augsbert_ray as ar
from augsbert_ray.config import SamplingSpec
from augsbert_ray.evaluation import evaluate_on_ray
from augsbert_ray.files import atomic_write_text
from augsbert_ray.labeling import TEACHER_FILE, LabelJob, TeacherMember, label_dataset
from augsbert_ray.pipeline import Gold, RunContext, calibrate_teacher, read_gold, train_teacher, train_teacher_bi_encoder
from augsbert_ray.runtime import init_ray, log
from augsbert_ray.sampling import SentencePool, candidate_table
from bench.reproduce import MINILM_TEACHER, TEACHER_MODELS

ROOT = Path(__file__).resolve().parents[1]
TASKS = {
    "stsb_1k": "jobs/stsb_indomain_all_strategies.yaml",
    "bws_cross_topic": "jobs/bws_cross_topic.yaml",
    "bws_in_topic": "jobs/bws_in_topic.yaml",
    "mrpc": "jobs/mrpc_indomain.yaml",
}
# mpnet is a base-size model: the learning rate sentence-transformers' examples use for it (the MiniLM jobs use 1e-4).
MPNET_CROSS_ENCODER = ["cross_encoder.model=mpnet", "cross_encoder.learning_rate=2.0e-5"]
MPNET_TEACHERS = ["teacher.kind=ensemble", *MPNET_CROSS_ENCODER, "teacher.bi_encoder.model=mpnet"]
# Each compared teacher as a run's settings, and the fitted models the run is given (for
# bench/reproduce_best_teacher.sh). A cross-encoder teacher's run also fits and scores the mpnet bi-encoder: the
# results' row for fine-tuning mpnet alone, which the other teachers' runs have as their (member) bi-encoder.
MPNET_SCORED_BESIDE = ["evaluation.teacher_bi_encoder=true", "teacher.bi_encoder.model=mpnet"]
TEACHER_SETTINGS = {"ce_minilm": [*MINILM_TEACHER, *MPNET_SCORED_BESIDE], "ce_mpnet": [*MPNET_CROSS_ENCODER, *MPNET_SCORED_BESIDE],
                    "bi_mpnet": ["teacher.kind=bi-encoder", "teacher.bi_encoder.model=mpnet"], "ensemble_mpnet": MPNET_TEACHERS}
TEACHER_MODEL_DIRS = {"ce_minilm": ["teacher_bi_encoder"], "ce_mpnet": ["cross_encoder", "teacher_bi_encoder"],
                      "bi_mpnet": ["teacher_bi_encoder"], "ensemble_mpnet": ["cross_encoder", "teacher_bi_encoder"]}
# An mpnet cross-encoder fit takes hours on 2 CPU cores: a stopped study goes on from its last training state.
CHECKPOINTS = ["training.checkpoint_every=50"]
# The gold splits of the committed reproduction runs, made before repeats and train/dev/test overlaps were dropped:
# the MiniLM teacher and SBERT read from them were trained and scored on exactly these pairs.
AS_REPRODUCED = ["data.duplicates=keep", "data.on_overlap=keep"]
THROUGHPUT_PAIRS = 2000
RESULTS = ROOT / "bench" / "results" / "teacher_study.json"


def reproduction_row(task: str, seed: int, model: str) -> dict[str, float]:
    """dev/test of a model in the committed reproduction run of (task, seed): any part that scored it."""
    for metrics_file in sorted((ROOT / "bench" / "results" / "reproduce_runs").glob(f"{task}-full-seed{seed}*/metrics.json")):
        metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
        if model in metrics["test"]:
            return {"dev": metrics["dev"][model], "test": metrics["test"][model], "run": metrics_file.parent.name}
    raise SystemExit(f"no committed reproduction run of {task} seed {seed} scores {model}")


def study_spec(task: str, seed: int, work: Path, gpu: bool, extra: list[str]) -> ar.JobSpec:
    overrides = [f"seed={seed}", f"output_dir={work}", f"name={task}", *MPNET_TEACHERS, *CHECKPOINTS, *AS_REPRODUCED, *extra]
    if gpu:
        overrides += ["training.use_gpu=true", "evaluation.gpus=0.5"]
    return ar.load_spec(ROOT / TASKS[task], overrides)


def open_cell(task: str, seed: int, work: Path, data_dir: str | None, gpu: bool, extra: list[str]) -> tuple[RunContext, Gold]:
    """The run context of one (task, seed) under ``work`` and its gold splits, as that seed's `augsbert run` draws them."""
    spec = study_spec(task, seed, work, gpu, extra)
    run_dir = work / f"{task}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext.open(spec, run_dir, data_dir)
    return ctx, read_gold(ctx)


def fit_and_score(task: str, seed: int, work: Path, data_dir: str | None, gpu: bool, extra: list[str]) -> dict[str, Any]:
    """The mpnet teachers of one (task, seed), fitted (or reused) and scored on dev and test."""
    ctx, read = open_cell(task, seed, work, data_dir, gpu, extra)
    spec, gold = ctx.spec, read.splits
    models = ctx.layout.models
    # the bi-encoder first: its fit is the shorter, and its scores tell early whether mpnet beats SBERT
    train_teacher_bi_encoder(ctx, read)
    cpus = int(ray.cluster_resources()["CPU"])  # alone on the machine: every CPU
    early = ray.get(evaluate_on_ray("bi_encoder", str(models / "teacher_bi_encoder"), spec.task, gold.dev, gold.test, cpus,
                                    spec.evaluation.gpus))
    log.info("%s seed %d: bi_mpnet dev %.2f test %.2f", task, seed, early.dev, early.test)
    teacher = calibrate_teacher(ctx, train_teacher(ctx, read)[0], gold)
    jobs = {"ce_mpnet": ("cross_encoder", str(models / "cross_encoder")), "bi_mpnet": ("bi_encoder", str(models / "teacher_bi_encoder")),
            "ensemble_mpnet": ("teacher", str(models / TEACHER_FILE))}
    refs = {name: evaluate_on_ray(kind, model, spec.task, gold.dev, gold.test, spec.evaluation.cpus, spec.evaluation.gpus)
            for name, (kind, model) in jobs.items()}
    scores = {name: {"dev": result.dev, "test": result.test} for name, result in ((n, ray.get(r)) for n, r in refs.items())}
    fit_seconds = {name: record["wall_seconds"] for name, record in ctx.ledger.finished.items()}
    cell = {
        "teachers": {
            "ce_minilm": reproduction_row(task, seed, "cross_encoder"),
            "ce_mpnet": {**scores["ce_mpnet"], "fit_seconds": fit_seconds.get("cross_encoder")},
            "bi_mpnet": {**scores["bi_mpnet"], "fit_seconds": fit_seconds.get("teacher_bi_encoder")},
            "ensemble_mpnet": {**scores["ensemble_mpnet"], "members": [[m.scale, m.shift] for m in teacher.members]},
        },
        "sbert_minilm": reproduction_row(task, seed, "sbert"),
        "gold_train": gold.train.num_rows,
        # how the fits ran
        "settings": {"bf16": spec.training.bf16, "gpu": torch.cuda.get_device_name() if gpu else False, "set": extra},
    }
    return cell


def labeling_speed(gold_train: pa.Table, work: Path, seed: int) -> dict[str, dict[str, float]]:
    """Seconds and pairs/s of labeling the same BM25 candidates with each teacher: the whole engine call (Ray's
    actor start, model load and ONNX export included), and inside the actor's shard (read, tokenize, score, write).
    The teachers are made of the untrained backbones (a fresh cross-encoder head, arbitrary ensemble maps): their
    speed is a fitted teacher's, so it is measured apart from the fits, on the machine that runs this."""
    pool = SentencePool.from_pairs(gold_train)
    candidates = candidate_table("bm25", pool, np.zeros(0, dtype=np.int64), SamplingSpec(top_k=3), seed)
    candidates = candidates.slice(0, min(THROUGHPUT_PAIRS, candidates.num_rows))
    mpnet = ar.resolve_model("mpnet")
    cross_encoder, bi_encoder = TeacherMember("cross_encoder", mpnet, 4.0, 0.5), TeacherMember("bi_encoder", mpnet, 3.0, -0.5)
    teachers = {
        "ce_minilm": ar.Teacher.cross_encoder(ar.resolve_model("minilm")),
        "ce_mpnet": ar.Teacher.cross_encoder(mpnet),
        "bi_mpnet": ar.Teacher((bi_encoder,)),
        "ensemble_mpnet": ar.Teacher((cross_encoder, bi_encoder)),
    }
    speed = {}
    for name, scorer in teachers.items():
        output = work / "throughput" / name
        spec = ar.LabelingSpec(cpus_per_actor=max(1, int(ray.cluster_resources().get("CPU", 1))), shard_rows=THROUGHPUT_PAIRS)
        started = time.perf_counter()
        result = label_dataset(candidates, output, LabelJob(scorer, spec), work / "throughput" / "candidates.parquet")
        seconds = time.perf_counter() - started
        in_shards = sum(shard["seconds"] for shard in json.loads(result.manifest.read_text(encoding="utf-8"))["shards"].values())
        speed[name] = {"pairs": result.labeled, "seconds": round(seconds, 2), "pairs_per_s": round(result.labeled / seconds, 1),
                       "in_shard_pairs_per_s": round(result.labeled / in_shards, 1)}
        log.info("labeling speed %s: %s", name, speed[name])
    return speed


def best_on_dev(cells: dict[str, Any]) -> str:
    names = next(iter(cells.values()))["teachers"]
    return max(names, key=lambda name: np.mean([cell["teachers"][name]["dev"] for cell in cells.values()]))


def reproduction_settings(task: str, models: Path, choice_file: Path, results: Path = RESULTS) -> list[str]:
    """The `python -m bench.reproduce --set` words of a run with ``task``'s best-on-dev teacher (fixed in ``choice_file`` the
    first time it is asked for), on the study's gold splits, given that teacher's fitted models where ``models``
    holds them.

    Example:
        reproduction_settings("stsb_1k", Path("runs/teacher_study/stsb_1k-seed43/models"), Path("choice.json"))
    """
    choice = json.loads(choice_file.read_text(encoding="utf-8")) if choice_file.exists() else {}
    if task not in choice:
        study = json.loads(results.read_text(encoding="utf-8")).get(task)
        if study is None:
            raise SystemExit(f"{task}: no teacher study yet; run python -m bench.teacher_study --task {task} first")
        choice[task] = {"teacher": study["best_on_dev"], "chosen_on_seeds": sorted(study["cells"]),
                        "dev": {f"{name} seed {seed}": scores["dev"] for seed, cell in study["cells"].items()
                                for name, scores in cell["teachers"].items()}}
        atomic_write_text(choice_file, json.dumps(choice, indent=1) + "\n")
    teacher = choice[task]["teacher"]
    given = [f"{TEACHER_MODELS[name]}={(models / name).resolve()}" for name in TEACHER_MODEL_DIRS[teacher]
             if (models / name / "model.safetensors").is_file()]
    return [*TEACHER_SETTINGS[teacher], *AS_REPRODUCED, *given]


def merge_cells(results: dict[str, Any], files: list[Path]) -> None:
    """Adds the cells of other results files to ``results``, and their labeling speed where ``results`` has none for
    the task (what is already there is kept), and re-picks the best."""
    for file in files:
        for task, other in json.loads(file.read_text(encoding="utf-8")).items():
            entry = results.setdefault(task, {"cells": {}})
            for seed, cell in other["cells"].items():
                entry["cells"].setdefault(seed, cell)
            if "labeling_speed" in other and "labeling_speed" not in entry:
                entry["labeling_speed"], entry["labeling_host"] = other["labeling_speed"], other["labeling_host"]
            entry["best_on_dev"] = best_on_dev(entry["cells"])
            log.info("%s: cells %s from %s", task, sorted(other["cells"]), file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "teacher_study")
    parser.add_argument("--data-dir")
    parser.add_argument("--gpu", action="store_true", help="fits and evaluation on the GPU")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="job spec override (e.g. a smoke test)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--labeling-speed", action=argparse.BooleanOptionalAction, default=True,
                        help="label 2,000 BM25 candidates with each teacher once per task, for the time and pairs/s "
                             "(--no-labeling-speed: on a machine whose speed is not the one to report)")
    parser.add_argument("--merge", type=Path, nargs="+", default=[], metavar="JSON",
                        help="only merge the cells of these results files (e.g. a GPU machine's) into --results")
    args = parser.parse_args()
    ar.setup_logging()
    results = json.loads(args.results.read_text(encoding="utf-8")) if args.results.exists() else {}
    if args.merge:
        merge_cells(results, args.merge)
        atomic_write_text(args.results, json.dumps(results, indent=1))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    init_ray()
    work = args.work.resolve()
    for task in args.task:
        entry = results.setdefault(task, {"cells": {}})
        for seed in args.seeds:
            if str(seed) in entry["cells"]:
                log.info("%s seed %d: in %s already", task, seed, args.results)
                continue
            entry["cells"][str(seed)] = cell = fit_and_score(task, seed, work, args.data_dir, args.gpu, args.set)
            entry["best_on_dev"] = best_on_dev(entry["cells"])
            atomic_write_text(args.results, json.dumps(results, indent=1))
            log.info("%s seed %d: %s", task, seed, json.dumps(cell["teachers"]))
        if args.labeling_speed and "labeling_speed" not in entry:
            seed = args.seeds[0]
            gold = open_cell(task, seed, work, args.data_dir, args.gpu, args.set)[1].splits
            entry["labeling_speed"] = labeling_speed(gold.train, work / f"{task}-seed{seed}", seed)
            entry["labeling_host"] = {"cpus": ray.cluster_resources().get("CPU"), "gpus": ray.cluster_resources().get("GPU", 0)}
            atomic_write_text(args.results, json.dumps(results, indent=1))



if __name__ == "__main__":
    main()
