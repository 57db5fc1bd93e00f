"""The tuning stage: one seed (and top-k) search per tuned bi-encoder, on the silver sets the job made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from augsbert_ray.config import JobSpec, bi_encoder_name
from augsbert_ray.models import resolve_model
from augsbert_ray.training.ray_fit import TrainFile
from augsbert_ray.tuning.search import Outcome, SearchSetup, search, training_rows

SilverByK = dict[int, dict[str, Path]]


def strategy_of(spec: JobSpec, model: str) -> str | None:
    return {bi_encoder_name(strategy): strategy for strategy in spec.sampling.strategies}.get(model)


def silver_files(directory: Path) -> list[TrainFile]:
    return [(str(path), "score") for path in sorted(directory.glob("*.parquet"))]


def with_sampling(spec: JobSpec, **changes: Any) -> JobSpec:
    return spec.model_copy(update={"sampling": spec.sampling.model_copy(update=changes)})


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
