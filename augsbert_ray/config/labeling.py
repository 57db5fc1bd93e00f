"""Internal: the labeling section (LabelingSpec)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from augsbert_ray.config.base import Cpus, Gpus, _Strict


class LabelingSpec(_Strict):
    """How pairs are labeled: batch size, the autoscaling actor pool (min/max actors, CPUs and GPUs each), precision,
    runtime, truncation and shard size. Inconsistent settings (fp16 without GPUs, int8 on torch) are refused.

    Example:
        >>> LabelingSpec(max_actors=4, gpus_per_actor=1, precision="bf16").runtime
        'auto'
    """

    batch_size: int = Field(64, gt=0)
    min_actors: int = Field(1, gt=0)
    max_actors: int = Field(1, gt=0)
    cpus_per_actor: Cpus = 1
    gpus_per_actor: Gpus = 0
    threads_per_actor: int | None = Field(None, gt=0, description="torch threads per actor (on a GPU, tokenizer threads); default cpus_per_actor.")
    precision: Literal["fp32", "bf16", "fp16", "int8"] = Field(
        "fp32", description="fp32; bf16/fp16: half-precision weights on torch (fp16 on GPU only); int8: ONNX Runtime dynamic quantization on CPU, smoothed (SmoothQuant) on the input's first 256 pairs."
    )
    runtime: Literal["auto", "torch", "onnx"] = Field(
        "auto", description="auto: ONNX Runtime on CPU actors for fp32/int8 (1.7-1.9 times torch's speed measured there), torch on GPU."
    )
    max_seq_length: int | None = Field(None, gt=0, description="Tokens per pair; longer pairs are truncated and counted. Default: the model's.")
    shard_rows: int = Field(50_000, gt=0, description="Pairs per output shard, the unit of resume (Parquet row groups are never split).")
    require_better_teacher: bool = Field(
        False, description="Stop before labeling when the teacher does not beat SBERT (gold only) on dev; else only warn."
    )

    @model_validator(mode="after")
    def _consistent(self) -> "LabelingSpec":
        """Every check that needs no running Ray, in one place; `augsbert label` words them with its flags."""
        gpu = self.gpus_per_actor > 0
        problems = [
            (self.min_actors > self.max_actors, f"min_actors ({self.min_actors}) exceeds max_actors ({self.max_actors})"),
            (self.runtime == "onnx" and self.precision in ("bf16", "fp16"),
             f"precision {self.precision} runs on torch: use runtime torch or auto"),
            (self.runtime == "torch" and self.precision == "int8", "precision int8 runs on ONNX Runtime: use runtime onnx or auto"),
            (self.precision == "fp16" and not gpu, "precision fp16 needs GPU actors: set gpus_per_actor (bf16 also runs on CPU)"),
            (self.precision == "int8" and gpu, "precision int8 is the CPU path; with gpus_per_actor use bf16 or fp16"),
            (self.runtime == "onnx" and gpu, "runtime onnx runs on CPU actors; with gpus_per_actor use runtime torch or auto"),
        ]
        for failed, message in problems:
            if failed:
                raise ValueError(message)
        return self

    @property
    def bf16_on_cpu(self) -> bool:
        return self.precision == "bf16" and self.gpus_per_actor == 0
