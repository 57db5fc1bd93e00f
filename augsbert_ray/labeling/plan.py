"""Input checks and the shard plan: which rows of which file make each output shard.

Shards are cut from the input alone (Parquet row groups; record boundaries in CSV/JSONL), so a
rerun with the same input gets the same shard names and can skip the shards already written.
"""

from __future__ import annotations

import glob
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from augsbert_ray.config import SpecError

FORMATS = ("parquet", "csv", "jsonl")
SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
SCAN_CHUNK = 4 << 20  # bytes per step when finding CSV/JSONL record boundaries


@dataclass(frozen=True)
class Shard:
    """One unit of work and of output: a slice of one input file, labeled by one actor call."""

    name: str
    path: str
    fmt: str
    schema: pa.Schema  # of the input file, so every shard of a file reads the same types
    first_row: int  # 0-based index of the shard's first data row in its file (for rejects)
    row_groups: tuple[int, ...] = ()  # parquet
    byte_range: tuple[int, int] = (0, 0)  # csv/jsonl: [start, end) at record boundaries
    header: bool = False  # csv: the byte range starts with the header line


def expand_inputs(pattern: str | list[str]) -> list[str]:
    """A file, a glob, a directory (its files with a known suffix), or a list of those."""
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    files: list[str] = []
    for item in patterns:
        path = Path(item)
        if path.is_dir():
            files += sorted(str(p) for p in path.iterdir() if p.suffix in SUFFIXES and not p.name.startswith((".", "_")))
        else:
            files += sorted(glob.glob(item)) or ([item] if path.exists() else [])
    if not files:
        raise SpecError(f"--input {pattern!r} matches no file")
    return [str(Path(f).resolve()) for f in files]


def input_format(files: list[str], fmt: str | None) -> str:
    if fmt:
        if fmt not in FORMATS:
            raise SpecError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        return fmt
    suffix = Path(files[0]).suffix
    if suffix not in SUFFIXES:
        raise SpecError(f"{files[0]}: cannot tell the format from the suffix {suffix!r}; pass --format")
    return SUFFIXES[suffix]


def read_schema(path: str, fmt: str, text_columns: tuple[str, str]) -> pa.Schema:
    """The file's columns and types, read from its footer or its first block; text columns are strings."""
    try:
        if fmt == "parquet":
            schema = pq.read_schema(path)
        elif fmt == "csv":
            with pacsv.open_csv(path, convert_options=pacsv.ConvertOptions(column_types=_string_types(text_columns))) as reader:
                schema = reader.schema
        else:
            with open(path, "rb") as handle:
                head = handle.read(1 << 20)
            schema = pajson.read_json(io.BytesIO(head[: head.rfind(b"\n") + 1] or head)).schema
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise SpecError(f"{path}: cannot read as {fmt}: {str(exc).splitlines()[0]}") from None
    missing = [column for column in text_columns if column not in schema.names]
    if missing:
        raise SpecError(f"{path}: no column {', '.join(map(repr, missing))} (columns: {', '.join(schema.names)}); see --text-columns")
    for column in text_columns:
        index = schema.get_field_index(column)
        if not (pa.types.is_string(schema.field(index).type) or pa.types.is_large_string(schema.field(index).type) or pa.types.is_null(schema.field(index).type)):
            raise SpecError(f"{path}: column {column!r} holds {schema.field(index).type}, not text")
        schema = schema.set(index, pa.field(column, pa.string()))
    return schema


def _string_types(text_columns: tuple[str, str]) -> dict[str, pa.DataType]:
    return {column: pa.string() for column in text_columns}


def _shard_name(file_index: int, shard_index: int, path: str, size: int, span: object) -> str:
    """Named by the file's name, not its whole path: a run directory moved whole keeps its shard names."""
    digest = hashlib.sha1(f"{Path(path).name}|{size}|{span}".encode()).hexdigest()[:10]
    return f"part-{file_index:05d}-{shard_index:05d}-{digest}.parquet"


