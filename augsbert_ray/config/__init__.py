"""The job spec: typed, validated, loaded from YAML, every field defaulted.

Errors name the field by its dotted path (``data.train.path``), so a user can find it
in the YAML at once.

Import from here: the submodules (one per spec section, the YAML loading, the shared pieces) are internal.
"""

from __future__ import annotations

from augsbert_ray.config.cluster import RaySpec, ray_address
from augsbert_ray.config.data import SUFFIX_FORMATS, ColumnMap, DataSpec, FileFormat, NamedDataset, SourceSpec, TargetSpec, TaskType, is_text_type
from augsbert_ray.config.errors import SpecError, check_output_dir, name_problem, path_problem
from augsbert_ray.config.evaluation import EvaluationSpec
from augsbert_ray.config.job import RESUME_SETTABLE, JobSpec
from augsbert_ray.config.labeling import LabelingSpec
from augsbert_ray.config.loading import dump_spec, load_spec
from augsbert_ray.config.retrieval import RetrievalFilesSpec, RetrievalSpec, RetrievalSplitFiles
from augsbert_ray.config.sampling import SamplingSpec, Strategy
from augsbert_ray.config.training import DEFAULT_MODEL, BiEncoderSpec, CalibrationMap, CrossEncoderSpec, EncoderSpec, TeacherBiEncoderSpec, TeacherKind, TeacherSpec, TrainingSpec
from augsbert_ray.config.tuning import TOP_K_STRATEGIES, TuningSpec

__all__ = [
    "DEFAULT_MODEL", "RESUME_SETTABLE", "SUFFIX_FORMATS", "TOP_K_STRATEGIES", "BiEncoderSpec", "CalibrationMap",
    "ColumnMap", "CrossEncoderSpec", "DataSpec", "EncoderSpec", "EvaluationSpec", "FileFormat", "JobSpec",
    "LabelingSpec", "NamedDataset", "RaySpec", "RetrievalFilesSpec", "RetrievalSpec",
    "RetrievalSplitFiles", "SamplingSpec", "SourceSpec", "SpecError", "Strategy", "TargetSpec",
    "TaskType", "TeacherBiEncoderSpec", "TeacherKind", "TeacherSpec", "TrainingSpec", "TuningSpec",
    "check_output_dir", "dump_spec", "is_text_type", "load_spec", "name_problem", "path_problem", "ray_address",
]
