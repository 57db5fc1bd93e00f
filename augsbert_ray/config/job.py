"""Internal: the whole job spec (JobSpec), its checks across sections, and what a resume may change."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from augsbert_ray.config.base import _Strict
from augsbert_ray.config.cluster import RaySpec
from augsbert_ray.config.data import DataSpec, TargetSpec, TaskType
from augsbert_ray.config.errors import NAME_MAX
from augsbert_ray.config.evaluation import EvaluationSpec
from augsbert_ray.config.labeling import LabelingSpec
from augsbert_ray.config.retrieval import RetrievalSpec
from augsbert_ray.config.sampling import SamplingSpec
from augsbert_ray.config.training import BiEncoderSpec, CrossEncoderSpec, TeacherSpec, TrainingSpec
from augsbert_ray.config.tuning import TOP_K_STRATEGIES, TuningSpec, bi_encoder_names, tuned_models, tuning_top_ks


# Settings that say only how a fit survives failures or what resources work gets, not what a run computes:
# a resumed run may change them (--resume --set, or a job spec edited since the first attempt).
RESUME_SETTABLE: dict[str, tuple[str, ...]] = {
    "training": ("checkpoint_every", "max_failures"),
    "labeling": ("min_actors", "max_actors", "cpus_per_actor", "gpus_per_actor", "threads_per_actor"),
    "evaluation": ("cpus", "gpus"),
    "tuning": ("cpus_per_trial", "gpus_per_trial", "max_concurrent_trials"),
}

# A run directory is <name>-YYYYmmdd-HHMMSS, -N added where that exists: the name leaves room for those.
NAME_BYTES = NAME_MAX - len("-20261207-141504-99")
NAME_UNSAFE = '<>:"|?*'  # reserved in Windows file names, and read by shells


class JobSpec(_Strict):
    """A whole job: its scenario, data, teacher, student, sampling, labeling, training, tuning, evaluation and Ray
    settings, each section a typed model with every field defaulted (README, "Job spec"). ``load_spec`` reads one
    from YAML.

    Example:
        >>> spec = JobSpec.model_validate({"name": "mine", "sampling": {"strategies": ["bm25", "kde"]}})
        >>> spec.scenario, spec.tuned_models()
        ('in-domain', [])
    """

    name: str = "augsbert"
    scenario: Literal["in-domain", "domain-transfer", "retrieval"] = Field(
        "in-domain", description="in-domain: gold + silver of one dataset; domain-transfer: source gold, target silver; "
        "retrieval: a corpus, few gold queries and many unlabeled ones (the 'retrieval' section)."
    )
    output_dir: Path = Path("runs")
    seed: int = Field(42, ge=0)
    data: DataSpec = DataSpec()
    teacher: TeacherSpec = TeacherSpec()
    cross_encoder: CrossEncoderSpec = CrossEncoderSpec()
    bi_encoder: BiEncoderSpec = BiEncoderSpec()
    sampling: SamplingSpec = SamplingSpec()
    labeling: LabelingSpec = LabelingSpec()
    training: TrainingSpec = TrainingSpec()
    evaluation: EvaluationSpec = EvaluationSpec()
    ray: RaySpec = RaySpec()
    tuning: TuningSpec | None = Field(None, description="Seed optimization for the bi-encoder fits; off when absent.")
    target: TargetSpec | None = Field(None, description="The target domain; used (and required) by domain-transfer.")
    retrieval: RetrievalSpec | None = Field(None, description="The corpus, queries and rankers; used (and required) by retrieval.")

    @field_validator("name")
    @classmethod
    def _stays_in_output_dir(cls, name: str) -> str:
        # The run directory is output_dir/<name>-<stamp>: a separator or '..' would put it elsewhere.
        if not name.strip():
            raise ValueError("is empty; it names the run directory output_dir/<name>-<stamp>")
        if any(part in name for part in ("/", "\\", "..")):
            raise ValueError("must not contain '/', '\\' or '..': the run directory output_dir/<name>-<stamp> must stay in output_dir")
        if len(name.encode()) > NAME_BYTES:  # before: OSError "File name too long" once Ray had started
            raise ValueError(f"is {len(name.encode())} bytes long; at most {NAME_BYTES}, as the run directory "
                             f"<name>-<stamp> must fit a file name ({NAME_MAX} bytes)")
        if bad := sorted({char for char in name if char in NAME_UNSAFE or unicodedata.category(char) in ("Cc", "Cf")}):
            raise ValueError(f"holds {', '.join(repr(char) for char in bad)}: a run directory's name takes no control "
                             f"characters nor any of {' '.join(NAME_UNSAFE)}")
        return name

    @model_validator(mode="after")
    def _scenario_fits(self) -> "JobSpec":
        if not self.data.has_train:
            raise ValueError("data: the gold (or, for domain-transfer, source) data needs a 'train' split")
        if self.scenario != "domain-transfer" and self.target is not None:
            raise ValueError("'target' is for scenario: domain-transfer")
        if self.scenario != "retrieval" and self.retrieval is not None:
            raise ValueError("'retrieval' is for scenario: retrieval")
        if self.scenario == "retrieval":
            self._retrieval_fits()
        if self.scenario == "domain-transfer":
            if self.target is None:
                raise ValueError("scenario: domain-transfer needs a 'target' section")
            if self.tuning is not None:
                raise ValueError("tuning runs in the in-domain scenario only")
            if "kde" in self.sampling.strategies and self.target.candidates == "sentences":
                raise ValueError("sampling.strategies: kde matches the gold score distribution, which a transfer target lacks")
        if self.tuning is not None and self.training.use_gpu and self.tuning.gpus_per_trial == 0:
            raise ValueError("training.use_gpu: a tuned model's fits take their resources from tuning.cpus_per_trial and "
                             "tuning.gpus_per_trial, which is 0: set tuning.gpus_per_trial too")
        if self.teacher.kind != "cross-encoder":
            if self.labeling.precision == "int8":
                raise ValueError(f"labeling.precision int8 quantizes cross-encoders only; teacher.kind {self.teacher.kind} has a bi-encoder")
            if self.labeling.runtime == "onnx":
                raise ValueError(f"labeling.runtime onnx runs cross-encoders only; teacher.kind {self.teacher.kind} has a bi-encoder")
        return self

    def _retrieval_fits(self) -> None:
        if self.retrieval is None:
            raise ValueError("scenario: retrieval needs a 'retrieval' section (e.g. retrieval: {source: arguana, task: premise})")
        if self.tuning is not None:
            raise ValueError("tuning runs in the in-domain scenario only")
        if self.teacher.kind != "cross-encoder":
            raise ValueError(f"teacher.kind {self.teacher.kind}: the retrieval scenario's teacher is a cross-encoder re-ranker")

    @model_validator(mode="after")
    def _failures_by_where_it_runs(self) -> "JobSpec":
        # On a cluster a node can go away mid-fit, and a retry goes on (from the last training state with
        # training.checkpoint_every); on one machine a worker failure is mostly a bug a retry repeats.
        if self.training.max_failures is None:
            self.training.max_failures = 1 if self.ray.address else 0
        return self

    @property
    def task(self) -> TaskType:
        return self.data.resolved_task

    @property
    def evaluation_task(self) -> TaskType:
        """The task models are scored on: the target's in domain transfer."""
        return self.target.data.resolved_task if self.scenario == "domain-transfer" and self.target else self.task

    def bi_encoder_names(self) -> list[str]:
        return bi_encoder_names(self.sampling)

    def tuned_models(self) -> list[str]:
        return tuned_models(self.tuning, self.sampling)

    @property
    def compares_teacher_bi_encoder(self) -> bool:
        """teacher.bi_encoder is fitted only to be scored, beside a teacher without it (evaluation.teacher_bi_encoder)."""
        return self.evaluation.teacher_bi_encoder and "bi_encoder" not in self.teacher.member_kinds

    def tuning_top_ks(self, model: str) -> list[int | None]:
        return tuning_top_ks(self.tuning, self.sampling, model)

    @field_validator("tuning")
    @classmethod
    def _tuning_fits_job(cls, tuning: TuningSpec | None, info: ValidationInfo) -> TuningSpec | None:
        sampling = info.data.get("sampling")
        if tuning is None or sampling is None or "seed" not in info.data:
            return tuning
        known = bi_encoder_names(sampling)
        unknown = [name for name in tuned_models(tuning, sampling) if name not in known]
        if unknown:
            raise ValueError(f"models {unknown} are not among the bi-encoders this job trains ({', '.join(known)})")
        if tuning.top_k and all(tuning_top_ks(tuning, sampling, model) == [None] for model in tuned_models(tuning, sampling)):
            raise ValueError(f"top_k {tuning.top_k} is searched for models sampled by {', '.join(sorted(TOP_K_STRATEGIES))}, "
                             f"and none of the tuned ones is ({', '.join(tuned_models(tuning, sampling))})")
        seeds = len(tuning.seed_list(info.data["seed"]))
        for model in tuned_models(tuning, sampling):
            trials = seeds * len(tuning_top_ks(tuning, sampling, model))
            if tuning.keep > trials:
                raise ValueError(f"keep ({tuning.keep}) exceeds the number of trials of {model} ({trials})")
        return tuning
