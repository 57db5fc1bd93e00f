"""Readers for gold pairs: generic csv/tsv/jsonl/parquet with a column map, plus STSb, MRPC and BWS.

Every data row either becomes a pair or a ``Reject`` naming file, line and field, so that
``rows_read == len(table) + len(rejects)`` always holds. Gold sets are small (thousands of
pairs), so they are read line by line on the driver; big unlabeled inputs go through Ray Data.
"""

from __future__ import annotations

import csv
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from augsbert_ray.config import ColumnMap, FileFormat, SourceSpec, TaskType
from augsbert_ray.data.formats import json_record
from augsbert_ray.data.rejects import EMPTY, NUL, RECORD, Reject, bad_utf8, is_blank

MISSING_FIELD = "missing field"  # the reason of a reject whose field is absent or blank
DEFAULT_SCORE_RANGE: dict[str, tuple[float, float]] = {"stsb": (0.0, 5.0)}
# Named formats: how their columns map onto the pair fields.
_BWS_COLUMNS = ColumnMap(sentence1="sentence_1", sentence2="sentence_2", label="regression_label", topic="topic")
_MRPC_COLUMNS = ColumnMap(sentence1="#1 String", sentence2="#2 String", label="Quality")
_STSB_FIELDS = {"label": 4, "sentence1": 5, "sentence2": 6}


@dataclass
class ReadResult:
    table: pa.Table
    rows_read: int
    rejects: list[Reject] = field(default_factory=list)


@dataclass
class _RawRow:
    line: int
    values: dict[str, Any]
    text: str = ""


def _column_keys(columns: ColumnMap) -> dict[str, str]:
    """Pair field -> source column; topic only when mapped."""
    keys = {"sentence1": columns.sentence1, "sentence2": columns.sentence2, "label": columns.label}
    if columns.topic:
        keys["topic"] = columns.topic
    return keys


