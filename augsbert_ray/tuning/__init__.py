"""Seed optimization and top-k search on Ray Tune: cull at cull_at of the steps, resume the best."""

from augsbert_ray.tuning.search import record, run_phase, search, trial_config
from augsbert_ray.tuning.stage import SilverByK, strategy_of, tune_bi_encoder
from augsbert_ray.tuning.trial_loop import cull_step
from augsbert_ray.tuning.trials import Outcome, SearchSetup, plan_trials, training_rows

__all__ = ["Outcome", "SearchSetup", "SilverByK", "cull_step", "plan_trials", "record", "run_phase", "search", "strategy_of", "training_rows",
           "trial_config", "tune_bi_encoder"]
