"""augsbert-ray: Augmented SBERT on Ray. A cross-encoder teacher labels sampled pairs (silver) on a Ray Data actor
pool, KDE selection matches the silver scores to gold, and a fast bi-encoder learns from gold + silver on Ray Train;
Ray Tune runs seed optimization.

The public API is the names in ``__all__``; everything else is internal and may change.

Example:
    >>> import augsbert_ray as ar
    >>> spec = ar.load_spec("jobs/stsb_indomain_bm25.yaml", {"data.train_limit": 500})
    >>> spec.data.train_limit, spec.sampling.strategies
    (500, ['bm25', 'random'])
"""

# job specs and runs
from augsbert_ray.config import RESUME_SETTABLE, JobSpec, LabelingSpec, SpecError, load_spec, ray_address
from augsbert_ray.pipeline import FitRecord, RunResult, resume_spec, run, tune

# labeling
from augsbert_ray.labeling import LabelResult, Teacher, label
from augsbert_ray.labeling.engine import LabelerFailure
from augsbert_ray.labeling.from_files import label_files, label_sentences

# evaluation
from augsbert_ray.evaluation import Evaluation, UnusableScores
from augsbert_ray.evaluation.model_evaluation import evaluate

# models
from augsbert_ray.models import ModelPartsError, model_aliases, resolve_model

# clusters and the console
from augsbert_ray.runtime import cluster_address, setup_logging
from augsbert_ray.submission import job_logs, job_status, submit_job

__all__ = [
    # job specs and runs
    "JobSpec", "RESUME_SETTABLE", "SpecError", "load_spec", "resume_spec", "run", "tune", "RunResult", "FitRecord",
    # labeling
    "Teacher", "LabelingSpec", "label", "label_files", "label_sentences", "LabelResult", "LabelerFailure",
    # evaluation
    "evaluate", "Evaluation", "UnusableScores",
    # models
    "model_aliases", "resolve_model", "ModelPartsError",
    # clusters and the console
    "cluster_address", "ray_address", "submit_job", "job_status", "job_logs", "setup_logging",
]
