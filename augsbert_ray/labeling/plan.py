"""Input checks and the shard plan: which rows of which file make each output shard.

Shards are cut from the input alone (Parquet row groups; record boundaries in CSV/JSONL), so a
rerun with the same input gets the same shard names and can skip the shards already written.
"""

from __future__ import annotations

import glob
import hashlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from augsbert_ray.config import SpecError, is_text_type
from augsbert_ray.data.formats import SUFFIXES, read_schema
from augsbert_ray.data.rejects import Reject

SCAN_CHUNK = 4 << 20  # bytes per step when finding CSV/JSONL record boundaries
RECORD = "(line)"  # the field of a reject for a record that could not be read at all


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
        raise SpecError(f"--input {pattern!r} matches no file (a directory: none with a suffix of {', '.join(SUFFIXES)})")
    return [str(Path(f).resolve()) for f in files]


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


@dataclass(frozen=True)
class Window:
    """Rows of a shard read together, with each row's 1-based record number in its file (a CSV header not
    counted), and the records of the shard that could not be read, as rejects (on its first window)."""

    table: pa.Table
    records: np.ndarray
    rejects: list[Reject] = field(default_factory=list)


def read_shard(shard: Shard, window: int) -> Iterator[Window]:
    """Yield the shard's rows as windows of at most ``window`` rows, with the planned schema. A malformed
    record becomes a reject; a value that cannot take its column's type stops the shard with a SpecError."""
    if shard.fmt == "parquet":
        parquet = pq.ParquetFile(shard.path)
        first = shard.first_row + 1
        for batch in parquet.iter_batches(batch_size=window, row_groups=list(shard.row_groups)):
            yield Window(pa.Table.from_batches([batch]).cast(shard.schema), np.arange(first, first + batch.num_rows))
            first += batch.num_rows
        return
    start, end = shard.byte_range
    with open(shard.path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    table, records, rejects = _read_csv(shard, data) if shard.fmt == "csv" else _read_jsonl(shard, data)
    for offset in range(0, max(table.num_rows, 1), window):  # one window at least, to carry the rejects
        yield Window(table.slice(offset, window), records[offset : offset + window], rejects if offset == 0 else [])


def _read_csv(shard: Shard, data: bytes) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """Records with the wrong number of fields are rejected; arrow numbers records from the header, if any."""
    header = int(shard.header)
    rejects: list[Reject] = []

    def reject(row: pacsv.InvalidRow) -> str:
        reason = f"expected {row.expected_columns} fields, got {row.actual_columns}"
        rejects.append(Reject(shard.path, shard.first_row + row.number - header, RECORD, reason, row.text[:200]))
        return "skip"

    # one thread: only then does arrow know the record number of a bad record or value
    options = pacsv.ReadOptions(column_names=shard.schema.names, skip_rows=header, use_threads=False)
    convert = pacsv.ConvertOptions(column_types=dict(zip(shard.schema.names, shard.schema.types)))
    try:
        table = pacsv.read_csv(io.BytesIO(data), read_options=options, parse_options=pacsv.ParseOptions(invalid_row_handler=reject),
                               convert_options=convert)
    except pa.ArrowInvalid as exc:
        raise _conversion_error(shard, str(exc), header) from None
    first = shard.first_row + 1
    records = np.setdiff1d(np.arange(first, first + table.num_rows + len(rejects)), [r.line for r in rejects])
    return table, records, rejects


def _conversion_error(shard: Shard, message: str, header: int) -> SpecError:
    """A value arrow cannot convert: the record, the column, and where the column's type came from."""
    found = re.match(r"In CSV column #(\d+): Row #(\d+): (.*)", message.splitlines()[0])
    if found is None:
        return SpecError(f"{shard.path}: cannot read the records after record {shard.first_row}: {message.splitlines()[0]}")
    column = shard.schema.field(int(found[1]))
    source = "" if is_text_type(column.type) else f"; the column's type, {column.type}, was read from the file's first rows"
    return SpecError(f"{shard.path}:{shard.first_row + int(found[2]) - header} field {column.name!r}: {found[3]}{source}")


def _read_jsonl(shard: Shard, data: bytes) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """Each non-blank line is a record. When the shard does not parse at once, each line is parsed alone to
    reject the bad ones."""
    parse = pajson.ParseOptions(explicit_schema=shard.schema, unexpected_field_behavior="ignore")
    lines = [(shard.first_row + index + 1, line) for index, line in enumerate(data.split(b"\n")) if line.strip()]
    try:
        table = pajson.read_json(io.BytesIO(data), parse_options=parse)
        table.validate(full=True)  # arrow's JSON reader takes text that is not UTF-8; the labeler's decoding would fail
        return table, np.array([number for number, _ in lines], dtype=np.int64), []
    except pa.ArrowInvalid:
        pass  # found line by line below
    good, rejects = [], []
    for number, line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            rejects.append(Reject(shard.path, number, RECORD, "bad UTF-8", line[:200].decode("utf-8", errors="replace")))
            continue
        try:
            pajson.read_json(io.BytesIO(line), parse_options=parse)
            good.append((number, line))
        except pa.ArrowInvalid as exc:
            detail = re.sub(r"^JSON parse error: | in row \d+$", "", str(exc).splitlines()[0])
            column = re.search(r"Column\(/([^)]+)\)", detail)
            rejects.append(Reject(shard.path, number, column[1] if column else RECORD, f"invalid JSON record: {detail}",
                                  line[:200].decode("utf-8", errors="replace")))
    table = pajson.read_json(io.BytesIO(b"\n".join(line for _, line in good)), parse_options=parse) if good else shard.schema.empty_table()
    return table, np.array([number for number, _ in good], dtype=np.int64), rejects
