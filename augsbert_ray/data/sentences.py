"""Unlabeled sentence lists: the raw text that candidate pairs are recombined from."""

from __future__ import annotations

from pathlib import Path

from augsbert_ray.config import SpecError
from augsbert_ray.data.formats import input_format, read_schema


def read_sentences(path: Path, what: str = "--sentences") -> list[str]:
    """One sentence per line (.txt), or the `sentence` column of a csv/jsonl/parquet file; blank ones skipped.
    ``what`` names the option or field in error messages.

    Args:
        path: The file; a .txt or suffix-less file is read as lines, else the format comes from the suffix.
        what: The option or spec field that named the file, for SpecError messages (a missing file, fewer than
            two distinct sentences).

    Returns:
        The sentences stripped, in file order, repeats kept.

    Example:
        ::

            pool = SentencePool(read_sentences(Path("target_sentences.txt"), "target.sentences"))
    """
    if not path.is_file():
        raise SpecError(f"{what} {path}: no such file")
    if path.suffix in (".txt", ""):
        sentences = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    else:
        import pyarrow.csv as pacsv
        import pyarrow.json as pajson
        import pyarrow.parquet as pq


        fmt = input_format([str(path)], None)
        read_schema(str(path), fmt, ("sentence", "sentence"))
        reader = {"parquet": pq.read_table, "csv": pacsv.read_csv, "jsonl": pajson.read_json}[fmt]
        sentences = [s.strip() for s in reader(str(path)).column("sentence").to_pylist() if s]
    sentences = [s for s in sentences if s]
    if len(set(sentences)) < 2:
        raise SpecError(f"{what} {path}: needs at least two distinct non-empty sentences")
    return sentences
