"""Why does AugSBERT gain less than the paper's +5 on STSb -> BWS? Refit its bi-encoder from a finished transfer
run's own files, over the knobs the issue names (epochs, learning rate, silver/gold mixing, starting point), and
score each variant on the target's dev split; test is printed beside it but never used to choose.

    .venv/bin/python -m bench.transfer_study runs/reproduce/transfer_stsb_bws-full-seed42-*
    .venv/bin/python -m bench.transfer_study RUN --teacher-epochs 1 2   # the teacher's side: cross-encoder epochs

Reuses the run's cross-encoder silver (silver/given), source gold (gold/train.parquet), SBERT-source model and
target dev/test splits, so a variant costs one bi-encoder fit (no cross-encoder refit, no Ray). With
--teacher-epochs, each number of epochs refits the cross-encoder on the source gold (the run's own model for the
run's epochs), scores it on the source dev split (the split a user without target labels would choose by) and on
the target, relabels the target train pairs and fits the job's bi-encoder on them. Appends one row per variant
to bench/results/transfer_study.json under the run's name.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import augsbert_ray as ar
from augsbert_ray.config import BiEncoderSpec, CrossEncoderSpec
from augsbert_ray.evaluation import evaluate, score_pairs
from augsbert_ray.runtime import configure_torch_threads
from augsbert_ray.training import TrainFile, read_training_pairs
from bench.refit import fit_student

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Variant:
    name: str
    start: str  # "backbone" (the job's choice) or "sbert_source" (the run's source-gold model)
    data: tuple[str, ...]  # "silver" (target, cross-encoder labels) and/or "source_gold"
    epochs: int = 1
    learning_rate: float = 2e-5


VARIANTS = [
    Variant("job: silver, 1 epoch", "backbone", ("silver",)),
    Variant("silver, 2 epochs", "backbone", ("silver",), epochs=2),
    Variant("silver, 4 epochs", "backbone", ("silver",), epochs=4),
    Variant("silver, lr 5e-5", "backbone", ("silver",), learning_rate=5e-5),
    Variant("SBERT-source, then silver", "sbert_source", ("silver",)),
    Variant("source gold + silver, mixed", "backbone", ("source_gold", "silver")),
]


def fit(run: Path, spec: ar.JobSpec, variant: Variant, silver: list[TrainFile], output_dir: str) -> int:
    sources: dict[str, list[TrainFile]] = {
        "silver": silver,
        "source_gold": [(str(run / "gold" / "train.parquet"), "label")],
    }
    table = read_training_pairs([file for name in variant.data for file in sources[name]])
    start = ar.resolve_model(spec.bi_encoder.model) if variant.start == "backbone" else str(run / "models" / "sbert_source")
    encoder = BiEncoderSpec.model_validate(
        {**spec.bi_encoder.model_dump(), "epochs": variant.epochs, "learning_rate": variant.learning_rate}
    )
    fit_student(table, start, encoder, spec.seed, output_dir)
    return table.num_rows


def run_silver(run: Path) -> list[TrainFile]:
    return [(str(path), "score") for path in sorted((run / "silver" / "given").glob("part-*.parquet"))]


def teacher(run: Path, spec: ar.JobSpec, epochs: int, workdir: Path, threads: int) -> tuple[str, list[TrainFile], float]:
    """The cross-encoder with ``epochs`` on the source gold and its silver for the target train pairs:
    the run's own when it used that many epochs, else a refit and an in-process relabeling."""
    if epochs == spec.cross_encoder.epochs:
        return str(run / "models" / "cross_encoder"), run_silver(run), 0.0
    from bench.cross_encoder_study import fit_cross_encoder

    model_dir = str(workdir / f"cross_encoder_{epochs}")
    encoder = CrossEncoderSpec.model_validate({**spec.cross_encoder.model_dump(), "epochs": epochs})
    seconds = fit_cross_encoder(pq.read_table(run / "gold" / "train.parquet"), encoder, spec.seed, model_dir)
    pairs = pq.read_table(run / "target" / "train.parquet")
    scores = score_pairs("cross_encoder", model_dir, pairs.column("sentence1").to_pylist(),
                         pairs.column("sentence2").to_pylist(), threads)
    silver = workdir / f"silver_{epochs}.parquet"
    pq.write_table(pairs.select(["sentence1", "sentence2"]).append_column("score", pa.array(scores, pa.float32())), silver)
    return model_dir, [(str(silver), "score")], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a finished domain-transfer run directory (with metrics.json)")
    parser.add_argument("--only", nargs="+", help="variant names to run (default: all)")
    parser.add_argument("--teacher-epochs", type=int, nargs="+",
                        help="study the teacher instead: cross-encoder epochs on the source gold")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "transfer_study.json"))
    args = parser.parse_args()
    configure_torch_threads(args.threads)

    spec = ar.load_spec(args.run / "spec.yaml")
    if spec.scenario != "domain-transfer":
        raise SystemExit(f"{args.run}: scenario {spec.scenario!r}, expected domain-transfer")
    metrics = json.loads((args.run / "metrics.json").read_text())
    task = metrics["task"]
    dev, test = (pq.read_table(args.run / "target" / f"{split}.parquet") for split in ("dev", "test"))
    source_dev = pq.read_table(args.run / "gold" / "dev.parquet")
    out = Path(args.json)
    results = json.loads(out.read_text()) if out.exists() else {}
    rows = results.setdefault(args.run.name, {})
    print(f"{args.run.name}: target dev {dev.num_rows} pairs, test {test.num_rows}", flush=True)

    def record(name: str, row: dict[str, Any]) -> None:
        rows[name] = row
        print(f"{name:32s} " + "  ".join(f"{key} {value}" for key, value in row.items()), flush=True)
        out.write_text(json.dumps(results, indent=2), encoding="utf-8")

    for epochs in args.teacher_epochs or []:
        with tempfile.TemporaryDirectory() as workdir:
            teacher_dir, silver, teacher_seconds = teacher(args.run, spec, epochs, Path(workdir), args.threads)
            on_target = evaluate("cross_encoder", teacher_dir, task, dev, test, threads=args.threads)
            on_source = evaluate("cross_encoder", teacher_dir, spec.task, source_dev, source_dev, threads=args.threads)
            if epochs == spec.cross_encoder.epochs:  # the run's own AugSBERT learned from this teacher
                student = {split: metrics["details"]["augsbert"][split] for split in ("dev", "test")}
            else:
                student_dir = str(Path(workdir) / "student")
                fit(args.run, spec, VARIANTS[0], silver, student_dir)
                student = evaluate("bi_encoder", student_dir, task, dev, test, threads=args.threads).to_dict()
        record(f"teacher: cross-encoder {epochs} epoch(s)", {
            "teacher_source_dev": round(on_source.dev, 2), "teacher_dev": round(on_target.dev, 2),
            "teacher_test": round(on_target.test, 2), "dev": round(student["dev"], 2), "test": round(student["test"], 2),
            "teacher_train_seconds": round(teacher_seconds, 1)})
    if args.teacher_epochs:
        return

    for variant in VARIANTS:
        if args.only and variant.name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as model_dir:
            started = time.perf_counter()
            train_rows = fit(args.run, spec, variant, run_silver(args.run), model_dir)
            seconds = time.perf_counter() - started
            scores = evaluate("bi_encoder", model_dir, task, dev, test, threads=args.threads)
        record(variant.name, {"dev": round(scores.dev, 2), "test": round(scores.test, 2), "train_rows": train_rows,
                              "train_seconds": round(seconds, 1)})


if __name__ == "__main__":
    main()
