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

from augsbert_ray.config import SpecError, is_text_type, path_problem
from augsbert_ray.data.formats import SUFFIXES, json_record_problem, read_schema, whole_block
from augsbert_ray.data.rejects import RECORD, Reject, bad_utf8

SCAN_CHUNK = 4 << 20  # bytes per step when finding CSV/JSONL record boundaries


@dataclass(frozen=True)
class Shard:
    """One unit of work and of output: a slice of one input file, labeled by one actor call."""

    name: str
    path: str
    fmt: str
    schema: pa.Schema  # of the input file, so every shard of a file reads the same types
    first_row: int  # 0-based index of the shard's first record in its file
    row_groups: tuple[int, ...] = ()  # parquet
    byte_range: tuple[int, int] = (0, 0)  # csv/jsonl: [start, end) at record boundaries
    header: bool = False  # csv: the byte range starts with the header line
    first_line: int = 1  # csv/jsonl: the 1-based line of the file at the byte range's start (for rejects)
    text_columns: tuple[str, ...] = ()  # jsonl: the sentence columns (a value of another type there is a reject)


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
        loop = next((problem for item in patterns if "loop" in (problem := path_problem(item) or "")), None)
        raise SpecError(f"--input {loop}" if loop else f"--input {pattern!r} matches no file (a directory: none with a suffix of {', '.join(SUFFIXES)})")
    for file in files:  # before: "RuntimeError: Symlink loop" from Path.resolve
        if problem := path_problem(file, "file"):
            raise SpecError(f"--input {problem}")
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


