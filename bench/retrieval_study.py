"""Retrieval study (issue 58): does the teacher's labelling give a MiniLM retriever a domain it was not trained on?

For each ArguAna task, gold size and seed, one `scenario: retrieval` run of the task's job (jobs/arguana_<task>.yaml):
the seed draws the gold training queries, the unlabeled ones and the dev/test halves of the validation debates.
Every run ranks dev and test with BM25, the zero-shot MiniLM, the gold-only SBERT, the AugSBERT student, the
teacher and KNRM re-ranking BM25, their linear aggregation (fitted on dev) and reciprocal-rank fusion.

    .venv/bin/python -m bench.retrieval_study                                   # both tasks, gold 300 and all, 3 seeds
    .venv/bin/python -m bench.retrieval_study --tasks premise --gold 300 --seeds 42 \\
        --set retrieval.unlabeled_queries=100 --set retrieval.eval_queries=50  # a smaller cell

Each cell runs in --work/<task>-gold<n>-seed<s>; a rerun reads a finished cell's metrics.json and resumes an
unfinished one (finished fits and labeled shards are kept), so a stopped study goes on where it stopped. The
means over the seeds go to bench/results/retrieval_study.json (per task and gold size, keyed by row: bm25,
zero_shot, sbert, augsbert_<loss>, teacher_rerank, knrm, aggregation, rrf) and docs/RESULTS_RETRIEVAL.md, with the
targets checked. Only cells that finished count; the page says how many seeds each mean has.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import augsbert_ray as ar

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "retrieval_study.json"
PAGE = ROOT / "docs" / "RESULTS_RETRIEVAL.md"
METRICS = ("ndcg@10", "mrr@10", "map@100", "recall@100")
ROW_NAMES = {"bm25": "BM25", "zero_shot": "zero-shot MiniLM", "sbert": "SBERT on gold (MNRL + hard negatives)",
             "teacher_rerank": "teacher re-ranking BM25", "knrm": "KNRM re-ranking BM25",
             "aggregation": "linear aggregation (fit on dev)", "rrf": "reciprocal-rank fusion"}


def row_name(row: str) -> str:
    return ROW_NAMES.get(row) or f"AugSBERT student ({row.removeprefix('augsbert_')})"


def cell_spec(task: str, gold: str, seed: int, work: Path, overrides: list[str]) -> ar.JobSpec:
    """The job of ``task`` for one cell: its seed, its gold size (``all``: every training query), its output."""
    return ar.load_spec(ROOT / "jobs" / f"arguana_{task}.yaml", [
        f"name={task}-gold{gold}-seed{seed}", f"seed={seed}", f"output_dir={work / f'{task}-gold{gold}-seed{seed}'}",
        f"retrieval.train_queries={'null' if gold == 'all' else int(gold)}", *overrides,
    ])


def run_cell(spec: ar.JobSpec) -> dict[str, Any]:
    """metrics.json of the cell's finished run; an unfinished one is resumed, none is started."""
    cell = Path(spec.output_dir)
    runs = sorted(cell.glob("*/spec.yaml")) if cell.is_dir() else []
    for done in (path.parent / "metrics.json" for path in runs):
        if done.exists():
            return json.loads(done.read_text(encoding="utf-8"))
    result = ar.run(resume=runs[-1].parent, verbose=False) if runs else ar.run(spec, verbose=False)
    return json.loads((result.run_dir / "metrics.json").read_text(encoding="utf-8"))


def mean_rows(cells: list[dict[str, Any]], split: str) -> dict[str, dict[str, float]]:
    """Each row's mean (and, over several seeds, sample standard deviation) of each metric on ``split``."""
    rows: dict[str, dict[str, float]] = {}
    for row in cells[0][split]:
        for metric in METRICS:
            values = [cell[split][row][metric] for cell in cells]
            rows.setdefault(row, {})[metric] = round(statistics.fmean(values), 2)
            if len(values) > 1:
                rows[row][f"{metric}_std"] = round(statistics.stdev(values), 2)
    return rows


