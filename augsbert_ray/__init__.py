"""augsbert-ray: Augmented SBERT on Ray. A cross-encoder teacher labels sampled pairs (silver) on a Ray Data actor
pool, KDE selection matches the silver scores to gold, and a fast bi-encoder learns from gold + silver on Ray Train;
Ray Tune runs seed optimization.

The public API is the names in ``__all__``; everything else is internal and may change.

Example:
    >>> import augsbert_ray as ar
    >>> spec = ar.load_spec("jobs/stsb_indomain_bm25.yaml", {"data.train_limit": 500})
    >>> spec.data.train_limit, spec.sampling.strategies
    (500, ['bm25'])
"""

from augsbert_ray.config import JobSpec, LabelingSpec, SpecError, load_spec
from augsbert_ray.evaluation import Evaluation
from augsbert_ray.labeling import LabelResult, Teacher, label
from augsbert_ray.pipeline import FitRecord, RunResult, resume_spec, run, tune

# -- added by the cli split --
from augsbert_ray.config import RESUME_SETTABLE, ray_address
from augsbert_ray.evaluation import UnusableScores
from augsbert_ray.evaluation.model_evaluation import evaluate
from augsbert_ray.labeling.engine import LabelerFailure
from augsbert_ray.labeling.from_files import label_files, label_sentences
from augsbert_ray.models import MODEL_ALIASES, ModelPartsError, resolve_model
from augsbert_ray.runtime import cluster_address, setup_logging
from augsbert_ray.submission import job_logs, job_status, submit_job

__all__ = [
    "Evaluation", "FitRecord", "JobSpec", "LabelResult", "LabelingSpec", "RunResult", "SpecError", "Teacher",
    "label", "load_spec", "resume_spec", "run", "tune",
    # added by the cli split
    "MODEL_ALIASES", "RESUME_SETTABLE", "LabelerFailure", "ModelPartsError", "UnusableScores", "cluster_address", "evaluate",
    "job_logs", "job_status", "label_files", "label_sentences", "ray_address", "resolve_model", "setup_logging", "submit_job",
]
