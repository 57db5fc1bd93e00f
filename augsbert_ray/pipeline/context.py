"""What the steps of one run share: its spec, its directory, where its data lives and the ledger of its finished
fits (progress.json), whose records are typed ``FitRecord`` values."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from augsbert_ray.config import JobSpec
from augsbert_ray.files import atomic_write_text
from augsbert_ray.layout import RunLayout
from augsbert_ray.runtime import log
from augsbert_ray.tuning.trials import Outcome


@dataclass(frozen=True)
class Fitted:
    """What a fit reports: the pairs it learned from, its search (a seed search's state), and, where Ray Train only
    reported again the final model of an earlier attempt, that attempt's training seconds."""

    trained_on: int | None
    tuning: dict[str, Any] | None = None
    earlier_seconds: float | None = None

    @classmethod
    def from_metrics(cls, trained_on: int, metrics: dict[str, Any]) -> Fitted:
        """From a Ray Train fit's final metrics ("reused": the final model of an earlier attempt)."""
        return cls(trained_on, earlier_seconds=float(metrics.get("train_seconds", 0.0)) if metrics.get("reused") else None)


@dataclass(frozen=True)
class FitRecord:
    """A model the run fitted (or reused, or copied): where it is, the pairs it learned from, how long it took and,
    for a seed search, its outcome. progress.json holds one per finished fit.

    Example:
        >>> record = FitRecord("sbert", Path("runs/r/models/sbert"), trained_on=1000, wall_seconds=12.5)
        >>> record.to_json()
        {'trained_on': 1000, 'wall_seconds': 12.5}
    """

    name: str
    model_dir: Path
    trained_on: int | None
    wall_seconds: float = 0.0
    tuning: Outcome | None = None
    reused: bool = False

    def to_json(self) -> dict[str, Any]:
        """The record as progress.json keeps it."""
        tuning = {"tuning": self.tuning.state()} if self.tuning is not None else {}
        return {"trained_on": self.trained_on, **tuning, "wall_seconds": self.wall_seconds}

    @classmethod
    def from_json(cls, name: str, model_dir: Path, data: dict[str, Any], reused: bool = False) -> FitRecord:
        tuning = Outcome.from_state(data["tuning"]) if "tuning" in data else None
        return cls(name, model_dir, data.get("trained_on"), float(data.get("wall_seconds", 0.0)), tuning, reused)


@dataclass
class FitLedger:
    """The fits a run has finished (progress.json), so that a resumed run reuses them instead of fitting again."""

    layout: RunLayout
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)  # model name -> record, as in progress.json
    reused: dict[str, float] = field(default_factory=dict)  # fits an earlier attempt made -> the seconds they took then

    @classmethod
    def read(cls, layout: RunLayout) -> FitLedger:
        finished = json.loads(layout.progress.read_text(encoding="utf-8")) if layout.progress.exists() else {}
        return cls(layout, finished)

    def write(self) -> None:
        atomic_write_text(self.layout.progress, json.dumps(self.finished, indent=1))

    def fit_once(self, name: str, keep_training_state: bool, fit: Callable[[], Fitted]) -> FitRecord:
        """Fit models/<name>, or reuse it when an earlier attempt at this run finished it."""
        model_dir = self.layout.model(name)
        if name in self.finished and model_dir.is_dir():
            record = FitRecord.from_json(name, model_dir, self.finished[name], reused=True)
            log.info("resume: reusing models/%s, fitted by an earlier attempt in %.0fs", name, record.wall_seconds)
            self.reused[name] = record.wall_seconds
            return record
        remove_unfinished_fit(self.layout, name, keep_training_state)
        started = time.perf_counter()
        fitted = fit()
        seconds = time.perf_counter() - started
        if fitted.earlier_seconds is not None:  # Ray Train kept the final model of an attempt stopped before recording it
            seconds = fitted.earlier_seconds
            log.info("resume: %s had finished in an earlier attempt (%.0fs of training); its model is reused", name, seconds)
            self.reused[name] = seconds
        tuning = Outcome.from_state(fitted.tuning) if fitted.tuning is not None else None
        record = FitRecord(name, model_dir, fitted.trained_on, round(seconds, 2), tuning)
        self.finished[name] = record.to_json()
        self.write()
        return record


def remove_unfinished_fit(layout: RunLayout, name: str, keep_training_state: bool) -> None:
    """Clear what an unfinished fit left. Ray Train restores the earlier attempt's checkpoints, found by run
    name: kept when ``keep_training_state`` (training.checkpoint_every), so the fit goes on from its last
    training state, else removed so that it starts over. A search always starts over: Ray Tune would mix its
    trials with the earlier ones."""
    tune_dir = layout.ray_tune
    leftovers = [layout.model(name), *tune_dir.glob(f"{name}-*"), *(tune_dir / "ray_train").glob(f"{name}-*"),
                 *(tune_dir / "stop").glob(f"{name}-*"), *([] if keep_training_state else [layout.ray_train / name])]
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


@dataclass(frozen=True)
class RunContext:
    """What every step of one run shares: its spec, its directory, the directory of the named datasets and the
    record of its finished fits."""

    spec: JobSpec
    layout: RunLayout
    ledger: FitLedger
    data_dir: str | Path | None = None

    @classmethod
    def open(cls, spec: JobSpec, run_dir: Path, data_dir: str | Path | None = None) -> RunContext:
        """The context of a run directory, with the fits its progress.json records."""
        layout = RunLayout(run_dir)
        return cls(spec, layout, FitLedger.read(layout), data_dir)

    def fit_once(self, name: str, fit: Callable[[], Fitted]) -> FitRecord:
        return self.ledger.fit_once(name, self.spec.training.checkpoint_every is not None, fit)
