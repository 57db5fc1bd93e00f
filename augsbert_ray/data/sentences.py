"""Unlabeled sentence lists: the raw text that candidate pairs are recombined from."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from augsbert_ray.config import SpecError, path_problem
from augsbert_ray.data.formats import input_format, json_record_problem, read_schema, whole_block
from augsbert_ray.data.rejects import is_blank

SENTENCE = "sentence"


def read_sentences(path: Path, what: str = "--sentences") -> list[str]:
    """One sentence per line (.txt), or the `sentence` column of a csv/jsonl/parquet file, read as text whatever
    its values look like; blank ones (no visible character) skipped. A malformed record stops the read with a
    SpecError naming its file and line. ``what`` names the option or field in error messages.

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
    if problem := path_problem(path, "file"):
        raise SpecError(f"{what} {path}: {'no such file' if 'not found' in problem else problem}")
    if path.suffix in (".txt", ""):
        sentences = _text_lines(path, what)
    else:
        fmt = input_format([str(path)], None)
        read_schema(str(path), fmt, (SENTENCE, SENTENCE))  # the column is there and holds text
        if fmt == "parquet":
            column = pq.read_table(path, columns=[SENTENCE]).column(SENTENCE)
        else:
            column = (_csv_sentences if fmt == "csv" else _jsonl_sentences)(path, what)
        try:
            sentences = [s.strip() for s in column.to_pylist() if s]
        except UnicodeDecodeError:  # arrow's JSON reader keeps bytes that are not UTF-8 until they are read as text
            raise not_utf8(path, what) from None
    sentences = [s for s in sentences if not is_blank(s)]
    if len(set(sentences)) < 2:
        raise SpecError(f"{what} {path}: needs at least two distinct non-empty sentences")
    return sentences


def _text_lines(path: Path, what: str) -> list[str]:
    """A .txt file's lines, stripped: split at line ends only (str.splitlines also splits at U+2028, U+0085 and form
    feeds inside a sentence), without a UTF-8 BOM (it would keep the first sentence from matching its gold pair)."""
    try:
        return [line.strip() for line in path.read_bytes().removeprefix(b"\xef\xbb\xbf").decode("utf-8").split("\n")]
    except UnicodeDecodeError:
        raise not_utf8(path, what) from None


def not_utf8(path: Path, what: str) -> SpecError:
    """The error for a sentence file that is not UTF-8, naming its first such line."""
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return SpecError(f"{what} {path}:{number}: not UTF-8; save the file as UTF-8")
    return SpecError(f"{what} {path}: not UTF-8; save the file as UTF-8")


def _csv_sentences(path: Path, what: str) -> pa.ChunkedArray:
    """The column as text, whatever its values look like; a record with the wrong number of fields stops the read
    with its line number."""
    invalid: list[pacsv.InvalidRow] = []

    def refuse(row: pacsv.InvalidRow) -> str:  # an exception raised here would not reach the caller
        invalid.append(row)
        return "error"

    try:
        # one thread: line numbers; one block: a record may be longer than arrow's default
        return pacsv.read_csv(path, read_options=pacsv.ReadOptions(use_threads=False, block_size=whole_block(path.stat().st_size)),
                              parse_options=pacsv.ParseOptions(invalid_row_handler=refuse),
                              convert_options=pacsv.ConvertOptions(column_types={SENTENCE: pa.string()}, include_columns=[SENTENCE])
                              ).column(SENTENCE)
    except pa.ArrowInvalid as exc:
        if invalid:
            row = invalid[0]
            raise SpecError(f"{what} {path}:{row.number}: expected {row.expected_columns} fields, got {row.actual_columns}") from None
        raise SpecError(f"{what} {path}: cannot read as csv: {str(exc).splitlines()[0]}") from None


def _jsonl_sentences(path: Path, what: str) -> pa.ChunkedArray:
    """The column as text; a line that is not a JSON object with a text (or absent) sentence stops the read with
    its line number."""
    options = pajson.ParseOptions(explicit_schema=pa.schema([(SENTENCE, pa.string())]), unexpected_field_behavior="ignore")
    try:
        return pajson.read_json(path, read_options=pajson.ReadOptions(block_size=whole_block(path.stat().st_size)),
                                parse_options=options).column(SENTENCE)
    except pa.ArrowInvalid as exc:
        with path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip() and (problem := json_record_problem(line, (SENTENCE,))):
                    raise SpecError(f"{what} {path}:{number}{problem}") from None
        raise SpecError(f"{what} {path}: cannot read as jsonl: {str(exc).splitlines()[0]}") from None

