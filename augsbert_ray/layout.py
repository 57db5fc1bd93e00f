"""A run directory's layout and its models' names, in one place.

    RUN_DIR/
        spec.yaml  .fingerprint.json  progress.json  rejects.jsonl  target_rejects.jsonl
        gold/{train,dev,test}.parquet    target/{train,dev,test}.parquet  (domain transfer)
        candidates/<strategy>.parquet    silver/<strategy>/  silver/kde_pool/  silver/_onnx/  tuning_silver/top_k<k>/
        models/<name>/  models/teacher.json    ray_train/<name>/  ray_tune/
        metrics.json  report.md  score_density.png  tuning.md  tuning.json
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Each finished fit is recorded here, so that a resumed run reuses it instead of fitting again.
PROGRESS_FILE = "progress.json"
SPEC_FILE = "spec.yaml"
METRICS_FILE = "metrics.json"
REPORT_FILE = "report.md"
# (parquet file, column that holds the training target)
TrainFile = tuple[str, str]


def bi_encoder_name(strategy: str) -> str:
    """The model name a strategy's AugSBERT bi-encoder gets in models/ and metrics.json: augsbert_rs, augsbert_bm25, ..."""
    return "augsbert_" + {"random": "rs", "semantic": "ss", "bm25+semantic": "bm25_ss"}.get(strategy, strategy)


def silver_files(directory: Path) -> list[TrainFile]:
    """The parquet files of a silver set, as training files of its teacher's scores."""
    return [(str(path), "score") for path in sorted(directory.glob("*.parquet"))]


@dataclass(frozen=True)
class RunLayout:
    """The paths inside one run directory.

    Args:
        root: The run directory.

    Example:
        >>> RunLayout(Path("runs/stsb-20261125-101500")).model("sbert")
        PosixPath('runs/stsb-20261125-101500/models/sbert')
    """

    root: Path

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def ray_train(self) -> Path:
        return self.root / "ray_train"

    @property
    def ray_tune(self) -> Path:
        return self.root / "ray_tune"

    @property
    def progress(self) -> Path:
        return self.root / PROGRESS_FILE

    def model(self, name: str) -> Path:
        return self.models / name

    def split(self, folder: str, split: str) -> Path:
        """gold/ or target/ ``split``.parquet."""
        return self.root / folder / f"{split}.parquet"

    def train_file(self, folder: str = "gold") -> TrainFile:
        return (str(self.split(folder, "train")), "label")

    def rejects(self, prefix: str = "") -> Path:
        return self.root / f"{prefix}rejects.jsonl"

    def candidates(self, strategy: str) -> Path:
        return self.root / "candidates" / f"{strategy}.parquet"

    def labeled(self, strategy: str) -> Path:
        """The teacher's labels of a strategy's candidates; KDE's whole pool, before selection."""
        return self.root / "silver" / (f"{strategy}_pool" if strategy == "kde" else strategy)

    def selected(self, strategy: str) -> Path:
        return self.root / "silver" / strategy

    @property
    def onnx_cache(self) -> Path:
        """The teacher's ONNX export, made once for every strategy's labeling."""
        return self.root / "silver" / "_onnx"

    def tuning_silver(self, top_k: int) -> RunLayout:
        """The silver sets of one tuning.top_k value, each laid out as a run's own."""
        return RunLayout(self.root / "tuning_silver" / f"top_k{top_k}")
