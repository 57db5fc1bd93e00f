"""The tuning stage: silver per top_k (made once, shared by all seeds), one search per tuned bi-encoder,
and ``augsbert tune``, which runs the stage on its own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from augsbert_ray.config import TOP_K_STRATEGIES, JobSpec, SpecError, bi_encoder_name
from augsbert_ray.models import resolve_model
from augsbert_ray.runtime import log
from augsbert_ray.training.ray_fit import TrainFile
from augsbert_ray.tuning.report import write_tuning_report
from augsbert_ray.tuning.search import Outcome, SearchSetup, search, training_rows

if TYPE_CHECKING:
    from augsbert_ray.data import GoldData
    from augsbert_ray.labeling import Teacher
    from augsbert_ray.pipeline import RunState

SilverByK = dict[int, dict[str, Path]]


def strategy_of(spec: JobSpec, model: str) -> str | None:
    return {bi_encoder_name(strategy): strategy for strategy in spec.sampling.strategies}.get(model)


def silver_files(directory: Path) -> list[TrainFile]:
    return [(str(path), "score") for path in sorted(directory.glob("*.parquet"))]


def with_sampling(spec: JobSpec, **changes: Any) -> JobSpec:
    return spec.model_copy(update={"sampling": spec.sampling.model_copy(update=changes)})


def silver_by_top_k(
    spec: JobSpec, state: RunState, gold: GoldData, teacher: Teacher, sbert_dir: Path, made: dict[str, Path]
) -> SilverByK:
    """Candidates and silver labels for each tuning.top_k value, made once here and shared by every seed's
    trial. The spec's own sampling.top_k reuses the silver already in ``made``."""
    from augsbert_ray.pipeline import CandidateSource, RunState, make_silver

    strategies = [s for s in spec.sampling.strategies if s in TOP_K_STRATEGIES and bi_encoder_name(s) in spec.tuned_models()]
    if spec.tuning is None or not spec.tuning.top_k or not strategies:
        return {}
    by_k: SilverByK = {}
    for k in spec.tuning.top_k:
        if k == spec.sampling.top_k and all(strategy in made for strategy in strategies):
            by_k[k] = {strategy: made[strategy] for strategy in strategies}
            continue
        k_state = RunState(state.run_dir / "tuning_silver" / f"top_k{k}")
        k_state.run_dir.mkdir(parents=True, exist_ok=True)
        log.info("tuning: silver for top_k=%d (%s)", k, ", ".join(strategies))
        by_k[k], _ = make_silver(
            with_sampling(spec, top_k=k, strategies=strategies), k_state, CandidateSource.in_domain(gold), teacher, sbert_dir
        )
        state.counts.setdefault("tuning_silver", {})[f"top_k={k}"] = {key: k_state.counts.get(key) for key in ("candidates", "labeled")}
    return by_k


def trial_training_sets(spec: JobSpec, model: str, default_files: list[TrainFile], by_k: SilverByK) -> dict[int | None, list[TrainFile]]:
    """One training set per top_k value the model's trials span (gold + that k's silver), else the default."""
    ks = spec.tuning_top_ks(model)
    if ks == [None]:
        return {None: default_files}
    strategy = strategy_of(spec, model)
    return {k: [default_files[0], *silver_files(by_k[k][strategy])] for k in ks}


def tune_bi_encoder(spec: JobSpec, run_dir: Path, model: str, default_files: list[TrainFile], by_k: SilverByK) -> Outcome:
    """Seed (and top-k) search for one bi-encoder; the chosen trial's model lands in models/<model>."""
    setup = SearchSetup(spec, model, resolve_model(spec.bi_encoder.model), str(run_dir / "gold" / "dev.parquet"), run_dir / "ray_tune")
    return search(setup, trial_training_sets(spec, model, default_files, by_k), run_dir / "models" / model)


def chosen_rows(outcome: Outcome) -> int:
    chosen = next(trial for trial in outcome.trials if trial.name == outcome.chosen)
    return training_rows(chosen.train_files)


def run_tuning_job(spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False) -> Path:
    """`augsbert tune`: gold -> (cross-encoder and silver, if a tuned model needs them) -> the searches ->
    test scores of the chosen models -> tuning.md / tuning.json. With ``resume``, continues that unfinished
    run as `augsbert run --resume` does: finished fits and searches are reused, an unfinished search starts over."""
    from augsbert_ray.evaluation import evaluate_on_ray
    from augsbert_ray.pipeline import (
        CandidateSource, calibrate_teacher, make_silver, read_gold, start_run, train_bi_encoder, train_teacher,
    )

    if spec.tuning is None:
        raise SpecError("augsbert tune needs a 'tuning' section in the job spec (e.g. tuning: {seeds: 5})")
    tuned = spec.tuned_models()
    strategies = [strategy_of(spec, model) for model in tuned if model != "sbert"]
    # semantic search embeds with the gold-trained SBERT, as in `augsbert run`
    needs_sbert = "sbert" in tuned or (spec.sampling.semantic_model == "gold" and any("semantic" in s for s in strategies))
    state = start_run(spec, resume, data_dir, force_resume)
    stages = 2 + needs_sbert + 3 * bool(strategies)
    started = time.perf_counter()
    models_dir = state.run_dir / "models"

    with state.stage("read gold data", stages):
        gold = read_gold(spec, state, data_dir)
    gold_file = (str(state.run_dir / "gold" / "train.parquet"), "label")
    state.counts["trained_on"] = {}
    if strategies:
        with state.stage(f"train the {spec.teacher.kind} teacher", stages):
            teacher = calibrate_teacher(spec, state, train_teacher(spec, state, gold, gold_file), gold)
    if needs_sbert:
        with state.stage("tune SBERT" if "sbert" in tuned else "train SBERT on gold", stages):
            train_bi_encoder(spec, state, "sbert", [gold_file])

    made: dict[str, Path] = {}
    if strategies:
        with state.stage("sample and label candidates", stages):
            plain = [s for s in strategies if spec.tuning_top_ks(bi_encoder_name(s)) == [None]]
            if plain:
                made, _ = make_silver(
                    with_sampling(spec, strategies=plain), state, CandidateSource.in_domain(gold), teacher, models_dir / "sbert"
                )
            state.tuning_silver = silver_by_top_k(spec, state, gold, teacher, models_dir / "sbert", made)
        with state.stage("tune AugSBERT bi-encoders", stages):
            for strategy in strategies:
                default = [gold_file, *silver_files(made[strategy])] if strategy in made else [gold_file]
                train_bi_encoder(spec, state, bi_encoder_name(strategy), default)

    with state.stage("evaluate and report", stages):
        refs = {name: evaluate_on_ray("bi_encoder", str(models_dir / name), spec.task, gold.dev, gold.test,
                                      spec.evaluation.cpus, spec.evaluation.gpus) for name in state.tuning}
        tests = {name: ray.get(ref).test for name, ref in refs.items()}
        metric = "spearman_x100" if spec.task == "regression" else "f1_x100"
        state.wall_seconds["total"] = round(time.perf_counter() - started, 2)
        extra = {"counts": state.counts, "wall_seconds": state.wall_seconds, "reused_fits": state.reused}
        write_tuning_report(state.run_dir, spec.name, state.tuning, tests, metric, extra)
    log.info("done: %s", state.run_dir / "tuning.md")
    return state.run_dir
