"""Internal: the data and target sections (DataSpec, SourceSpec, TargetSpec) and their types."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from augsbert_ray.config.base import _Strict
from augsbert_ray.config.errors import path_problem

if TYPE_CHECKING:
    import pyarrow as pa


TaskType = Literal["regression", "classification"]
FileFormat = Literal["csv", "tsv", "jsonl", "parquet", "stsb", "mrpc", "bws"]
# The one suffix -> format map: gold files (SourceSpec) and label inputs (data.formats) both read it.
SUFFIX_FORMATS: dict[str, FileFormat] = {
    ".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
}
NamedDataset = Literal["stsb", "mrpc", "bws"]


def is_text_type(dtype: pa.DataType) -> bool:
    """An Arrow type that holds sentences: strings, or nulls only (every row then a counted reject)."""
    import pyarrow as pa

    if pa.types.is_dictionary(dtype):  # e.g. a pandas category column saved to Parquet
        return is_text_type(dtype.value_type)
    return (pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype)
            or pa.types.is_null(dtype))


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
        if problem := path_problem(path, "file"):
            raise ValueError(problem)
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
        if path is not None and (problem := path_problem(path, "file")):
            raise ValueError(problem)
        return path

    @model_validator(mode="after")
    def _has_unlabeled_text(self) -> "TargetSpec":
        if self.candidates == "pairs" and self.sentences is not None:
            raise ValueError("'sentences' are recombined into pairs: set candidates: sentences")
        if not self.data.has_train and self.sentences is None:
            raise ValueError("the target needs unlabeled text: a 'data.train' split (or named dataset), or 'sentences'")
        return self
