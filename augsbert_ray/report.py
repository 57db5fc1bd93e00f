"""What a run leaves for people: report.md and the gold-vs-silver score density plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from augsbert_ray.config import JobSpec, dump_spec

MODEL_TITLES = {
    "cross_encoder": "Cross-encoder (upper bound)",
    "sbert": "SBERT (gold only)",
    "augsbert_bm25": "AugSBERT-BM25",
    "augsbert_rs": "AugSBERT-RS",
    "augsbert_kde": "AugSBERT-KDE",
    "augsbert_ss": "AugSBERT-SS",
    "augsbert_bm25_ss": "AugSBERT-BM25+SS",
    "zero_shot": "Zero-shot bi-encoder",
    "jaccard": "Jaccard baseline",
}


def plot_score_densities(gold_labels: np.ndarray, histograms: dict[str, np.ndarray], path: Path) -> None:
    """Gold label density against each strategy's kept silver score density (the paper's Figure 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    from augsbert_ray.selection.kde import GRID, density_from_histogram

    fig, ax = plt.subplots(figsize=(7, 4))
    if len(np.unique(gold_labels)) > 1:
        ax.plot(GRID, gaussian_kde(gold_labels.astype(float))(GRID), label=f"gold (n={len(gold_labels):,})", lw=2.5, color="black")
    for name, counts in histograms.items():
        if np.count_nonzero(counts) > 1:
            ax.plot(GRID, density_from_histogram(counts)(GRID), label=f"{name} (n={int(counts.sum()):,})", lw=1.5)
    ax.set_xlabel("score")
    ax.set_ylabel("density")
    ax.set_title("Gold label vs silver score densities")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(spec: JobSpec, metrics: dict[str, Any], path: Path) -> None:
    metric = "Spearman x100" if metrics["task"] == "regression" else "F1 x100 (positive class, dev threshold)"
    trained_on = metrics["counts"].get("trained_on", {})
    lines = [
        f"# AugSBERT run: {spec.name}",
        "",
        f"Task: {metrics['task']}; dataset: {spec.data.dataset or spec.data.train}; "
        f"gold train pairs: {metrics['counts'].get('gold_train')}; metric: {metric}.",
        "",
        "| model | dev | test | trained on (pairs) |",
        "|---|---:|---:|---:|",
    ]
    for name in metrics["test"]:
        title = MODEL_TITLES.get(name, name)
        lines.append(f"| {title} | {metrics['dev'][name]:.2f} | {metrics['test'][name]:.2f} | {trained_on.get(name, '')} |")
    if "sbert" in metrics["test"]:
        lines += ["", "Silver data effect on test (AugSBERT minus SBERT):", ""]
        for name, score in metrics["test"].items():
            if name.startswith("augsbert_"):
                lines.append(f"- {MODEL_TITLES.get(name, name)}: {score - metrics['test']['sbert']:+.2f}")
    counts = metrics["counts"]
    lines += [
        "",
        "## Counts",
        "",
        f"- gold rows read {counts['rows_read']} = accepted {counts['accepted']} + rejected {counts['rejected']} "
        "(rejects in rejects.jsonl)",
    ]
    for strategy, candidates in counts.get("candidates", {}).items():
        lines.append(f"- {strategy}: {candidates} candidates, {counts['labeled'][strategy]} labeled, {counts['kept'][strategy]} kept")
    if metrics.get("sampling"):
        lines += ["", "## Silver score distribution", "", "| strategy | candidates | kept | KL(gold, silver) | share > 0.6 |", "|---|---:|---:|---:|---:|"]
        for strategy, d in metrics["sampling"].items():
            lines.append(f"| {strategy} | {d['candidates']} | {d['kept']} | {d['kl_gold_silver']:.3f} | {d['high_similarity_share']:.3f} |")
    lines += ["", "## Wall time (s)", ""]
    lines += [f"- {stage}: {seconds}" for stage, seconds in metrics["wall_seconds"].items()]
    lines += ["", "![score densities](score_density.png)", "", "## Spec", "", "```yaml", dump_spec(spec).rstrip(), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
