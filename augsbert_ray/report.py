"""What a run leaves for people: report.md and the gold-vs-silver score density plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from augsbert_ray.config import JobSpec, dump_spec

__all__ = ["MODEL_TITLES", "gate_line", "plot_score_densities", "write_report"]

MODEL_TITLES = {
    "cross_encoder": "Cross-encoder (teacher)",
    "teacher_bi_encoder": "Bi-encoder teacher (teacher.bi_encoder fine-tuned on gold, one seed: that model's SBERT; beside a cross-encoder teacher, with evaluation.teacher_bi_encoder)",
    "teacher": "Ensemble teacher",
    "sbert": "SBERT (gold only)",
    "sbert_source": "SBERT-source (lower bound)",
    "sbert_target": "SBERT-target (upper bound, target gold)",
    "augsbert": "AugSBERT (target silver)",
    "augsbert_bm25": "AugSBERT-BM25",
    "augsbert_rs": "AugSBERT-RS",
    "augsbert_kde": "AugSBERT-KDE",
    "augsbert_ss": "AugSBERT-SS",
    "augsbert_bm25_ss": "AugSBERT-BM25+SS",
    "zero_shot": "Zero-shot bi-encoder",
    "jaccard": "Jaccard baseline",
    "majority": "Majority-class baseline (every pair dev's majority class)",
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


def dataset_name(data: Any) -> str:
    return data.dataset + (f" ({data.bws_split})" if data.dataset == "bws" else "") if data.dataset else str(data.train or data.test)


def cleaning_lines(what: str, counts: dict[str, Any], on_overlap: str) -> list[str]:
    """The accepted pairs removed on purpose (see GoldData.cleaning_counts): repeats within a split, and train
    pairs that dev or test also has; and the test pairs that dev also has."""
    def per_split(counted: dict[str, int]) -> str:
        return ", ".join(f"{split} {n}" for split, n in counted.items())

    overlap = counts[f"{what}_overlap"]
    return [
        f"- {what} pairs repeated within a split (either order), "
        f"{'kept (data.duplicates: keep)' if counts[f'{what}_duplicates_kept'] else 'removed with the first kept'}: "
        f"{per_split(counts[f'{what}_duplicates'])}; of these with another label: {per_split(counts[f'{what}_label_conflicts'])}",
        f"- {what} dev/test pairs also in train (either order): {per_split(overlap)}; "
        f"{counts[f'{what}_overlap_dropped']} dropped from train (on_overlap: {on_overlap})",
        *([f"- {what} test pairs also in dev (either order), kept: dev only picks seeds and checkpoints: "
           f"{counts[f'{what}_dev_test_overlap']}"] if f"{what}_dev_test_overlap" in counts else []),  # older metrics lack it
        *([f"- {what} pairs of the dataset's own splits given as files instead: {replaced}"]
          if (replaced := counts.get(f"{what}_replaced_by_files")) else []),
        *([f"- {what} dev/test pairs left out by eval_limit: {per_split(dropped)}"]
          if (dropped := counts.get(f"{what}_eval_limit_dropped")) else []),
    ]


def gate_line(gate: dict[str, Any]) -> str:
    """The teacher gate's record (metrics.json ``teacher``) as a line of report.md or tuning.md."""
    verdict = "better" if gate["better"] else "NOT better: its silver labels are unlikely to help"
    return (f"Teacher gate (before labeling): {gate['kind']} teacher dev {gate['teacher_dev']:.2f} vs "
            f"{MODEL_TITLES.get(gate['student'], gate['student'])} dev {gate['student_dev']:.2f}: {verdict} "
            f"({gate['teacher_dev'] - gate['student_dev']:+.2f}). Silver labeler: `{gate['labeler']}`.")


