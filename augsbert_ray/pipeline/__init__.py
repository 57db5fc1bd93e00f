"""The run's pipeline: one declared list of steps per scenario (in-domain, domain transfer, tuning), run in a
run directory that can be resumed, returning a typed ``RunResult``."""

from augsbert_ray.pipeline.context import FitRecord, RunContext
from augsbert_ray.pipeline.jobs import run, tune
from augsbert_ray.pipeline.result import RunResult
from augsbert_ray.pipeline.resume import resume_spec

__all__ = ["FitRecord", "RunContext", "RunResult", "resume_spec", "run", "tune"]
