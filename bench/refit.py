"""The job's bi-encoder recipe in this process (no Ray), for the studies that refit a finished run's student."""

from __future__ import annotations

import pyarrow as pa

from augsbert_ray.config import BiEncoderSpec
from augsbert_ray.training import bi_encoder_loss, training_arguments


def fit_student(pairs: pa.Table, start: str, encoder: BiEncoderSpec, seed: int, output_dir: str) -> None:
    """Fit the bi-encoder at ``start`` (a model directory) on ``pairs`` (sentence1, sentence2, label) with the
    settings of ``encoder``; saves it to ``output_dir``."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    model = SentenceTransformer(start)
    model.max_seq_length = encoder.max_seq_length
    args = training_arguments(SentenceTransformerTrainingArguments, encoder, seed, output_dir, True, distributed=False)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset(pairs), loss=bi_encoder_loss(model, encoder))
    trainer.train()
    model.save_pretrained(output_dir)
