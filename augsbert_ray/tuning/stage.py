"""Seed optimization of one bi-encoder: a seed (and top-k) search on the silver sets the run made; the chosen
trial's model lands in models/<name>."""

from __future__ import annotations

from pathlib import Path

from augsbert_ray.config import JobSpec
from augsbert_ray.layout import RunLayout, TrainFile, bi_encoder_name, silver_files
from augsbert_ray.models import resolve_model
from augsbert_ray.tuning.search import search
from augsbert_ray.tuning.trials import Outcome, SearchSetup

SilverByK = dict[int, dict[str, Path]]  # tuning.top_k -> strategy -> silver directory


def strategy_of(spec: JobSpec, model: str) -> str | None:
    return {bi_encoder_name(strategy): strategy for strategy in spec.sampling.strategies}.get(model)


def trial_training_sets(spec: JobSpec, model: str, default_files: list[TrainFile], by_k: SilverByK) -> dict[int | None, list[TrainFile]]:
    """One training set per top_k value the model's trials span (gold + that k's silver), else the default."""
    ks = spec.tuning_top_ks(model)
    if ks == [None]:
        return {None: default_files}
    strategy = strategy_of(spec, model)
    return {k: [default_files[0], *silver_files(by_k[k][strategy])] for k in ks}


def tune_bi_encoder(spec: JobSpec, layout: RunLayout, model: str, default_files: list[TrainFile], by_k: SilverByK) -> Outcome:
    """Seed (and top-k) search for one bi-encoder; the chosen trial's model lands in models/<model>."""
    setup = SearchSetup(spec, model, resolve_model(spec.bi_encoder.model), str(layout.split("gold", "dev")), layout.ray_tune)
    return search(setup, trial_training_sets(spec, model, default_files, by_k), layout.model(model))
