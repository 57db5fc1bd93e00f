"""Internal: the sampling section (SamplingSpec) and its strategies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from augsbert_ray.config.base import Cpus, _Strict


Strategy = Literal["random", "kde", "bm25", "semantic", "bm25+semantic"]


class SamplingSpec(_Strict):
    strategies: list[Strategy] = Field(["bm25", "random"], min_length=1)
    top_k: int = Field(3, gt=0, description="Neighbours kept per sentence by BM25 and semantic search.")
    random_pairs: int | None = Field(
        None, gt=0, description="Random pairs to draw. Default: as many as BM25 makes (it is run to count them when it is not a strategy)."
    )
    kde_pool: int | None = Field(
        None, gt=0, description="Random pairs labeled for KDE selection. Default: 10x the random budget, capped by the pool."
    )
    kde_mode: Literal["paper", "exact"] = Field(
        "paper", description="paper: Q(s)=min(1, F_gold/F_silver); exact: Q scaled so kept scores follow F_gold."
    )
    kde_bins: int = Field(100, ge=10, multiple_of=10, description="Bins of the merged silver-score histogram behind F_silver.")
    semantic_model: str = Field(
        "gold", description="Bi-encoder for semantic search: 'gold' (SBERT trained on the gold pairs), or any model."
    )
    semantic_index: Literal["auto", "flat", "ivf", "hnsw"] = Field(
        "auto", description="faiss index; auto: exact flat below ann_threshold sentences, else HNSW."
    )
    ann_threshold: int = Field(100_000, gt=0)
    bm25_shard_size: int = Field(
        500_000, gt=0, description="Sentences per BM25 shard; larger corpora are searched by Ray tasks per shard."
    )
    search_cpus: Cpus = Field(1, description="CPUs per BM25/faiss search task.")

    @field_validator("strategies", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("strategies")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"strategies repeat: {value}")
        return value
