"""Internal: the evaluation section (EvaluationSpec)."""

from __future__ import annotations

from pydantic import Field

from augsbert_ray.config.base import Cpus, Gpus, _Strict
from augsbert_ray.config.training import DEFAULT_MODEL


class EvaluationSpec(_Strict):
    zero_shot_model: str = DEFAULT_MODEL
    cpus: Cpus = 1
    gpus: Gpus = 0
    teacher_bi_encoder: bool = Field(
        False, description="Also fine-tune teacher.bi_encoder on the gold (in transfer: source) train split and score it "
        "when the teacher has no bi-encoder: what fine-tuning that larger model alone gives, the comparison a user "
        "weighs AugSBERT against. A bi-encoder or ensemble teacher fits and scores it anyway."
    )
