"""Cross-encoder fit on gold pairs (Ray Train worker side and driver side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from augsbert_ray.config import CrossEncoderSpec, TrainingSpec
from augsbert_ray.training.ray_fit import TrainFile, fit_on_ray, read_training_pairs, train_and_report, worker_setup


def both_orders(table: pa.Table) -> pa.Table:
    swapped = table.rename_columns(["sentence2", "sentence1", "label"]).select(["sentence1", "sentence2", "label"])
    return pa.concat_tables([table, swapped])


def cross_encoder_train_loop(config: dict[str, Any]) -> None:
    worker_setup(config)
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    spec = CrossEncoderSpec.model_validate(config["spec"])
    table = read_training_pairs(config["train_files"])
    if spec.both_orders:
        table = both_orders(table)
    model = CrossEncoder(config["model"], num_labels=1, max_length=spec.max_seq_length)
    # BCE on a sigmoid output fits both 0/1 labels and regression scores scaled to [0,1],
    # as in the paper (sigmoid head) and sentence-transformers' STSb cross-encoder example.
    loss = BinaryCrossEntropyLoss(model)
    train_and_report(CrossEncoderTrainer, CrossEncoderTrainingArguments, model, loss, table, spec, config, False)


def fit_cross_encoder(
    spec: CrossEncoderSpec,
    model: str,
    train_files: list[TrainFile],
    resources: TrainingSpec,
    seed: int,
    storage: Path,
    model_dir: Path,
) -> dict[str, Any]:
    """Fine-tune a cross-encoder (fresh one-logit head, BCE loss) on Ray Train and save it into ``model_dir``.

    Args:
        spec: The cross_encoder section of a job spec (epochs, learning rate, both orders, ...).
        model: The base model's directory or Hugging Face id (``resolve_model("mpnet")``).
        train_files: Parquet files of pairs, each with the column that holds its target.
        resources: Ray Train's workers, CPUs, GPU use, bf16 and checkpoint interval.
        seed: Seeds the head and the data order.
        storage: Ray Train's storage; a fit stopped midway resumes from its last checkpoint there.
        model_dir: Where the trained model is saved.

    Returns:
        ``train_loss``, ``train_rows`` (both orders counted), ``steps`` and ``resumed_from_step``.

    Example:
        ::

            pq.write_table(gold.train, "train.parquet")
            fit_cross_encoder(CrossEncoderSpec(model="minilm"), resolve_model("minilm"), [("train.parquet", "label")],
                              TrainingSpec(), seed=42, storage=Path("ray_train"), model_dir=Path("models/cross_encoder"))
    """
    config = {"spec": spec.model_dump(mode="json"), "model": model, "train_files": train_files, "seed": seed}
    return fit_on_ray(cross_encoder_train_loop, config, resources, storage, "cross_encoder", model_dir)
