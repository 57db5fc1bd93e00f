"""The last step of ``scenario: retrieval``: its ``RunResult`` (``RetrievalRunResult``: nDCG@10 as each row's dev
and test score, and every metric per split), metrics.json and report.md."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from augsbert_ray.evaluation import Evaluation
from augsbert_ray.evaluation.retrieval import RetrievalEvaluation
from augsbert_ray.files import atomic_write_text
from augsbert_ray.layout import METRICS_FILE, REPORT_FILE
from augsbert_ray.pipeline.context import FitRecord, RunContext
from augsbert_ray.pipeline.result import RunResult
from augsbert_ray.pipeline.retrieval import RetrievalSilver, fits_summary
from augsbert_ray.pipeline.retrieval_data import RetrievalData
from augsbert_ray.runtime import log

ROW_TITLES = {
    "bm25": "BM25", "zero_shot": "Zero-shot bi-encoder", "sbert": "SBERT (gold only, MNRL + hard negatives)",
    "augsbert_margin_mse": "AugSBERT student (MarginMSE)", "augsbert_kl": "AugSBERT student (listwise KL)",
    "teacher_rerank": "Teacher re-ranking BM25", "knrm": "KNRM re-ranking BM25", "aggregation": "Linear aggregation (fit on dev)",
    "rrf": "Reciprocal rank fusion",
}
METRICS = ("ndcg@10", "mrr@10", "map@100", "recall@100")


@dataclass(frozen=True)
class RetrievalRunResult(RunResult):
    """A retrieval run's result: ``dev``/``test`` give each row's nDCG@10, ``retrieval`` every metric.

    Example:
        ::

            result = ar.run("jobs/arguana_premise.yaml")
            result.test["augsbert_margin_mse"] - result.test["zero_shot"]   # nDCG@10 points
            result.retrieval.metrics["test"]["bm25"]["recall@100"]
    """

    retrieval: RetrievalEvaluation = field(default_factory=lambda: RetrievalEvaluation({"dev": {}, "test": {}}))
    about: dict[str, Any] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return "ndcg@10"

    def metrics(self) -> dict[str, Any]:
        """metrics.json of a retrieval run: per split, per row, the four metrics (and the queries they average over)."""
        return {
            "scenario": "retrieval", **self.about, "metric": self.metric,
            "dev": self.retrieval.metrics["dev"], "test": self.retrieval.metrics["test"],
            "aggregation": self.retrieval.aggregation, "counts": self.counts, "wall_seconds": self.wall_seconds,
            "reused_fits": self.reused_fits,
        }


def report_lines(name: str, metrics: dict[str, Any]) -> list[str]:
    counts = metrics["counts"]
    queries, corpus = counts["queries"], counts["corpus"]
    lines = [
        f"# AugSBERT run: {name}", "",
        f"Scenario: retrieval ({metrics['source']}{', task ' + metrics['task'] if metrics.get('task') else ''}); "
        f"{counts['gold']['queries']} gold queries, {counts['unlabeled']['queries']} unlabeled with {counts['labeled']} "
        f"teacher-labeled pairs; dev {queries['dev']} / test {queries['test']} queries over {corpus['dev']} / {corpus['test']} "
        "documents; metric: nDCG@10 (x100).", "",
        "| ranker | dev nDCG@10 | test nDCG@10 | test MRR@10 | test MAP@100 | test Recall@100 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row, test in metrics["test"].items():
        cells = " | ".join(f"{test[m]:.2f}" for m in METRICS)
        lines.append(f"| {ROW_TITLES.get(row, row)} | {metrics['dev'][row]['ndcg@10']:.2f} | {cells} |")
    aggregation = metrics["aggregation"]
    if aggregation:
        weights = ", ".join(f"{n} {w:.3f}" for n, w in zip(aggregation["names"], aggregation["weights"]))
        lines += ["", f"Aggregation ({aggregation['method']} on dev): {weights}; intercept {aggregation['intercept']:.3f}."]
    lines += ["", "## Counts", "", "```", json.dumps(counts, indent=1), "```", "", "## Wall seconds", "", "```",
              json.dumps(metrics["wall_seconds"], indent=1), "```", ""]
    return lines


def report_retrieval(
    ctx: RunContext, rdata: RetrievalData, teacher_fits: list[FitRecord], sbert: FitRecord, student: FitRecord,
    knrm: FitRecord | None, silver: RetrievalSilver, evaluation: RetrievalEvaluation, wall_seconds: dict[str, float],
) -> RetrievalRunResult:
    """The run's result, report.md and, last (it marks the run finished), metrics.json."""
    spec, rspec = ctx.spec, ctx.spec.retrieval
    assert rspec is not None
    fits = [*teacher_fits, sbert, student, *([knrm] if knrm else [])]
    counts = {**rdata.counts, **silver.counts(), "rejects": {**rdata.counts["rejects"], "label": silver.rejected},
              "trained_on": fits_summary(fits)}
    about = {"source": rspec.source, **({"task": rspec.task} if rspec.source == "arguana" else {})}
    evaluations = {row: Evaluation(dev=round(evaluation.metrics["dev"][row]["ndcg@10"], 4),
                                   test=round(evaluation.metrics["test"][row]["ndcg@10"], 4)) for row in evaluation.metrics["test"]}
    result = RetrievalRunResult(ctx.layout.root, "retrieval", evaluations, {fit.name: fit for fit in fits}, counts, wall_seconds,
                                reused_fits=dict(ctx.ledger.reused), retrieval=evaluation, about=about)
    metrics = result.metrics()
    atomic_write_text(ctx.layout.root / REPORT_FILE, "\n".join(report_lines(spec.name, metrics)))
    atomic_write_text(ctx.layout.root / METRICS_FILE, json.dumps(metrics, indent=2))
    log.info("done: %s", result.report)
    return result