def summary(cells: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    """One (task, gold size)'s means over its finished seeds, with wall time and labeling throughput."""
    counts = [cell["counts"] for cell in cells]
    return {
        "seeds": seeds,
        "test": mean_rows(cells, "test"),
        "dev": mean_rows(cells, "dev"),
        "gold_queries": counts[0]["queries"]["gold"],
        "unlabeled_queries": counts[0]["queries"]["unlabeled"],
        "eval_queries": {split: counts[0]["queries"][split] for split in ("dev", "test")},
        "labeled_pairs": counts[0]["labeled"],
        "label_pairs_per_second": round(statistics.fmean(count["pairs_per_second"] for count in counts), 1),
        "wall_seconds": round(statistics.fmean(cell["wall_seconds"]["total"] for cell in cells)),
        "stage_seconds": {stage: round(statistics.fmean(cell["wall_seconds"][stage] for cell in cells))
                          for stage in cells[0]["wall_seconds"] if stage != "total"},
    }


def targets(result: dict[str, Any], task: str) -> list[tuple[str, float, float, bool]]:
    """The issue's targets on test nDCG@10: (what, the figure, the bar, met)."""
    ndcg = {row: values["ndcg@10"] for row, values in result["test"].items()}
    student = next(row for row in ndcg if row.startswith("augsbert_"))
    singles = [row for row in ndcg if row not in ("aggregation", "rrf")]
    best = max(singles, key=ndcg.__getitem__)
    checks = [
        (f"{student} >= zero_shot + 5", ndcg[student], ndcg["zero_shot"] + 5),
        (f"{student} >= sbert + 1.5", ndcg[student], ndcg["sbert"] + 1.5),
        (f"{student} >= 90% of teacher_rerank", ndcg[student], 0.9 * ndcg["teacher_rerank"]),
        (f"aggregation >= best single ({best}) + 1", ndcg["aggregation"], ndcg[best] + 1),
    ]
    if task == "premise":
        checks.append((f"{student} > bm25", ndcg[student], ndcg["bm25"] + 1e-9))
    return [(what, figure, bar, figure >= bar) for what, figure, bar in checks]


def page(results: dict[str, Any], source: str, command: str) -> str:
    lines = ["# Retrieval study: ArguAna, MiniLM student taught by a re-ranker teacher", "",
             f"Written by `bench/retrieval_study.py` from `{source}`; the command:", "",
             f"    {command}", "", f"Settings beyond the jobs' own: {results['overrides'] or 'none'}.", ""]
    for key, result in sorted(results["cells"].items()):
        task = key.split("/")[0]
        lines += [f"## {key} (seeds {', '.join(map(str, result['seeds']))})", "",
                  f"{result['gold_queries']} gold queries, {result['unlabeled_queries']} unlabeled with "
                  f"{result['labeled_pairs']} teacher-labeled pairs ({result['label_pairs_per_second']} pairs/s), "
                  f"dev/test {result['eval_queries']['dev']}/{result['eval_queries']['test']} queries; "
                  f"{result['wall_seconds']} s per run on this machine.", "",
                  "| ranker | dev nDCG@10 | test nDCG@10 | MRR@10 | MAP@100 | Recall@100 |", "|---|---:|---:|---:|---:|---:|"]
        for row, values in result["test"].items():
            spread = f" ± {values['ndcg@10_std']}" if "ndcg@10_std" in values else ""
            lines.append(f"| {row_name(row)} | {result['dev'][row]['ndcg@10']} | {values['ndcg@10']}{spread} | "
                         f"{values['mrr@10']} | {values['map@100']} | {values['recall@100']} |")
        lines += ["", "| target (test nDCG@10) | figure | bar | met |", "|---|---:|---:|---|"]
        lines += [f"| {what} | {figure:.2f} | {bar:.2f} | {'yes' if met else f'no, by {bar - figure:.2f}'} |"
                  for what, figure, bar, met in targets(result, task)]
        lines += ["", "Stage seconds: " + ", ".join(f"{stage} {seconds}" for stage, seconds in result["stage_seconds"].items()), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", choices=["premise", "counter"], default=["premise", "counter"])
    parser.add_argument("--gold", nargs="+", default=["300", "all"], help="gold training queries per cell: a number or all")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "retrieval_study", help="where the cells' runs go")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a job setting for every cell, as `augsbert run --set`")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args()
    ar.setup_logging()
    results = json.loads(args.results.read_text(encoding="utf-8")) if args.results.exists() else {}
    if results.get("overrides", args.overrides) != args.overrides:
        raise SystemExit(f"{args.results} holds cells run with --set {results['overrides']}: give the same, or another --results")
    results.update(overrides=args.overrides, cells=results.get("cells", {}))
    command = "python -m bench.retrieval_study " + " ".join(
        [f"--tasks {' '.join(args.tasks)}", f"--gold {' '.join(args.gold)}", f"--seeds {' '.join(map(str, args.seeds))}",
         *(f"--set {override}" for override in args.overrides)])
    for task in args.tasks:
        for gold in args.gold:
            cells = []
            for seed in args.seeds:
                cells.append(run_cell(cell_spec(task, gold, seed, args.work, args.overrides)))
                results["cells"][f"{task}/gold-{gold}"] = summary(cells, args.seeds[:len(cells)])
                args.results.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
                source = args.results.relative_to(ROOT) if args.results.is_relative_to(ROOT) else args.results
                args.page.write_text(page(results, str(source), command) + "\n", encoding="utf-8")
                print(f"{task} gold {gold} seed {seed}: test nDCG@10 " + ", ".join(
                    f"{row} {values['ndcg@10']:.2f}" for row, values in cells[-1]["test"].items()), flush=True)


if __name__ == "__main__":
    main()
