"""Seed optimization and top-k search on Ray Tune: cull at cull_at of the steps, resume the best."""

from augsbert_ray.tuning.search import Outcome, training_rows
from augsbert_ray.tuning.stage import SilverByK, strategy_of, tune_bi_encoder

__all__ = ["Outcome", "SilverByK", "strategy_of", "training_rows", "tune_bi_encoder"]
