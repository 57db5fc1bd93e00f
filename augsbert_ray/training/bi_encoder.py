"""Bi-encoder (SBERT) fit on gold, silver or gold+silver pairs. SBERT and AugSBERT share this path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from augsbert_ray.config import BiEncoderSpec, TrainingSpec
from augsbert_ray.training.ray_fit import TrainFile, fit_on_ray, read_training_pairs, train_and_report, worker_setup


def bi_encoder_loss(model: Any, spec: BiEncoderSpec) -> Any:
    """Every loss uses the silver labels: cosine regresses on the score, CoSENT ranks the batch's pairs by it,
    online contrastive thresholds it at 0.5 (so it is for 0/1 classification labels)."""
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, CosineSimilarityLoss, OnlineContrastiveLoss

    class ThresholdedContrastiveLoss(OnlineContrastiveLoss):
        """Labels >= 0.5 are positives, the rest negatives: the library's loss would ignore every pair whose label
        is not exactly 0 or 1, so every silver pair and every regression label."""

        def compute_loss_from_embeddings(self, embeddings: Any, labels: Any) -> Any:
            return super().compute_loss_from_embeddings(embeddings, (labels >= 0.5).to(labels.dtype))

    losses = {"cosine": CosineSimilarityLoss, "cosent": CoSENTLoss, "online_contrastive": ThresholdedContrastiveLoss}
    return losses[spec.loss](model)


def bi_encoder_train_loop(config: dict[str, Any]) -> None:
    worker_setup(config)
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    spec = BiEncoderSpec.model_validate(config["spec"])
    table = read_training_pairs(config["train_files"])
    model = SentenceTransformer(config["model"])
    model.max_seq_length = spec.max_seq_length
    loss = bi_encoder_loss(model, spec)
    train_and_report(SentenceTransformerTrainer, SentenceTransformerTrainingArguments, model, loss, table, spec, config, True)


def fit_bi_encoder(
    spec: BiEncoderSpec,
    model: str,
    train_files: list[TrainFile],
    resources: TrainingSpec,
    seed: int,
    storage: Path,
    name: str,
    model_dir: Path,
) -> dict[str, Any]:
    """Fine-tune a bi-encoder (by default the cosine of its embeddings regressed on each pair's target, see
    ``spec.loss``) on Ray Train and save it into ``model_dir``.

    Args:
        spec: The bi_encoder section of a job spec (epochs, learning rate, loss, ...).
        model: The base model's directory or Hugging Face id (``resolve_model("minilm")``).
        train_files: Parquet files of pairs, each with the column that holds its target: gold ``label``, silver
            ``score``.
        resources: Ray Train's workers, CPUs, GPU use, bf16 and checkpoint interval.
        seed: Seeds the data order.
        storage: Ray Train's storage; a fit stopped midway resumes from its last checkpoint there.
        name: The fit's name in ``storage`` and in logs.
        model_dir: Where the trained model is saved.

    Returns:
        ``train_loss``, ``train_rows``, ``steps`` and ``resumed_from_step``.

    Example:
        ::

            files = [("train.parquet", "label"), ("silver/bm25/part-00000.parquet", "score")]
            fit_bi_encoder(BiEncoderSpec(), resolve_model("minilm"), files,
                           TrainingSpec(), seed=42, storage=Path("ray_train"), name="augsbert_bm25", model_dir=Path("models/augsbert_bm25"))
    """
    config = {"spec": spec.model_dump(mode="json"), "model": model, "train_files": train_files, "seed": seed}
    return fit_on_ray(bi_encoder_train_loop, config, resources, storage, name, model_dir)