def _decoded_lines(path: Path) -> Iterator[tuple[int, str | None, bytes]]:
    """(line number, text or None when not UTF-8, raw bytes) for each line; BOM and CR stripped."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            raw = raw.rstrip(b"\r\n")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield number, raw.decode("utf-8"), raw
            except UnicodeDecodeError:
                yield number, None, raw


def _record_lines(path: Path) -> Iterator[tuple[int, str] | Reject]:
    """(line number, text) of each non-empty line of a one-record-per-line file, or its reject: not UTF-8, or a CR
    inside it (CR-only line ends would make the whole file one record)."""
    for number, text, raw in _decoded_lines(path):
        if text is None:
            yield bad_utf8(path, number, raw)
        elif "\r" in text:
            yield Reject(str(path), number, RECORD, "a CR (\\r) inside the line: CR-only line ends? save the file with LF or "
                         "CRLF line ends", text[:200])
        elif text:
            yield number, text


def _delimited_rows(path: Path, delimiter: str, quoting: int, columns: ColumnMap) -> Iterator[_RawRow | Reject]:
    """Rows of a delimited file with a header, mapped through ``columns``; quoted fields may span lines. A record
    the csv module cannot parse (strict: a quote never closed, or closed by a stray quote that a delimiter does not
    follow, or a field past its limit) is rejected at its first line, and the lines it took after it are read again
    as records, so that it swallows none. (A stray quote followed by a delimiter closes a valid field: no parser
    tells it from a quoted sentence spanning lines.)"""
    good_lines: list[int] = []
    texts: list[str] = []
    again: deque[tuple[int, str]] = deque()  # lines an unclosed quote took, read again before the file's next

    decoded = _decoded_lines(path)

    def text_lines() -> Iterator[str]:
        while True:
            if again:
                number, text = again.popleft()
            else:
                number, text, raw = next(decoded, (0, None, None))
                if raw is None:
                    return
                if text is None:
                    pending_rejects.append(bad_utf8(path, number, raw))
                    continue
            good_lines.append(number)
            texts.append(text)
            yield text + "\n"  # the line end back: a quoted field spanning lines keeps its newline

    def read_again(start: int) -> bool:
        """Queue the lines that the failed record read from line index ``start`` took after its first to be read
        again, by a new reader (the old one may have met the file's end); whether it took any."""
        nonlocal reader
        taken = texts[start:]
        if len(taken) < 2:
            return False
        again.extendleft(reversed(list(zip(good_lines[start + 1 :], taken[1:]))))
        reader = csv.reader(text_lines(), delimiter=delimiter, quoting=quoting, strict=True)
        return True

    pending_rejects: list[Reject] = []
    reader = csv.reader(text_lines(), delimiter=delimiter, quoting=quoting, strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:  # e.g. CR-only line ends (old Mac exports) or UTF-16 text
        raise ValueError(f"{path}:1: cannot read the header: {exc} (save the file as UTF-8 with LF or CRLF line ends)") from None
    if pending_rejects:  # the header line itself is not UTF-8: a later line would pass for it
        raise ValueError(f"{path}:{pending_rejects[0].line}: the header is not UTF-8 (UTF-16?); save the file as UTF-8")
    if header is None:
        return
    wanted = _column_keys(columns)
    index = {name: i for i, name in enumerate(header)}
    absent = [column for column in wanted.values() if column not in index]
    if absent:
        raise ValueError(f"{path}:1: header has no column {', '.join(map(repr, absent))} (header: {header})")
    repeated = [column for column in wanted.values() if header.count(column) > 1]
    if repeated:
        raise ValueError(f"{path}:1: column {repeated[0]!r} appears {header.count(repeated[0])} times in the header")
    while True:
        start = len(good_lines)
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a quote left open (a field past the csv module's limit, the file's end), or a stray one
            yield from pending_rejects
            pending_rejects.clear()
            line = good_lines[start] if start < len(good_lines) else good_lines[-1] if good_lines else 0
            last = good_lines[-1] if good_lines else 0
            text = texts[start][:200] if start < len(texts) else ""
            took = f" (a quote opened here took lines {line}-{last} as one record; they are read again)" if read_again(start) else ""
            yield Reject(str(path), line, RECORD, f"unparseable: {exc}{took}", text)
            continue
        yield from pending_rejects
        pending_rejects.clear()
        if not cells:
            continue  # a blank line is not a data row
        line = good_lines[start] if start < len(good_lines) else good_lines[-1]
        if len(cells) > len(header):  # e.g. an unquoted delimiter inside a sentence: its fields would shift
            yield Reject(str(path), line, RECORD, f"expected {len(header)} fields, got {len(cells)}", delimiter.join(cells)[:200])
            continue
        values = {key: cells[index[column]] if index[column] < len(cells) else None for key, column in wanted.items()}
        yield _RawRow(line, values, delimiter.join(cells)[:200])
    yield from pending_rejects  # bad lines after the last record


def _stsb_rows(path: Path) -> Iterator[_RawRow | Reject]:
    """STSb: no header; genre, file, year, id, score, sentence1, sentence2[, extra source fields]."""
    for line in _record_lines(path):
        if isinstance(line, Reject):
            yield line
            continue
        number, text = line
        cells = text.split("\t")
        yield _RawRow(number, {key: cells[i] if i < len(cells) else None for key, i in _STSB_FIELDS.items()}, text[:200])


def _jsonl_rows(path: Path, columns: ColumnMap) -> Iterator[_RawRow | Reject]:
    keys = _column_keys(columns)
    for line in _record_lines(path):
        if isinstance(line, Reject):
            yield line
            continue
        number, text = line
        record, problem = json_record(text, ())  # a sentence that is not text is rejected later, naming its field
        if record is None:
            yield Reject(str(path), number, RECORD, problem.removeprefix(": "), text[:200])
            continue
        yield _RawRow(number, {key: record.get(column) for key, column in keys.items()}, text[:200])


def _parquet_rows(path: Path, columns: ColumnMap) -> Iterator[_RawRow | Reject]:
    """Parquet has no lines: the row number (1-based) stands in for one."""
    table = pq.read_table(path)
    keys = _column_keys(columns)
    absent = [column for column in keys.values() if column not in table.column_names]
    if absent:
        raise ValueError(f"{path}: no column {', '.join(map(repr, absent))} (columns: {table.column_names})")
    data = {key: table.column(column).to_pylist() for key, column in keys.items()}
    for row in range(table.num_rows):
        yield _RawRow(row + 1, {key: values[row] for key, values in data.items()})


def raw_rows(source: SourceSpec) -> Iterator[_RawRow | Reject]:
    fmt: FileFormat = source.format  # type: ignore[assignment]
    if fmt == "stsb":
        return _stsb_rows(source.path)
    if fmt == "mrpc":
        return _delimited_rows(source.path, "\t", csv.QUOTE_NONE, _MRPC_COLUMNS)
    if fmt == "bws":
        return _delimited_rows(source.path, ",", csv.QUOTE_MINIMAL, _BWS_COLUMNS)
    if fmt == "csv":
        return _delimited_rows(source.path, ",", csv.QUOTE_MINIMAL, source.columns)
    if fmt == "tsv":
        return _delimited_rows(source.path, "\t", csv.QUOTE_NONE, source.columns)
    if fmt == "jsonl":
        return _jsonl_rows(source.path, source.columns)
    return _parquet_rows(source.path, source.columns)


def _is_text(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (a lone surrogate cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_label(value: Any, task: TaskType, score_range: tuple[float, float]) -> tuple[float | int | None, str]:
    """(label, "") or (None, reason)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, MISSING_FIELD
    if task == "classification":
        text = str(value).strip().lower()
        mapping = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "false": 0, "true": 1}
        if text not in mapping:
            return None, f"bad label {value!r}: expected 0 or 1"
        return mapping[text], ""
    if isinstance(value, bool):  # float(True) is 1.0: a yes/no column is not a similarity score
        return None, f"boolean score {value!r}: a regression label is a number"
    if isinstance(value, str) and "_" in value:  # float("0_5") is 5.0: Python's digit separator, not a number in data
        return None, f"non-numeric score {value!r}"[:200]
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None, f"non-numeric score {value!r}"[:200]
    except OverflowError:  # a JSON integer past a float's range
        return None, f"non-finite score {str(value)[:40]}..."
    low, high = score_range
    if not math.isfinite(score):
        return None, f"non-finite score {value!r}"
    if not low <= score <= high:
        return None, f"score {value!r} outside [{low:g}, {high:g}]"
    return (score - low) / (high - low), ""


def validate_rows(
    rows: Iterable[_RawRow | Reject], path: Path, task: TaskType, score_range: tuple[float, float]
) -> ReadResult:
    columns: dict[str, list[Any]] = {"sentence1": [], "sentence2": [], "label": [], "topic": []}
    rejects: list[Reject] = []
    rows_read = 0
    for row in rows:
        rows_read += 1
        if isinstance(row, Reject):
            rejects.append(row)
            continue
        problem: Reject | None = None
        for key in ("sentence1", "sentence2"):
            value = row.values.get(key)
            if value is None:
                problem = Reject(str(path), row.line, key, MISSING_FIELD, row.text)
            elif not isinstance(value, str):  # a JSON number or object, a Parquet int
                problem = Reject(str(path), row.line, key, f"not text: {value!r}"[:200], row.text)
            elif is_blank(value):
                problem = Reject(str(path), row.line, key, EMPTY, row.text)
            elif "\x00" in value:  # before: kept, and stored as "\x00"
                problem = Reject(str(path), row.line, key, NUL, row.text.replace("\x00", "\\x00"))
            elif not _is_text(value):  # a JSON escape of half a surrogate pair, "\ud800": no text can hold it
                problem = Reject(str(path), row.line, key, "not valid text (a lone surrogate)",
                                 row.text.encode("utf-8", "replace").decode())
            if problem:
                break
        if problem is None:
            label, reason = _parse_label(row.values.get("label"), task, score_range)
            if label is None:
                problem = Reject(str(path), row.line, "label", reason, row.text)
        topic = row.values.get("topic")
        if problem is None and "topic" in row.values and (topic is None or is_blank(str(topic))):  # a mapped topic splits
            problem = Reject(str(path), row.line, "topic", MISSING_FIELD, row.text)
        if problem is not None:
            rejects.append(problem)
            continue
        columns["sentence1"].append(row.values["sentence1"].strip())
        columns["sentence2"].append(row.values["sentence2"].strip())
        columns["label"].append(label)
        columns["topic"].append(None if topic is None else str(topic).strip())  # a JSON or Parquet topic may be a number
    table = pa.table(
        {
            "sentence1": pa.array(columns["sentence1"], pa.string()),
            "sentence2": pa.array(columns["sentence2"], pa.string()),
            "label": pa.array(columns["label"], pa.int64() if task == "classification" else pa.float64()),
            "topic": pa.array(columns["topic"], pa.string()),
        }
    )
    return ReadResult(table, rows_read, rejects)


def read_pairs(source: SourceSpec, task: TaskType) -> ReadResult:
    """Read one gold file into a pair table (sentence1, sentence2, label, topic) plus its rejects.

    Args:
        source: The file, its format (default: from the suffix), its columns and its score range.
        task: ``regression`` scales labels into [0, 1]; ``classification`` needs labels 0 or 1.

    Returns:
        The accepted rows as a table, each rejected row (file, line, field, reason) and the rows read.

    Example:
        ::

            read = read_pairs(SourceSpec(path="../shared/data/stsb/sts-dev.csv", format="stsb"), "regression")
            read.table.num_rows, len(read.rejects)  # (1500, 0)
    """
    score_range = source.score_range or DEFAULT_SCORE_RANGE.get(source.format or "", (0.0, 1.0))
    return validate_rows(raw_rows(source), source.path, task, score_range)
