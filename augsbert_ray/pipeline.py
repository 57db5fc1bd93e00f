"""The in-domain AugSBERT job, built from the stages: gold -> cross-encoder -> candidates -> silver
-> bi-encoders -> evaluation -> report."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import ray
import ray.data

from augsbert_ray.config import JobSpec, bi_encoder_name, dump_spec
from augsbert_ray.data import GoldData, check_reject_fraction, load_gold, write_rejects
from augsbert_ray.evaluation import Evaluation, evaluate_on_ray
from augsbert_ray.labeling import LabelJob, label_table
from augsbert_ray.models import model_fingerprint, resolve_model
from augsbert_ray.report import plot_score_densities, write_report
from augsbert_ray.runtime import init_ray, log
from augsbert_ray.sampling import SentencePool, available_pairs, candidate_table
from augsbert_ray.selection import score_histogram, select, silver_diagnostics
from augsbert_ray.training import fit_bi_encoder, fit_cross_encoder
from augsbert_ray.tuning.report import write_tuning_report
from augsbert_ray.tuning.stage import chosen_rows, silver_by_top_k, tune_bi_encoder


@dataclass
class RunState:
    """What a run has measured so far; becomes metrics.json."""

    run_dir: Path
    counts: dict[str, Any] = field(default_factory=dict)
    wall_seconds: dict[str, float] = field(default_factory=dict)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    sampling: dict[str, dict[str, float | int]] = field(default_factory=dict)
    tuning: dict[str, Any] = field(default_factory=dict)  # model name -> tuning.search.Outcome
    tuning_silver: dict[int, dict[str, Path]] = field(default_factory=dict)  # tuning.top_k -> strategy -> silver dir
    stage_number: int = 0

    @contextmanager
    def stage(self, name: str, total: int) -> Iterator[None]:
        self.stage_number += 1
        log.info("[stage %d/%d] %s ...", self.stage_number, total, name)
        start = time.perf_counter()
        yield
        self.wall_seconds[name] = round(time.perf_counter() - start, 2)
        log.info("[stage %d/%d] %s done in %.1fs", self.stage_number, total, name, self.wall_seconds[name])

    def metrics(self, spec: JobSpec) -> dict[str, Any]:
        return {
            "task": spec.task,
            "metric": "spearman_x100" if spec.task == "regression" else "f1_x100",
            "dev": {name: result.dev for name, result in self.evaluations.items()},
            "test": {name: result.test for name, result in self.evaluations.items()},
            "details": {name: result.to_dict() for name, result in self.evaluations.items()},
            "sampling": self.sampling,
            "counts": self.counts,
            "wall_seconds": self.wall_seconds,
        }


def new_run_dir(spec: JobSpec) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = (spec.output_dir / f"{spec.name}-{stamp}").resolve()
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = (spec.output_dir / f"{spec.name}-{stamp}-{suffix}").resolve()
    run_dir.mkdir(parents=True)
    return run_dir


def read_gold(spec: JobSpec, state: RunState, data_dir: str | Path | None) -> GoldData:
    gold = load_gold(spec.data, spec.seed, data_dir)
    rejects_path = state.run_dir / "rejects.jsonl"
    write_rejects(gold.rejects, rejects_path)
    state.counts.update(
        rows_read=gold.rows_read,
        rejected=len(gold.rejects),
        accepted=gold.rows_read - len(gold.rejects),
        gold_train_before_limit=gold.train_before_limit,
        gold_train=gold.train.num_rows,
        gold_dev=gold.dev.num_rows,
        gold_test=gold.test.num_rows,
    )
    check_reject_fraction(gold.rows_read, gold.rejects, spec.data.max_reject_fraction, rejects_path)
    gold_dir = state.run_dir / "gold"
    gold_dir.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        pq.write_table(gold.split(split), gold_dir / f"{split}.parquet")
    return gold


# BM25 runs first: random sampling and the KDE pool are sized from its candidate count.
STRATEGY_ORDER = ("bm25", "random", "kde", "semantic", "bm25+semantic")


def random_budget(spec: JobSpec, pool: SentencePool, excluded, bm25_count: int | None) -> int:
    """Random pairs: as requested, else as many as BM25 made, else top_k per sentence (capped by the pool)."""
    if spec.sampling.random_pairs is not None:
        return spec.sampling.random_pairs
    return min(bm25_count or spec.sampling.top_k * len(pool), available_pairs(pool, excluded))


def make_silver(
    spec: JobSpec, state: RunState, gold: GoldData, cross_encoder_dir: Path, sbert_dir: Path
) -> tuple[dict[str, Path], dict[str, np.ndarray]]:
    """Per strategy: sample candidates, label them on the actor pool into silver/<strategy>/ (streaming),
    select (KDE), and measure the kept score distribution. Returns silver dirs and kept-score histograms."""
    pool = SentencePool.from_pairs(gold.train)
    excluded = pool.gold_codes([gold.train, gold.dev, gold.test])
    labeler = model_fingerprint(str(cross_encoder_dir))
    semantic_model = str(sbert_dir) if spec.sampling.semantic_model == "gold" else resolve_model(spec.sampling.semantic_model)
    gold_labels = gold.train.column("label").to_numpy().astype(np.float64)
    state.counts.update(sentences=len(pool), candidates={}, labeled={}, kept={})
    state.sampling = {}
    silver_dirs: dict[str, Path] = {}
    histograms: dict[str, np.ndarray] = {}
    bm25_count: int | None = None
    for strategy in sorted(spec.sampling.strategies, key=STRATEGY_ORDER.index):
        n_random = random_budget(spec, pool, excluded, bm25_count)
        if strategy == "kde":
            n_random = spec.sampling.kde_pool or min(10 * n_random, available_pairs(pool, excluded))
        candidates = candidate_table(
            strategy, pool, excluded, spec.sampling, spec.seed,
            n_random=n_random, semantic_model=semantic_model, resources=spec.labeling,
        )
        count = candidates.num_rows
        bm25_count = count if strategy == "bm25" else bm25_count
        labeled_dir = state.run_dir / "silver" / (f"{strategy}_pool" if strategy == "kde" else strategy)
        log.info("labeling %d %s candidates with %s", count, strategy, labeler)
        job = LabelJob(str(cross_encoder_dir), labeler, spec.labeling, strategy=strategy)
        labeled = label_table(candidates, state.run_dir / "candidates" / f"{strategy}.parquet", labeled_dir, job)
        state.counts["candidates"][strategy] = count
        state.counts["labeled"][strategy] = labeled.labeled
        silver_dir = labeled_dir
        kept = ray.data.read_parquet(str(labeled_dir))
        if strategy == "kde":
            silver_dir = state.run_dir / "silver" / strategy
            selected, _ = select(kept, gold_labels, spec.task, spec.seed, spec.sampling.kde_mode, spec.sampling.kde_bins)
            selected.write_parquet(str(silver_dir))
            kept = ray.data.read_parquet(str(silver_dir)).filter(expr="accepted")
        histograms[strategy] = score_histogram(kept, spec.sampling.kde_bins)
        state.sampling[strategy] = silver_diagnostics(gold_labels, count, histograms[strategy])
        state.counts["kept"][strategy] = state.sampling[strategy]["kept"]
        silver_dirs[strategy] = silver_dir
    return silver_dirs, histograms


def train_bi_encoder(spec: JobSpec, state: RunState, name: str, files: list[tuple[str, str]]) -> None:
    if name in spec.tuned_models():  # seed (and top_k) search; the chosen trial lands in models/<name>
        state.tuning[name] = tune_bi_encoder(spec, state.run_dir, name, files, state.tuning_silver)
        state.counts["trained_on"][name] = chosen_rows(state.tuning[name])
        return
    metrics = fit_bi_encoder(
        spec.bi_encoder, resolve_model(spec.bi_encoder.model), files, spec.training, spec.seed,
        state.run_dir / "ray_train", name, state.run_dir / "models" / name,
    )
    state.counts["trained_on"][name] = int(metrics["train_rows"])  # after selection's `accepted` filter


def run_in_domain(spec: JobSpec, data_dir: str | Path | None = None, run_dir: Path | None = None) -> Path:
    """Run the whole in-domain method and return the run directory."""
    state = RunState(run_dir or new_run_dir(spec))
    (state.run_dir / "spec.yaml").write_text(dump_spec(spec), encoding="utf-8")
    log.info("run directory: %s", state.run_dir)
    init_ray(spec.ray.address, spec.ray.num_cpus)
    total_stages = 7
    models_dir = state.run_dir / "models"
    started = time.perf_counter()

    with state.stage("read gold data", total_stages):
        gold = read_gold(spec, state, data_dir)
    gold_file = (str(state.run_dir / "gold" / "train.parquet"), "label")
    state.counts["trained_on"] = {"cross_encoder": gold.train.num_rows * (2 if spec.cross_encoder.both_orders else 1)}

    with state.stage("train cross-encoder", total_stages):
        cross_encoder_dir = models_dir / "cross_encoder"
        fit_cross_encoder(
            spec.cross_encoder, resolve_model(spec.cross_encoder.model), spec.task, [gold_file],
            spec.training, spec.seed, state.run_dir / "ray_train", cross_encoder_dir,
        )

    with state.stage("train SBERT on gold", total_stages):
        # before sampling: semantic search embeds with the gold-trained bi-encoder, as in the paper
        training_sets = {"sbert": [gold_file]}
        train_bi_encoder(spec, state, "sbert", training_sets["sbert"])

    with state.stage("sample and label candidates", total_stages):
        silver_dirs, histograms = make_silver(spec, state, gold, cross_encoder_dir, models_dir / "sbert")
        state.tuning_silver = silver_by_top_k(spec, state, gold, cross_encoder_dir, models_dir / "sbert", silver_dirs)

    with state.stage("train AugSBERT bi-encoders", total_stages):
        for strategy, silver_dir in silver_dirs.items():
            silver_files = [(str(path), "score") for path in sorted(silver_dir.glob("*.parquet"))]
            name = bi_encoder_name(strategy)
            training_sets[name] = [gold_file, *silver_files]
            train_bi_encoder(spec, state, name, training_sets[name])

    with state.stage("evaluate", total_stages):
        jobs = {"cross_encoder": ("cross_encoder", str(cross_encoder_dir))}
        jobs.update({name: ("bi_encoder", str(models_dir / name)) for name in training_sets})
        jobs["zero_shot"] = ("bi_encoder", resolve_model(spec.evaluation.zero_shot_model))
        jobs["jaccard"] = ("jaccard", None)
        refs = {
            name: evaluate_on_ray(kind, model, spec.task, gold.dev, gold.test, spec.evaluation.cpus, spec.evaluation.gpus)
            for name, (kind, model) in jobs.items()
        }
        state.evaluations = {name: ray.get(ref) for name, ref in refs.items()}

    with state.stage("report", total_stages):
        state.wall_seconds["total"] = round(time.perf_counter() - started, 2)
        metrics = state.metrics(spec)
        plot_score_densities(gold.train.column("label").to_numpy(), histograms, state.run_dir / "score_density.png")
        (state.run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
        write_report(spec, metrics, state.run_dir / "report.md")
        if state.tuning:
            tests = {name: state.evaluations[name].test for name in state.tuning}
            write_tuning_report(state.run_dir, spec.name, state.tuning, tests, metrics["metric"])
    log.info("done: %s", state.run_dir / "report.md")
    return state.run_dir
