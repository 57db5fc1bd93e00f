"""A finished run as a typed value, ``RunResult``, and the one place its files are written from it: metrics.json
(``augsbert run``), tuning.json and tuning.md (after a search), report.md and the score-density plot."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from augsbert_ray.config import JobSpec
from augsbert_ray.evaluation import Evaluation
from augsbert_ray.files import atomic_write_text
from augsbert_ray.layout import METRICS_FILE, REPORT_FILE
from augsbert_ray.pipeline.context import FitRecord
from augsbert_ray.report import plot_score_densities, write_report
from augsbert_ray.runtime import log
from augsbert_ray.tuning.report import write_tuning_report

TUNING_FILE = "tuning.json"


def metric_name(task: str) -> str:
    """metrics.json's ``metric``: Spearman x100 for regression, F1 x100 for classification."""
    return "spearman_x100" if task == "regression" else "f1_x100"


@dataclass(frozen=True)
class RunResult:
    """What a run made: its directory, each model's scores, its fits, its counts and its timings.

    Attributes:
        run_dir: The run directory (spec.yaml, models/, silver/, metrics.json, report.md).
        task: ``regression`` or ``classification``.
        evaluations: Each model's (and baseline's) dev and test score, by name (``sbert``, ``augsbert_bm25``, ...).
        fits: Each model the run fitted, reused or copied, by name.
        counts: Pairs read, rejected, sampled, labeled and kept (metrics.json ``counts``).
        wall_seconds: Seconds per step, and ``total``.
        teacher_gate: The teacher gate's record (metrics.json ``teacher``), when the run labeled silver.
        sampling: Each strategy's silver diagnostics.
        tuned: Whether this is an ``augsbert tune`` run (tuning.json, no metrics.json).

    Example:
        >>> from augsbert_ray.evaluation import Evaluation
        >>> result = RunResult(Path("runs/r"), "regression", {"sbert": Evaluation(dev=80.1, test=77.5)})
        >>> result.metric, result.test["sbert"], result.model("sbert")
        ('spearman_x100', 77.5, PosixPath('runs/r/models/sbert'))
    """

    run_dir: Path
    task: str
    evaluations: dict[str, Evaluation]
    fits: dict[str, FitRecord] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    wall_seconds: dict[str, float] = field(default_factory=dict)
    teacher_gate: dict[str, Any] | None = None
    sampling: dict[str, dict[str, float | int]] = field(default_factory=dict)
    reused_fits: dict[str, float] = field(default_factory=dict)
    tuned: bool = False

    @property
    def metric(self) -> str:
        return metric_name(self.task)

    @property
    def dev(self) -> dict[str, float]:
        return {name: result.dev for name, result in self.evaluations.items()}

    @property
    def test(self) -> dict[str, float]:
        return {name: result.test for name, result in self.evaluations.items()}

    @property
    def report(self) -> Path:
        """report.md, or for a tuning run tuning.md."""
        return self.run_dir / ("tuning.md" if self.tuned else REPORT_FILE)

    def model(self, name: str) -> Path:
        """A fitted model's sentence-transformers directory, e.g. ``result.model("augsbert_bm25")``."""
        return self.run_dir / "models" / name

    def metrics(self) -> dict[str, Any]:
        """metrics.json, as ``augsbert run`` writes it."""
        return {
            "task": self.task,
            "metric": self.metric,
            "dev": self.dev,
            "test": self.test,
            "details": {name: result.to_dict() for name, result in self.evaluations.items()},
            "sampling": self.sampling,
            "counts": self.counts,
            "wall_seconds": self.wall_seconds,
            "reused_fits": self.reused_fits,
            "teacher": self.teacher_gate,
        }

    def searched(self) -> dict[str, Any]:
        return {name: fit.tuning for name, fit in self.fits.items() if fit.tuning is not None}


def write_outputs(result: RunResult, spec: JobSpec, reference_labels: np.ndarray | None = None,
                  histograms: dict[str, np.ndarray] | None = None) -> RunResult:
    """The run's files from its result. An ``augsbert run`` writes the score-density plot, report.md, after a
    search tuning.md/tuning.json, and last metrics.json, which marks the run finished (``--resume`` refuses it); a
    tuning run writes tuning.md and last tuning.json. A run stopped before that resumes and writes them all again."""
    root, searched = result.run_dir, result.searched()
    if result.tuned:
        gate = {"teacher": result.teacher_gate} if result.teacher_gate is not None else {}
        extra = {**gate, "counts": result.counts, "wall_seconds": result.wall_seconds, "reused_fits": result.reused_fits}
        write_tuning_report(root, spec.name, searched, {name: result.test[name] for name in searched}, result.metric, extra)
        log.info("done: %s", result.report)
        return result
    metrics = result.metrics()
    plot_score_densities(reference_labels if reference_labels is not None else np.array([]), histograms or {},
                         root / "score_density.png")
    write_report(spec, metrics, root / REPORT_FILE)
    if searched:
        write_tuning_report(root, spec.name, searched, {name: result.test[name] for name in searched}, result.metric)
    atomic_write_text(root / METRICS_FILE, json.dumps(metrics, indent=2))
    log.info("done: %s", result.report)
    return result
