"""Internal: the tuning section (TuningSpec) and the models and top_k values a search spans."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from augsbert_ray.config.base import Cpus, Gpus, _Strict
from augsbert_ray.config.sampling import SamplingSpec
from augsbert_ray.layout import bi_encoder_name


# Strategies whose candidates depend on sampling.top_k, so that tuning.top_k can vary it.
TOP_K_STRATEGIES = frozenset({"bm25", "semantic", "bm25+semantic"})


class TuningSpec(_Strict):
    """Seed optimization (and top-k search): every trial trains to cull_at, only the best keep go on."""

    seeds: int | list[int] = Field(5, description="A count (seeds seed, seed+1, ...) or an explicit list of seeds.")
    cull_at: float = Field(0.2, description="Fraction of the training steps after which all but the best trials stop.")
    keep: int = Field(1, gt=0, description="Trials that go on from their cull-point checkpoint to the end.")
    top_k: list[int] | None = Field(None, description="sampling.top_k values to search for BM25/semantic silver.")
    scheduler: Literal["sync", "asha"] = Field(
        "sync", description="sync: cull all trials at cull_at, the best go on; asha: Ray Tune's ASHAScheduler."
    )
    eval_every: float = Field(0.1, gt=0, le=1, description="Dev metrics every this fraction of the steps (plus cull point and end).")
    models: list[str] | None = Field(None, min_length=1, description="Bi-encoders to tune, e.g. [sbert]. Default: all the job trains.")
    cpus_per_trial: Cpus = Field(1, description="CPUs reserved by each trial, one process (for a tuned model, in "
                                  "place of training.cpus_per_worker).")
    # at most one: a trial trains in one process, where transformers would spread each batch over several GPUs
    # (DataParallel) and multiply the batch and the passes over the data by their number
    gpus_per_trial: Gpus = Field(0, le=1, description="GPUs reserved by each trial, one process, at most one GPU (for a "
                                  "tuned model, in place of training.use_gpu).")
    max_concurrent_trials: int | None = Field(None, gt=0, description="Default: as many as the cluster's CPUs and GPUs hold at once (cpus_per_trial, gpus_per_trial).")

    @field_validator("seeds")
    @classmethod
    def _some_seeds(cls, seeds: int | list[int]) -> int | list[int]:
        if isinstance(seeds, int) and seeds < 1:
            raise ValueError(f"needs at least one seed, got a count of {seeds}")
        if isinstance(seeds, list) and not seeds:
            raise ValueError("the seed list is empty; give at least one seed or a count")
        if isinstance(seeds, list) and len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds repeat: {seeds}")
        if isinstance(seeds, list) and min(seeds) < 0:
            raise ValueError("seeds must be >= 0 (numpy's and torch's generators take no negative seed)")
        return seeds

    @field_validator("cull_at")
    @classmethod
    def _inside_training(cls, cull_at: float) -> float:
        if not 0 < cull_at < 1:
            raise ValueError("cull_at must lie strictly between 0 and 1 (a fraction of the training steps)")
        return cull_at

    @field_validator("top_k")
    @classmethod
    def _positive_unique(cls, top_k: list[int] | None) -> list[int] | None:
        if top_k is not None and (not top_k or any(k < 1 for k in top_k) or len(set(top_k)) != len(top_k)):
            raise ValueError(f"top_k must be a non-empty list of distinct positive integers, got {top_k}")
        return top_k

    def seed_list(self, base_seed: int) -> list[int]:
        return list(range(base_seed, base_seed + self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


def bi_encoder_names(sampling: SamplingSpec) -> list[str]:
    return ["sbert", *(bi_encoder_name(strategy) for strategy in sampling.strategies)]


def tuned_models(tuning: TuningSpec | None, sampling: SamplingSpec) -> list[str]:
    if tuning is None:
        return []
    return list(tuning.models) if tuning.models is not None else bi_encoder_names(sampling)


def tuning_top_ks(tuning: TuningSpec | None, sampling: SamplingSpec, model: str) -> list[int | None]:
    """The top_k values a tuned model's trials span: the list for top-k strategies, else one (None)."""
    strategy = {bi_encoder_name(s): s for s in sampling.strategies}.get(model)
    if tuning is not None and tuning.top_k and strategy in TOP_K_STRATEGIES:
        return list(tuning.top_k)
    return [None]
