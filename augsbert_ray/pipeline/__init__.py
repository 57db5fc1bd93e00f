"""The run's pipeline: one declared list of steps per scenario (in-domain, domain transfer, tuning), run in a
run directory that can be resumed, returning a typed ``RunResult``.

Besides ``run`` and ``tune``, the steps that the experiments in bench/ take one at a time: gold read into a run
directory, the teacher's fits and calibration, a student's plain fit, and how a finished run's spec compares."""

from augsbert_ray.pipeline.context import FitRecord, RunContext
from augsbert_ray.pipeline.fingerprint import comparable_spec, describe, flatten
from augsbert_ray.pipeline.gold import Gold, read_gold
from augsbert_ray.pipeline.jobs import run, tune
from augsbert_ray.pipeline.result import RunResult
from augsbert_ray.pipeline.resume import resume_spec
from augsbert_ray.pipeline.students import PlainFit, train_bi_encoder
from augsbert_ray.pipeline.teacher import calibrate_teacher, train_cross_encoder, train_teacher, train_teacher_bi_encoder

__all__ = [
    "FitRecord", "Gold", "PlainFit", "RunContext", "RunResult", "calibrate_teacher", "comparable_spec", "describe",
    "flatten", "read_gold", "resume_spec", "run", "train_bi_encoder", "train_cross_encoder", "train_teacher",
    "train_teacher_bi_encoder", "tune",
]
