"""Scoring sentence pairs, one interface for every model kind (``PairScorer``): a bi-encoder's cosine, a
cross-encoder's output, a teacher's mapped and combined score, and word Jaccard. The teacher (``Teacher``) that
labels silver pairs is defined here too, since its scorer is one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from augsbert_ray.config import SpecError
from augsbert_ray.models import model_outputs
from augsbert_ray.scoring.base import PairScorer
from augsbert_ray.scoring.bi_encoder import BiEncoderScorer
from augsbert_ray.scoring.cross_encoder import CrossEncoderScorer
from augsbert_ray.scoring.jaccard import JaccardScorer, jaccard_scores
from augsbert_ray.scoring.teacher import TEACHER_FILE, Teacher, TeacherMember, TeacherScorer, single_output_error

ScorerKind = Literal["bi_encoder", "cross_encoder", "teacher", "jaccard"]


def scorer_for(kind: ScorerKind, model: str | None = None, threads: int = 1, gpu: bool = False, batch_size: int = 64) -> PairScorer:
    """The scorer of a model kind, loaded once, at fp32 with torch (as evaluation scores).

    Args:
        kind: ``bi_encoder``, ``cross_encoder``, ``teacher`` (``model``: its teacher.json) or ``jaccard``.
        model: The model directory, Hugging Face id or teacher.json; None for ``jaccard``.
        threads: Torch threads.
        gpu: Score on this process's GPU.
        batch_size: Pairs (or sentences) per model call.

    Returns:
        A ``PairScorer``.

    Example:
        >>> scorer_for("jaccard").score(["A cat sat."], ["a cat ran"])
        array([0.5])
    """
    if kind == "jaccard":
        return JaccardScorer()
    settings: dict[str, Any] = {"batch_size": batch_size, "threads": threads, "gpu": gpu}
    if kind == "teacher":
        return TeacherScorer(Teacher.load(Path(str(model))), **settings, runtime="torch")
    if kind == "cross_encoder":
        if (outputs := model_outputs(str(model))) != 1:
            raise SpecError(single_output_error(str(model), outputs))
        return CrossEncoderScorer(str(model), **settings, runtime="torch")
    return BiEncoderScorer(str(model), **settings)


__all__ = [
    "TEACHER_FILE", "BiEncoderScorer", "CrossEncoderScorer", "JaccardScorer", "PairScorer", "ScorerKind", "Teacher",
    "TeacherMember", "TeacherScorer", "jaccard_scores", "scorer_for", "single_output_error",
]
