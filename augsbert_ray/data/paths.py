"""Where named datasets live, and which files make each one."""

from __future__ import annotations

import os
from pathlib import Path

from augsbert_ray.config import NamedDataset, path_problem

DATA_DIR_ENV = "AUGSBERT_DATA_DIR"
DOWNLOAD_HINT = (
    "get the files from their sources and lay them out as <data-dir>/stsb/sts-{train,dev,test}.csv "
    "(STS Benchmark, stsbenchmark.tar.gz), <data-dir>/mrpc/msr_paraphrase_{train,test}.txt (Microsoft "
    "Research Paraphrase Corpus) and <data-dir>/bws/BWS_corpus.csv (UKP BWS Argument Similarity corpus); "
    "then pass --data-dir or set AUGSBERT_DATA_DIR"
)

# File names inside <data-dir>/<dataset>/ for each split that the dataset ships.
NAMED_FILES: dict[str, dict[str, str]] = {
    "stsb": {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"},
    "mrpc": {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"},
    "bws": {"all": "BWS_corpus.csv"},
}


class DataNotFoundError(FileNotFoundError):
    pass


def resolve_data_dir(explicit: str | Path | None = None) -> Path:
    """--data-dir, else $AUGSBERT_DATA_DIR, else ../shared/data when it exists.

    The first one given is used, made absolute; when it is not a directory, DataNotFoundError says where to get the
    datasets (there is no falling back to the next).

    Args:
        explicit: ``--data-dir`` or ``data.data_dir``; default None: $AUGSBERT_DATA_DIR, else ../shared/data beside
            the working directory.

    Example:
        ::

            resolve_data_dir("../shared/data") / "stsb"  # PosixPath('/home/me/shared/data/stsb')
    """
    if explicit is not None:
        origin, path = "--data-dir / data.data_dir", Path(explicit)
    elif os.environ.get(DATA_DIR_ENV):
        origin, path = DATA_DIR_ENV, Path(os.environ[DATA_DIR_ENV])
    else:
        origin, path = "default ../shared/data", Path.cwd().parent / "shared" / "data"
    if problem := path_problem(path, "dir"):
        if "not found" in problem:
            raise DataNotFoundError(f"data directory {path} (from {origin}) does not exist: {DOWNLOAD_HINT}")
        raise DataNotFoundError(f"data directory {path} (from {origin}): {problem}")
    return path.resolve()


def named_dataset_files(dataset: NamedDataset, data_dir: Path) -> dict[str, Path]:
    files = {split: data_dir / dataset / name for split, name in NAMED_FILES[dataset].items()}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise DataNotFoundError(f"dataset {dataset!r} is missing {', '.join(missing)}: {DOWNLOAD_HINT}")
    return files
