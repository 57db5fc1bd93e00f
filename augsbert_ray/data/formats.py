"""Pair and sentence files by format (Parquet, CSV, JSONL): the format from a suffix, and the schema with its
text columns checked."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from augsbert_ray.config import SUFFIX_FORMATS, SpecError, is_text_type

# what `augsbert label` and sentence files read (gold files also take tsv and the named formats)
FORMATS = ("parquet", "csv", "jsonl")
SUFFIXES = {suffix: fmt for suffix, fmt in SUFFIX_FORMATS.items() if fmt in FORMATS}
ARROW_BLOCK = 1 << 20  # arrow's default block; also the bytes of a CSV or JSONL file whose records give its column types


def input_format(files: list[str], fmt: str | None) -> str:
    if fmt:
        if fmt not in FORMATS:
            raise SpecError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        return fmt
    by_format: dict[str, str] = {}
    for file in files:
        suffix = Path(file).suffix
        if suffix in SUFFIX_FORMATS and suffix not in SUFFIXES:  # a gold-data format, e.g. .tsv
            raise SpecError(f"{file}: {SUFFIX_FORMATS[suffix]} is not read here, only {', '.join(FORMATS)}; convert the file")
        if suffix not in SUFFIXES:
            raise SpecError(f"{file}: cannot tell the format from the suffix {suffix!r}; pass --format")
        by_format.setdefault(SUFFIXES[suffix], file)
    if len(by_format) > 1:
        raise SpecError("the inputs mix formats (" + ", ".join(f"{fmt}: {file}" for fmt, file in by_format.items())
                        + "); give files of one format")
    return next(iter(by_format))


def read_schema(path: str, fmt: str, text_columns: tuple[str, str]) -> pa.Schema:
    """The file's columns and types, read from its footer or its first block; text columns are strings."""
    try:
        if fmt == "parquet":
            schema = pq.read_schema(path)
        elif fmt == "csv":
            schema = _csv_schema(path, text_columns)
        else:
            schema = _jsonl_schema(path, text_columns)
    except SpecError:
        raise
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise SpecError(f"{path}: cannot read as {fmt}: {str(exc).splitlines()[0]}") from None
    missing = [column for column in text_columns if column not in schema.names]
    if missing:
        raise SpecError(f"{path}: no column {', '.join(map(repr, missing))} (columns: {', '.join(schema.names)}); see --text-columns")
    repeated = [column for column in schema.names if schema.names.count(column) > 1]  # any column: the output keeps them all
    if repeated:
        raise SpecError(f"{path}: column {repeated[0]!r} appears {schema.names.count(repeated[0])} times")
    for column in text_columns:
        index = schema.get_field_index(column)
        if not is_text_type(schema.field(index).type):
            raise SpecError(f"{path}: column {column!r} holds {schema.field(index).type}, not text")
        schema = schema.set(index, pa.field(column, pa.string()))
    return schema


def whole_block(size: int) -> int:
    """An arrow block size that holds ``size`` bytes: arrow's readers stop at a record longer than their block."""
    return min(max(ARROW_BLOCK, size), 2**31 - 1)


def _jsonl_schema(path: str, text_columns: tuple[str, str]) -> pa.Schema:
    """The types arrow infers from the first MiB of well-formed lines (a malformed one is rejected by read_shard,
    with its line number); a first record may be longer than that."""
    records, size, first_problem = [], 0, None
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not records and first_problem is None and line.lstrip().startswith(b"["):
                raise SpecError(f"{path}: a JSON array; jsonl is JSON Lines, one object per line")
            if not line.strip():
                continue
            problem = json_record_problem(line, text_columns)
            if problem is None:
                records.append(line)
                size += len(line)
                if size >= ARROW_BLOCK:
                    break
            elif first_problem is None:
                first_problem = f"{path}:{number}{problem}"
    if not records:
        raise SpecError(f"{first_problem}; no line of the file is a record" if first_problem else f"{path}: an empty file, no record")
    data = b"".join(records)
    return pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(block_size=whole_block(len(data)))).schema


def _csv_schema(path: str, text_columns: tuple[str, str]) -> pa.Schema:
    """The columns of the header, with the types arrow infers from the first block. A record that is malformed or not
    UTF-8 is not the file's fault as a whole: read_shard rejects it, and here it is skipped or read with U+FFFD."""
    with open(path, "rb") as handle:
        head = handle.read(2 * ARROW_BLOCK)
    try:
        head.split(b"\n", 1)[0].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}:1: the header is not UTF-8 ({exc.reason}); save the file as UTF-8") from None
    skip = pacsv.ParseOptions(invalid_row_handler=lambda row: "skip")
    convert = pacsv.ConvertOptions(column_types=string_types(text_columns))
    text = io.BytesIO(head.decode("utf-8", errors="replace").encode())  # a first block of U+FFFD, not an error
    with pacsv.open_csv(text, read_options=pacsv.ReadOptions(block_size=ARROW_BLOCK), parse_options=skip, convert_options=convert) as reader:
        return reader.schema


def json_record(line: str | bytes, text_columns: tuple[str, ...]) -> tuple[dict[str, Any], None] | tuple[None, str]:
    """The record a JSON Lines line holds, if it is an object whose text columns, where present, hold text; else
    what keeps it from being one, as the end of an error message (``": not a JSON object"``)."""
    try:
        record = json.loads(line)
    except ValueError as exc:  # invalid JSON or UTF-8
        return None, f": invalid JSON: {exc}"
    if not isinstance(record, dict):
        return None, ": not a JSON object"
    wrong = next((column for column in text_columns if not isinstance(record.get(column, ""), (str, type(None)))), None)
    return (None, f" field {wrong!r}: not text: {record[wrong]!r}") if wrong else (record, None)


def json_record_problem(line: str | bytes, text_columns: tuple[str, ...]) -> str | None:
    """What keeps a JSON Lines line from being a record (see ``json_record``); None if nothing."""
    return json_record(line, text_columns)[1]


def string_types(text_columns: tuple[str, str]) -> dict[str, pa.DataType]:
    return {column: pa.string() for column in text_columns}
