"""The trials of a seed (and top-k) search: each (seed, top_k) fit, the plan of them, and the search's outcome."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from augsbert_ray.config import JobSpec
from augsbert_ray.training.ray_fit import TrainFile
from augsbert_ray.tuning.trial_loop import total_steps


@dataclass
class Trial:
    """One (seed, top_k) fit of one bi-encoder, and what it did."""

    name: str
    seed: int
    top_k: int | None
    train_files: list[TrainFile]
    total_steps: int
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, dev score)
    cull_score: float | None = None
    final_score: float | None = None
    steps: int = 0  # optimizer steps this trial actually ran, summed over phases
    status: str = "pending"  # survived | culled
    checkpoint: str | None = None  # the cull-point training state, then the final model

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data["train_files"] = [path for path, _ in self.train_files]
        data["history"] = [{"step": step, "dev": score} for step, score in self.history]
        return data


@dataclass
class SearchSetup:
    """What every trial of one tuned model shares."""

    spec: JobSpec
    model_name: str
    base_model: str
    dev_file: str
    storage: Path

    @property
    def tuning(self) -> Any:
        assert self.spec.tuning is not None
        return self.spec.tuning


def training_rows(files: list[TrainFile]) -> int:
    """Rows a fit trains on: all gold rows, and the silver rows that selection accepted (if it marked any)."""
    rows = 0
    for path, _ in files:
        if "accepted" in pq.read_schema(path).names:
            rows += int(pc.sum(pq.read_table(path, columns=["accepted"]).column("accepted")).as_py() or 0)
        else:
            rows += pq.ParquetFile(path).metadata.num_rows
    return rows


def plan_trials(setup: SearchSetup, train_sets: dict[int | None, list[TrainFile]]) -> list[Trial]:
    """Seeds x top_k values; the training files of each k are made once and shared by its seeds."""
    trials = []
    for k, files in train_sets.items():
        rows = training_rows(files)
        steps = total_steps(rows, setup.spec.bi_encoder.batch_size, setup.spec.bi_encoder.epochs)
        for seed in setup.tuning.seed_list(setup.spec.seed):
            name = f"{setup.model_name}-{'' if k is None else f'k{k}-'}s{seed}"
            trials.append(Trial(name=name, seed=seed, top_k=k, train_files=files, total_steps=steps))
    return trials


@dataclass
class Outcome:
    """The search for one tuned model."""

    model_name: str
    scheduler: str
    cull_at: float
    keep: int
    trials: list[Trial]
    chosen: str
    wall_seconds: float

    @property
    def steps_spent(self) -> int:
        return sum(trial.steps for trial in self.trials)

    @property
    def steps_full(self) -> int:
        """Steps of training every trial to the end."""
        return sum(trial.total_steps for trial in self.trials)

    def state(self) -> dict[str, Any]:
        """Every field, JSON-ready: what a resumed run restores with ``from_state``."""
        return asdict(self)

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> "Outcome":
        trials = [
            Trial(**{**trial, "train_files": [tuple(f) for f in trial["train_files"]], "history": [tuple(h) for h in trial["history"]]})
            for trial in data["trials"]
        ]
        return cls(**{**data, "trials": trials})

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "scheduler": self.scheduler,
            "cull_at": self.cull_at,
            "keep": self.keep,
            "chosen": self.chosen,
            "steps_spent": self.steps_spent,
            "steps_full": self.steps_full,
            "steps_one_fit": max(trial.total_steps for trial in self.trials),
            "wall_seconds": self.wall_seconds,
            "trials": [trial.summary() for trial in self.trials],
        }
