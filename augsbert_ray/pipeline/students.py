"""The student steps: a bi-encoder fitted on its training files by a fit strategy, a plain fit or a seed (and
top-k) search whose chosen trial lands in models/<name>."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from augsbert_ray.layout import TrainFile
from augsbert_ray.models import resolve_model
from augsbert_ray.pipeline.context import FitRecord, Fitted, RunContext
from augsbert_ray.training import fit_bi_encoder
from augsbert_ray.tuning import SilverByK, training_rows, tune_bi_encoder


class FitStrategy(Protocol):
    """How a step fits a bi-encoder on its training files into models/<name>."""

    def fit(self, ctx: RunContext, name: str, files: list[TrainFile]) -> Fitted: ...


@dataclass(frozen=True)
class PlainFit:
    """One fit with the spec's seed."""

    def fit(self, ctx: RunContext, name: str, files: list[TrainFile]) -> Fitted:
        spec = ctx.spec
        metrics = fit_bi_encoder(spec.bi_encoder, resolve_model(spec.bi_encoder.model), files, spec.training, spec.seed,
                                 ctx.layout.ray_train, name, ctx.layout.model(name))
        return Fitted.from_metrics(int(metrics["train_rows"]), metrics)  # rows after selection's `accepted` filter


@dataclass(frozen=True)
class SeedSearch:
    """Seed optimization (and a top-k search over ``silver_by_k``'s silver sets) on Ray Tune; the chosen trial's
    model lands in models/<name>."""

    silver_by_k: SilverByK = field(default_factory=dict)

    def fit(self, ctx: RunContext, name: str, files: list[TrainFile]) -> Fitted:
        outcome = tune_bi_encoder(ctx.spec, ctx.layout, name, files, self.silver_by_k)
        chosen = next(trial for trial in outcome.trials if trial.name == outcome.chosen)
        return Fitted(training_rows(chosen.train_files), tuning=outcome.state())


def fit_strategy(ctx: RunContext, name: str, silver_by_k: SilverByK | None = None) -> FitStrategy:
    """The fit a bi-encoder gets: a search when the spec tunes it (tuning.models), else a plain fit."""
    return SeedSearch(silver_by_k or {}) if name in ctx.spec.tuned_models() else PlainFit()


def train_bi_encoder(ctx: RunContext, name: str, files: list[TrainFile], strategy: FitStrategy) -> FitRecord:
    """models/<name> fitted on ``files`` by ``strategy``, or reused from an earlier attempt at this run."""
    return ctx.fit_once(name, lambda: strategy.fit(ctx, name, files))
