"""tuning.json and tuning.md: every trial's dev score at the cull point (and at the end for survivors),
the chosen trial, its test score, and the training steps spent against training every trial fully."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from augsbert_ray.files import atomic_write_text
from augsbert_ray.report import gate_line
from augsbert_ray.tuning.search import asha_schedule
from augsbert_ray.tuning.trials import Outcome


def tuning_summary(outcomes: dict[str, Outcome], test_scores: dict[str, float], metric: str) -> dict[str, Any]:
    models = {}
    for name, outcome in outcomes.items():
        data = outcome.to_dict()
        chosen = next(trial for trial in outcome.trials if trial.name == outcome.chosen)
        data.update(chosen_seed=chosen.seed, chosen_top_k=chosen.top_k, chosen_dev=chosen.final_score, chosen_test=test_scores.get(name))
        data["steps_ratio_vs_all_full"] = round(outcome.steps_spent / outcome.steps_full, 4)
        data["steps_ratio_vs_one_fit"] = round(outcome.steps_spent / data["steps_one_fit"], 4)
        models[name] = data
    spent = sum(outcome.steps_spent for outcome in outcomes.values())
    full = sum(outcome.steps_full for outcome in outcomes.values())
    return {"metric": metric, "models": models, "steps_spent": spent, "steps_full": full,
            "steps_ratio_vs_all_full": round(spent / full, 4) if full else None}


def _fmt(score: float | None) -> str:
    return "" if score is None else f"{score:.2f}"


def tuning_markdown(title: str, summary: dict[str, Any]) -> str:
    lines = [f"# Seed optimization: {title}", "", f"Metric: {summary['metric']} on dev (trials) and test (chosen model).", ""]
    if gate := summary.get("teacher"):
        lines += [gate_line(gate), ""]
    for name, data in summary["models"].items():
        fit_steps = ", ".join(map(str, sorted({trial["total_steps"] for trial in data["trials"]})))
        if data["scheduler"] == "asha":
            rung, reduction = asha_schedule(data["steps_one_fit"], len(data["trials"]), data["keep"], data["cull_at"])
            rule = (f"ASHA compares every trial's dev score at step {rung} ({data['cull_at']:.0%} of the longest fit; a "
                    f"shorter fit runs to its end) with those recorded there before it, and stops it below their "
                    f"{1 - 1 / reduction:.0%} quantile (reduction factor {reduction:g}, trials / keep); it lets the first "
                    f"trial through, so more than {data['keep']} may finish" if reduction > 1
                    else f"with keep = trials ({data['keep']}) ASHA culls none: every trial trains to its end")
        else:
            rule = f"every trial trains to {data['cull_at']:.0%} of its steps; the best {data['keep']} by dev score there go on"
        lines += [
            f"## {name}",
            "",
            f"Scheduler `{data['scheduler']}`: {rule} (steps per fit: {fit_steps}).",
            "",
            "| trial | seed | top_k | dev at cull point | dev at end | steps trained | status |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for trial in sorted(data["trials"], key=lambda t: -(t["cull_score"] if t["cull_score"] is not None else -1e9)):
            mark = " **(chosen)**" if trial["name"] == data["chosen"] else ""
            top_k = "" if trial["top_k"] is None else trial["top_k"]
            lines.append(
                f"| {trial['name']}{mark} | {trial['seed']} | {top_k} | {_fmt(trial['cull_score'])} | "
                f"{_fmt(trial['final_score'])} | {trial['steps']} / {trial['total_steps']} | {trial['status']} |"
            )
        lines += [
            "",
            f"Chosen: **{data['chosen']}** (seed {data['chosen_seed']}"
            + ("" if data["chosen_top_k"] is None else f", top_k {data['chosen_top_k']}")
            + f"): dev {_fmt(data['chosen_dev'])}, test {_fmt(data['chosen_test'])}.",
            "",
            f"Training steps: {data['steps_spent']} spent, against {data['steps_full']} to train all "
            f"{len(data['trials'])} trials fully ({data['steps_ratio_vs_all_full']:.2f}x), "
            f"or {data['steps_ratio_vs_one_fit']:.2f}x one full fit ({data['steps_one_fit']} steps). "
            f"Wall time: {data['wall_seconds']:.0f}s.",
            "",
        ]
    return "\n".join(lines)


def write_tuning_report(
    run_dir: Path, title: str, outcomes: dict[str, Outcome], test_scores: dict[str, float], metric: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    summary = {**tuning_summary(outcomes, test_scores, metric), **(extra or {})}
    (run_dir / "tuning.md").write_text(tuning_markdown(title, summary), encoding="utf-8")
    atomic_write_text(run_dir / "tuning.json", json.dumps(summary, indent=2))  # last: it marks an `augsbert tune` run finished
    return summary