def _parquet_shards(file_index: int, path: str, schema: pa.Schema, shard_rows: int) -> list[Shard]:
    """Consecutive row groups up to ~shard_rows rows; a row group is never split."""
    metadata = pq.read_metadata(path)
    size = Path(path).stat().st_size
    shards, groups, rows, first = [], [], 0, 0
    for group in range(metadata.num_row_groups):
        groups.append(group)
        rows += metadata.row_group(group).num_rows
        if rows >= shard_rows or group == metadata.num_row_groups - 1:
            name = _shard_name(file_index, len(shards), path, size, tuple(groups))
            shards.append(Shard(name, path, "parquet", schema, first, row_groups=tuple(groups)))
            first += rows
            groups, rows = [], 0
    return shards


def record_ends(path: str, quoted: bool) -> np.ndarray:
    """Byte offsets just past each record's newline. In CSV a newline inside quotes is not a record end."""
    ends, offset, inside = [], 0, 0
    with open(path, "rb") as handle:
        while chunk := handle.read(SCAN_CHUNK):
            data = np.frombuffer(chunk, dtype=np.uint8)
            newline = data == 10
            if quoted:
                parity = (np.cumsum(data == 34, dtype=np.int64) + inside) % 2
                newline &= parity == 0
                inside = int(parity[-1])
            ends.append(np.flatnonzero(newline) + offset + 1)
            offset += len(chunk)
    result = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
    if offset and (len(result) == 0 or result[-1] != offset):
        result = np.append(result, offset)  # last record without a final newline
    return result


def _text_shards(file_index: int, path: str, fmt: str, schema: pa.Schema, shard_rows: int) -> list[Shard]:
    """Byte ranges of shard_rows records each (CSV: after the header line)."""
    ends = record_ends(path, quoted=fmt == "csv")
    size = Path(path).stat().st_size
    header = fmt == "csv"
    records = ends[1:] if header else ends
    shards, start, first = [], 0, 0
    for stop in range(shard_rows, len(records) + shard_rows, shard_rows):
        stop = min(stop, len(records))
        if stop <= first:
            break
        end = int(records[stop - 1])
        name = _shard_name(file_index, len(shards), path, size, (start, end))
        shards.append(Shard(name, path, fmt, schema, first, byte_range=(start, end), header=header and start == 0))
        start, first = end, stop
    return shards


def plan_shards(files: list[str], fmt: str, text_columns: tuple[str, str], shard_rows: int) -> list[Shard]:
    """Check every file (readable, has the text columns) and cut it into shards. Reads no data rows of Parquet."""
    shards: list[Shard] = []
    for file_index, path in enumerate(files):
        schema = read_schema(path, fmt, text_columns)
        if fmt == "parquet":
            shards += _parquet_shards(file_index, path, schema, shard_rows)
        else:
            shards += _text_shards(file_index, path, fmt, schema, shard_rows)
    return shards


def read_shard(shard: Shard, window: int):
    """Yield the shard's rows as Arrow tables of at most ``window`` rows, with the planned schema."""
    if shard.fmt == "parquet":
        parquet = pq.ParquetFile(shard.path)
        for batch in parquet.iter_batches(batch_size=window, row_groups=list(shard.row_groups)):
            yield pa.Table.from_batches([batch]).cast(shard.schema)
        return
    start, end = shard.byte_range
    with open(shard.path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    if shard.fmt == "csv":
        options = pacsv.ReadOptions(column_names=shard.schema.names, skip_rows=1 if shard.header else 0)
        convert = pacsv.ConvertOptions(column_types=dict(zip(shard.schema.names, shard.schema.types)))
        table = pacsv.read_csv(io.BytesIO(data), read_options=options, convert_options=convert)
    else:
        parse = pajson.ParseOptions(explicit_schema=shard.schema, unexpected_field_behavior="ignore")
        table = pajson.read_json(io.BytesIO(data), parse_options=parse)
    for offset in range(0, table.num_rows, window):
        yield table.slice(offset, window)