def write_report(spec: JobSpec, metrics: dict[str, Any], path: Path) -> None:
    classification = metrics["task"] == "classification"
    metric = "F1 x100 (positive class, dev threshold)" if classification else "Spearman x100"
    trained_on = metrics["counts"].get("trained_on", {})
    if spec.target is not None:
        data = f"scenario: domain transfer from {dataset_name(spec.data)} to {dataset_name(spec.target.data)}"
        data += f"; source gold train pairs: {metrics['counts'].get('gold_train')}"
        data += f"; target pairs: {metrics['counts'].get('target_train')} train, {metrics['counts'].get('target_test')} test"
    else:
        data = f"dataset: {dataset_name(spec.data)}; gold train pairs: {metrics['counts'].get('gold_train')}"
    lines = [
        f"# AugSBERT run: {spec.name}",
        "",
        f"Task: {metrics['task']}; {data}; metric: {metric}.",
        "",
        "| model | dev | test | " + ("test AUC(0.05) x100 | " if classification else "") + "trained on (pairs) |",
        "|---|---:|---:|---:|" + ("---:|" if classification else ""),
    ]
    for name in metrics["test"]:
        title = MODEL_TITLES.get(name, name)
        auc = metrics["details"].get(name, {}).get("test_auc05")
        auc_cell = (f"{100 * auc:.2f} | " if auc is not None else " | ") if classification else ""
        pairs = trained_on.get(name) or ""
        if name == "cross_encoder" and pairs and spec.cross_encoder.both_orders and not spec.cross_encoder.trained:
            pairs = f"{pairs} ({pairs // 2} pairs in both orders)"
        lines.append(f"| {title} | {metrics['dev'][name]:.2f} | {metrics['test'][name]:.2f} | {auc_cell}{pairs} |")
    if gate := metrics.get("teacher"):
        lines += ["", gate_line(gate)]
    baseline = next((name for name in ("sbert", "sbert_source") if name in metrics["test"]), None)
    if baseline:
        lines += ["", f"Silver data effect on test (AugSBERT minus {MODEL_TITLES[baseline]}):", ""]
        for name, score in metrics["test"].items():
            if name.startswith("augsbert"):
                lines.append(f"- {MODEL_TITLES.get(name, name)}: {score - metrics['test'][baseline]:+.2f}")
    counts = metrics["counts"]
    lines += [
        "",
        "## Counts",
        "",
        f"- gold rows read {counts['rows_read']} = accepted {counts['accepted']} + rejected {counts['rejected']} "
        "(rejects in rejects.jsonl)",
    ]
    if "target_rows_read" in counts:
        lines.append(f"- target rows read {counts['target_rows_read']} = accepted {counts['target_accepted']} + rejected "
                     f"{counts['target_rejected']} (rejects in target_rejects.jsonl)")
    for what, data in (("gold", spec.data), ("target", spec.target.data if spec.target else None)):
        if data is not None:
            lines += cleaning_lines(what, counts, data.on_overlap)
    if "given_pairs" in counts:
        given = counts["given_pairs"]
        lines.append(f"- target train pairs {given['pairs_in']} = candidates {given['candidates']} + self-pairs "
                     f"{given['self_pairs']} + repeats {given['duplicates']} + also in dev/test {given['held_out']}")
    for strategy, candidates in counts.get("candidates", {}).items():
        rejected = candidates - counts["labeled"][strategy]
        lines.append(f"- {strategy}: {candidates} candidates = {counts['labeled'][strategy]} labeled + {rejected} rejected by "
                     f"labeling; {counts['kept'][strategy]} kept")
    if metrics.get("sampling"):
        lines += ["", "## Silver score distribution", "", "| strategy | candidates | kept | KL(gold, silver) | share > 0.6 |", "|---|---:|---:|---:|---:|"]
        for strategy, d in metrics["sampling"].items():
            measures = (f"{d[name]:.3f}" if d[name] is not None else "n/a" for name in ("kl_gold_silver", "high_similarity_share"))
            lines.append(f"| {strategy} | {d['candidates']} | {d['kept']} | {' | '.join(measures)} |")
    lines += ["", "## Wall time (s)", ""]
    lines += [f"- {stage}: {seconds}" for stage, seconds in metrics["wall_seconds"].items()]
    lines += ["", "![score densities](score_density.png)", "", "## Spec", "", "```yaml", dump_spec(spec).rstrip(), "```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
