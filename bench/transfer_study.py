"""Why does AugSBERT gain less than the paper's +5 on STSb -> BWS? Refit its bi-encoder from a finished transfer
run's own files, over the knobs the issue names (epochs, learning rate, silver/gold mixing, starting point), and
score each variant on the target's dev split; test is printed beside it but never used to choose.

    .venv/bin/python bench/transfer_study.py runs/reproduce/transfer_stsb_bws-full-seed42-*

Reuses the run's cross-encoder silver (silver/given), source gold (gold/train.parquet), SBERT-source model and
target dev/test splits, so a variant costs one bi-encoder fit (no cross-encoder refit, no Ray). Appends one row
per variant to bench/results/transfer_study.json under the run's name.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from augsbert_ray.config import BiEncoderSpec, JobSpec, load_spec
from augsbert_ray.evaluation import evaluate
from augsbert_ray.models import resolve_model
from augsbert_ray.runtime import configure_torch_threads
from augsbert_ray.training.ray_fit import TrainFile, read_training_pairs, training_arguments

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


def fit(run: Path, spec: JobSpec, variant: Variant, output_dir: str) -> int:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss, OnlineContrastiveLoss

    sources: dict[str, list[TrainFile]] = {
        "silver": [(str(path), "score") for path in sorted((run / "silver" / "given").glob("part-*.parquet"))],
        "source_gold": [(str(run / "gold" / "train.parquet"), "label")],
    }
    table = read_training_pairs([file for name in variant.data for file in sources[name]])
    start = resolve_model(spec.bi_encoder.model) if variant.start == "backbone" else str(run / "models" / "sbert_source")
    model = SentenceTransformer(start)
    model.max_seq_length = spec.bi_encoder.max_seq_length
    encoder = BiEncoderSpec.model_validate(
        {**spec.bi_encoder.model_dump(), "epochs": variant.epochs, "learning_rate": variant.learning_rate}
    )
    args = training_arguments(SentenceTransformerTrainingArguments, encoder, spec.seed, output_dir, True, distributed=False)
    loss = CosineSimilarityLoss(model) if encoder.loss == "cosine" else OnlineContrastiveLoss(model)  # as the job's
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset(table), loss=loss)
    trainer.train()
    model.save_pretrained(output_dir)
    return table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a finished domain-transfer run directory (with metrics.json)")
    parser.add_argument("--only", nargs="+", help="variant names to run (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "transfer_study.json"))
    args = parser.parse_args()
    configure_torch_threads(args.threads)

    spec = load_spec(args.run / "spec.yaml")
    task = json.loads((args.run / "metrics.json").read_text())["task"]
    if spec.scenario != "domain-transfer":
        raise SystemExit(f"{args.run}: scenario {spec.scenario!r}, expected domain-transfer")
    dev, test = (pq.read_table(args.run / "target" / f"{split}.parquet") for split in ("dev", "test"))
    out = Path(args.json)
    results = json.loads(out.read_text()) if out.exists() else {}
    rows = results.setdefault(args.run.name, {})
    print(f"{args.run.name}: target dev {dev.num_rows} pairs, test {test.num_rows}", flush=True)
    for variant in VARIANTS:
        if args.only and variant.name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as model_dir:
            started = time.perf_counter()
            train_rows = fit(args.run, spec, variant, model_dir)
            seconds = time.perf_counter() - started
            scores = evaluate("bi_encoder", model_dir, task, dev, test, threads=args.threads)
        rows[variant.name] = row = {"dev": round(scores.dev, 2), "test": round(scores.test, 2), "train_rows": train_rows,
                                    "train_seconds": round(seconds, 1)}
        print(f"{variant.name:32s} dev {row['dev']:6.2f}  test {row['test']:6.2f}  ({train_rows} pairs, {seconds:.0f} s)", flush=True)
        out.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
