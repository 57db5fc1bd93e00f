"""Checks that an evaluation can give a meaningful number, made before any model is loaded: a metric on
one pair or on one label value is NaN or meaningless, and a model directory must hold a model."""

from __future__ import annotations

from pathlib import Path

from augsbert_ray.config import SpecError
from augsbert_ray.data.readers import MISSING_FIELD
from augsbert_ray.data.rejects import Reject
from augsbert_ray.models import json_object

def model_kind(model: str) -> str:
    """``cross_encoder`` when the directory's config_sentence_transformers.json says CrossEncoder, else ``bi_encoder``.

    Args:
        model: a resolved model name: a local directory or a Hugging Face id.

    Example:
        ::

            kind = model_kind("runs/stsb-20261124/models/cross_encoder")  # "cross_encoder"
    """
    config = Path(model) / "config_sentence_transformers.json"
    if not config.is_file():
        return "bi_encoder"
    return "cross_encoder" if json_object(config, model).get("model_type") == "CrossEncoder" else "bi_encoder"


def saved_kind(model: str) -> str | None:
    """``model_kind`` where the directory is a sentence-transformers model; None for a plain transformers model,
    which loads as either (a bi-encoder with mean pooling, a cross-encoder with its head)."""
    return model_kind(model) if (Path(model) / "config_sentence_transformers.json").is_file() else None


def check_class_labels(rejects: list[Reject], rows_read: int) -> None:
    """Classification takes 0/1 labels: any other label value (a 0-1 score, NaN) is an error, not a reject,
    since a score file read as classes keeps only its exact 0s and 1s.

    Args:
        rejects: the rejects of the files read with task classification.
        rows_read: every row read, for the count in the message.

    Example:
        ::

            check_class_labels(gold.rejects, gold.rows_read)
    """
    bad = [reject for reject in rejects if reject.field == "label" and reject.reason != MISSING_FIELD]
    if bad:
        raise SpecError(
            f"--task classification needs 0/1 labels: {bad[0]} ({len(bad)} of {rows_read} rows); "
            "scores need --task regression"
        )