def record_ends(data: np.ndarray, csv: bool) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets just past each line's end, and just past each record's, in bytes that begin at a record
    boundary (a memory map of a file, or a shard's bytes), scanned SCAN_CHUNK bytes at a time: only the line and
    record ends are kept, so memory grows by 16 bytes a line. JSON Lines end lines at newlines. CSV, as arrow reads
    it, also at a CR that no newline follows, and a line end inside a quoted field does not end its record (a quote
    opens a field only at the field's start); a field still open at a chunk's end is carried into the next."""
    lines, records = [], []
    open_before: int | None = None  # CSV: where the quoted field open at the chunk's start opened
    offset = 0
    while offset < len(data):
        stop = min(offset + SCAN_CHUNK, len(data))
        while csv and stop < len(data) and data[stop] == 34:  # a run of quotes stays in one chunk
            stop += 1
        chunk = np.asarray(data[offset:stop])
        line_end = chunk == 10
        if csv:
            following = np.append(chunk[1:], data[stop] if stop < len(data) else 0)
            line_end |= (chunk == 13) & (following != 10)
        ends = np.flatnonzero(line_end) + offset + 1
        lines.append(ends)
        if csv:
            found = np.flatnonzero(chunk == 34)
            before = np.where(found > 0, chunk[found - 1], data[offset - 1] if offset else 10)
            at_field_start = np.isin(before, (10, 13, 44))  # after a line end or a comma
            opens, closes, open_before = _quoted_fields(found + offset, at_field_start, open_before, stop)
            field = np.searchsorted(opens, ends - 1, side="right") - 1
            inside = (field >= 0) & (ends - 1 < closes[np.maximum(field, 0)]) if len(opens) else np.zeros(len(ends), bool)
            records.append(ends[~inside])
        offset = stop
    line_ends = np.concatenate(lines) if lines else np.zeros(0, dtype=np.int64)
    ends_of_records = np.concatenate(records) if csv and records else line_ends
    if len(data):  # the end of the data ends its last line and record
        if len(line_ends) == 0 or line_ends[-1] != len(data):
            line_ends = np.append(line_ends, len(data))
        if len(ends_of_records) == 0 or ends_of_records[-1] != len(data):
            ends_of_records = np.append(ends_of_records, len(data))
    return line_ends, ends_of_records


def _quoted_fields(
    quotes: np.ndarray, at_field_start: np.ndarray, open_before: int | None, end: int
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """The [open, close] byte positions of the quoted fields that can hold a line end, from the positions of a
    chunk's quote characters, and where the field still open at ``end`` opened (None: none is). Adjacent quotes form
    a run, and a run of even length changes nothing (escaped quotes inside a field; an empty or a literal field
    outside). Of the odd runs, one that starts a field outside a quoted field opens one, and the next odd run closes
    it (the first closes ``open_before``'s field). That chain is followed by pointer doubling, without a Python loop."""
    run_starts = np.flatnonzero(np.diff(quotes, prepend=-2) != 1)
    run_lengths = np.diff(run_starts, append=len(quotes))
    odd = run_lengths % 2 == 1
    first, last = quotes[run_starts[odd]], quotes[run_starts[odd] + run_lengths[odd] - 1]
    count = len(first)
    if open_before is not None and count == 0:
        return np.array([open_before]), np.array([end]), open_before
    carried = int(open_before is not None)  # the first odd run closes the field open before the chunk
    starts_field = np.append(at_field_start[run_starts[odd]], True)  # a sentinel run past the end
    next_field_start = np.minimum.accumulate(np.where(starts_field, np.arange(count + 1), count)[::-1])[::-1]
    jump = np.append(next_field_start[np.minimum(np.arange(count) + 2, count)], count)  # open run -> the next open run
    is_open = np.zeros(count + 1, dtype=bool)
    is_open[next_field_start[carried]] = True
    while not is_open[count]:  # is_open marks the chain's first 2**k open runs, jump is the 2**k-th successor
        is_open[jump[is_open]] = True
        jump = jump[jump]
    opens = np.flatnonzero(is_open[:count])
    closes = np.append(last, end)[opens + 1]  # an open run without a close is open past the chunk
    still_open = int(first[opens[-1]]) if len(opens) and opens[-1] + 1 == count else None
    if carried:
        return np.append(open_before, first[opens]), np.append(last[0], closes), still_open
    return first[opens], closes, still_open


def _text_shards(file_index: int, path: str, fmt: str, schema: pa.Schema, shard_rows: int, text_columns: tuple[str, str]) -> list[Shard]:
    """Byte ranges of shard_rows records each (CSV: after the header line)."""
    size = Path(path).stat().st_size
    line_ends, ends = record_ends(np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8), csv=fmt == "csv")
    header = fmt == "csv"
    records = ends[1:] if header else ends
    shards, start, first = [], 0, 0
    for stop in range(shard_rows, len(records) + shard_rows, shard_rows):
        stop = min(stop, len(records))
        if stop <= first:
            break
        end = int(records[stop - 1])
        name = _shard_name(file_index, len(shards), path, size, (start, end))
        line = int(np.searchsorted(line_ends, start, side="right")) + 1
        shards.append(Shard(name, path, fmt, schema, first, byte_range=(start, end), header=header and start == 0, first_line=line,
                            text_columns=text_columns))
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
            shards += _text_shards(file_index, path, fmt, schema, shard_rows, text_columns)
    return shards


@dataclass(frozen=True)
class Window:
    """Rows of a shard read together, with the 1-based line where each row's record starts in its file (a Parquet
    row's number), and the records of the shard that could not be read, as rejects (on its first window)."""

    table: pa.Table
    lines: np.ndarray
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
    table, lines, rejects = _read_csv(shard, data) if shard.fmt == "csv" else _read_jsonl(shard, data)
    for offset in range(0, max(table.num_rows, 1), window):  # one window at least, to carry the rejects
        yield Window(table.slice(offset, window), lines[offset : offset + window], rejects if offset == 0 else [])


def _read_csv(shard: Shard, data: bytes) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """Records that are not UTF-8, or have the wrong number of fields, are rejected. Arrow numbers the records it
    reads from 1, the header included and blank lines not; each number is mapped to the line where its record starts."""
    header = int(shard.header)
    data, record_lines, not_utf8 = _utf8_records(shard, data)
    if len(record_lines) == header:  # every record rejected
        return shard.schema.empty_table(), np.zeros(0, dtype=np.int64), not_utf8
    rejects: list[Reject] = []

    def reject(row: pacsv.InvalidRow) -> str:
        reason = f"expected {row.expected_columns} fields, got {row.actual_columns}"
        rejects.append(Reject(shard.path, int(record_lines[row.number - 1]), RECORD, reason, row.text[:200]))
        return "skip"

    # one thread: only then does arrow know the record number of a bad record or value; one block for the shard:
    # a record longer than arrow's default block would stop it
    options = pacsv.ReadOptions(column_names=shard.schema.names, skip_rows=header, use_threads=False,
                                block_size=whole_block(len(data)))
    convert = pacsv.ConvertOptions(column_types=dict(zip(shard.schema.names, shard.schema.types)))
    try:
        table = pacsv.read_csv(io.BytesIO(data), read_options=options, parse_options=pacsv.ParseOptions(invalid_row_handler=reject),
                               convert_options=convert)
    except pa.ArrowInvalid as exc:
        raise _conversion_error(shard, str(exc), record_lines) from None
    if header + table.num_rows + len(rejects) != len(record_lines):
        raise SpecError(f"{shard.path}:{shard.first_line}: arrow read {header + table.num_rows + len(rejects)} CSV records "
                        f"from here to byte {shard.byte_range[1]}, where its lines hold {len(record_lines)}; check the quotes")
    rejected = {reject.line for reject in rejects}
    lines = np.array([line for line in record_lines[header:].tolist() if line not in rejected], dtype=np.int64)
    return table, lines, sorted(not_utf8 + rejects, key=lambda reject: reject.line)


def _utf8_records(shard: Shard, data: bytes) -> tuple[bytes, np.ndarray, list[Reject]]:
    """A CSV shard's bytes less its records that are not UTF-8 (rejected), and the line where each record arrow will
    read from them starts (blank ones it skips): arrow's record n is at n - 1."""
    line_ends, ends = record_ends(np.frombuffer(data, dtype=np.uint8), csv=True)
    starts = np.concatenate(([0], ends))[:-1].astype(np.int64)
    lines = shard.first_line + np.searchsorted(line_ends, starts, side="right")
    text, length = np.frombuffer(data + b"\0", dtype=np.uint8), ends - starts
    read = ~(((length == 1) & np.isin(text[starts], (10, 13))) | ((length == 2) & (text[starts] == 13) & (text[starts + 1] == 10)))
    rejects: list[Reject] = []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:  # rare: find the records at fault one by one
        kept = []
        for index, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            try:
                data[start:end].decode("utf-8")
                kept.append(data[start:end])
            except UnicodeDecodeError:
                read[index] = False
                rejects.append(bad_utf8(shard.path, int(lines[index]), data[start:end]))
        data = b"".join(kept)
    return data, lines[read], rejects


def _conversion_error(shard: Shard, message: str, record_lines: np.ndarray) -> SpecError:
    """A value arrow cannot convert: the line, the column, and where the column's type came from."""
    found = re.match(r"In CSV column #(\d+): Row #(\d+): (.*)", message.splitlines()[0])
    if found is None:
        return SpecError(f"{shard.path}:{shard.first_line}: cannot read the records from here on: {message.splitlines()[0]}")
    column = shard.schema.field(int(found[1]))
    source = "" if is_text_type(column.type) else f"; the column's type, {column.type}, was read from the file's first rows"
    return SpecError(f"{shard.path}:{record_lines[int(found[2]) - 1]} field {column.name!r}: {found[3]}{source}")


def _read_jsonl(shard: Shard, data: bytes) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """Each non-blank line is a record. When the shard does not parse at once, each line is parsed alone to
    reject the bad ones."""
    parse = pajson.ParseOptions(explicit_schema=shard.schema, unexpected_field_behavior="ignore")
    read = pajson.ReadOptions(block_size=whole_block(len(data)))  # one block: a line may be longer than arrow's default
    lines = [(shard.first_line + index, line) for index, line in enumerate(data.split(b"\n")) if line.strip()]
    try:
        table = pajson.read_json(io.BytesIO(data), read_options=read, parse_options=parse)
        table.validate(full=True)  # arrow's JSON reader takes text that is not UTF-8; the labeler's decoding would fail
        if table.num_rows == len(lines):  # else a line holds more than one object: found line by line below
            return table, np.array([number for number, _ in lines], dtype=np.int64), []
    except pa.ArrowInvalid:
        pass  # found line by line below
    good, rejects = [], []
    for number, line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            rejects.append(bad_utf8(shard.path, number, line))
            continue
        try:
            objects = pajson.read_json(io.BytesIO(line), read_options=read, parse_options=parse).num_rows
            if objects != 1:
                rejects.append(Reject(shard.path, number, RECORD, f"{objects} JSON objects on one line; JSON Lines has one per line",
                                      line[:200].decode("utf-8", errors="replace")))
                continue
            good.append((number, line))
        except pa.ArrowInvalid as exc:
            detail = re.sub(r"^JSON parse error: | in row \d+$", "", str(exc).splitlines()[0])
            column = re.search(r"Column\(/([^)]+)\)", detail)
            if json_record_problem(line, shard.text_columns) is None:  # a record: another column's value, not its sentences
                raise SpecError(f"{shard.path}:{number}{f' field {column[1]!r}' if column else ''}: {detail}; the types of the "
                                "columns beside the sentences come from the file's first MiB: give each column values of one "
                                "type (4.0, not 4, among decimals; text, not null, where text follows)")
            rejects.append(Reject(shard.path, number, column[1] if column else RECORD, f"invalid JSON record: {detail}",
                                  line[:200].decode("utf-8", errors="replace")))
    table = (pajson.read_json(io.BytesIO(b"\n".join(line for _, line in good)), read_options=read, parse_options=parse) if good
             else shard.schema.empty_table())
    return table, np.array([number for number, _ in good], dtype=np.int64), rejects
