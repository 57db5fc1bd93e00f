"""Readers for retrieval data: a corpus or queries as JSONL or Parquet, qrels as BEIR's TSV, and BEIR's folder
layout (corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv) read as is.

A record that cannot be used (no id, empty text, a qrels line naming a query or doc that is not there) is a
counted ``Reject`` naming file, line and field; a file that cannot be used as a whole (no id column, a doc id
given twice) stops the read with a one-line SpecError naming file, line and field. Parquet has no lines: the row
number (1-based) stands in for one, as in ``readers``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from augsbert_ray.config import SpecError
from augsbert_ray.data.formats import json_record
from augsbert_ray.data.readers import MISSING_FIELD, _is_text, _record_lines
from augsbert_ray.data.rejects import RECORD, Reject, is_blank
from augsbert_ray.data.retrieval import Qrels, RetrievalCorpus, RetrievalQueries, RetrievalRead, RetrievalSet

ID_FIELDS = ("_id", "id")  # BEIR's name first
QRELS_HEADER = ("query-id", "corpus-id", "score")
BEIR_FILES = "corpus.jsonl, queries.jsonl, qrels/{train,dev,test}.tsv"
EMPTY_TEXT = "empty text"


def _records(path: Path, wanted: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any], str] | Reject]:
    """(line, record, raw text) of each JSONL line or Parquet row, or its reject; ``wanted``: the columns read."""
    if path.suffix in (".parquet", ".pq"):
        table = pq.read_table(path)
        present = [name for name in wanted if name in table.column_names]
        columns = {name: table.column(name).to_pylist() for name in present}
        for row in range(table.num_rows):
            yield row + 1, {name: values[row] for name, values in columns.items()}, ""
        return
    for line in _record_lines(path):
        if isinstance(line, Reject):
            yield line
            continue
        number, text = line
        record, problem = json_record(text, ())
        if record is None:
            yield Reject(str(path), number, RECORD, problem.removeprefix(": "), text[:200])
        else:
            yield number, record, text[:200]


def _check_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise SpecError(f"{what} {path}: no such file")
    if path.suffix not in (".jsonl", ".json", ".parquet", ".pq"):
        raise SpecError(f"{what} {path}: cannot tell the format from the suffix {path.suffix!r}; use .jsonl or .parquet")


def _id_field(path: Path, record: dict[str, Any] | None) -> str:
    """The id's field: ``_id`` where the record (or the Parquet schema) has it, else ``id``."""
    if path.suffix in (".parquet", ".pq"):
        names = pq.read_schema(path).names
        found = next((name for name in ID_FIELDS if name in names), None)
        if found is None:
            raise SpecError(f"{path}: no column '_id' or 'id' (columns: {', '.join(names)})")
        if "text" not in names:
            raise SpecError(f"{path}: no column 'text' (columns: {', '.join(names)})")
        return found
    return next((name for name in ID_FIELDS if record is not None and name in record), "_id")


def _parse_id(value: Any) -> str | None:
    """An id as text: a string, or an integer (BEIR's qrels name ids as text); None for anything else or blank."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    return text or None


def _text_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable text; None when it is."""
    if value is None:
        return MISSING_FIELD
    if not isinstance(value, str):
        return f"not text: {value!r}"[:200]
    if is_blank(value):
        return EMPTY_TEXT
    if not _is_text(value):
        return "not valid text (a lone surrogate)"
    return None


def _read_records(path: Path, what: str, optional: tuple[str, ...]) -> RetrievalRead[dict[str, list[str]]]:
    """The records' ids, texts and optional fields as columns; a repeated id is a SpecError."""
    _check_file(path, what)
    columns: dict[str, list[str]] = {"ids": [], "texts": [], **{name: [] for name in optional}}
    present = dict.fromkeys(optional, False)
    first_line: dict[str, int] = {}
    rejects: list[Reject] = []
    rows_read = 0
    parquet_id = _id_field(path, None) if path.suffix in (".parquet", ".pq") else None
    for item in _records(path, (*ID_FIELDS, "text", *optional)):
        rows_read += 1
        if isinstance(item, Reject):
            rejects.append(item)
            continue
        line, record, raw = item
        id_field = parquet_id or _id_field(path, record)
        doc_id = _parse_id(record.get(id_field))
        if doc_id is None:
            reason = MISSING_FIELD if record.get(id_field) in (None, "") else f"not an id: {record[id_field]!r}"[:200]
            rejects.append(Reject(str(path), line, id_field, reason, raw))
            continue
        if doc_id in first_line:
            raise SpecError(f"{path}:{line}: field {id_field!r}: duplicate {what} id {doc_id!r} "
                            f"(first at line {first_line[doc_id]})")
        first_line[doc_id] = line
        text, problem = record.get("text"), _text_problem(record.get("text"))
        title = record.get("title")
        if problem == EMPTY_TEXT and isinstance(title, str) and not is_blank(title):
            problem, text = None, ""  # BEIR has documents that are a title alone
        extra = {name: record.get(name) for name in optional}
        bad_extra = next((name for name, value in extra.items()
                          if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int)))), None)
        field = "text"
        if problem is None and bad_extra is not None:
            field, problem = bad_extra, f"not text: {extra[bad_extra]!r}"[:200]
        if problem is not None:
            rejects.append(Reject(str(path), line, field, problem, raw))
            continue
        columns["ids"].append(doc_id)
        columns["texts"].append(text.strip())
        for name, value in extra.items():
            present[name] = present[name] or value not in (None, "")
            columns[name].append("" if value is None else str(value).strip())
    for name, seen in present.items():
        if not seen:
            del columns[name]  # no record has it: None, not a column of ""
    return RetrievalRead(columns, rows_read, tuple(rejects))


def read_corpus(path: Path | str) -> RetrievalRead[RetrievalCorpus]:
    """Read a corpus: one JSONL line or Parquet row per document, fields ``_id`` (or ``id``), ``text`` and the
    optional ``title`` and ``group``.

    A document with no id, or with neither text nor title, is a counted reject; a doc id given twice stops the read
    with a SpecError naming file, line and field.

    Args:
        path: A .jsonl (or .json, JSON Lines) or .parquet file.

    Returns:
        The corpus (in file order), the records read and the rejects.

    Example:
        ::

            read = read_corpus("beir/arguana/corpus.jsonl")
            len(read.value), read.rows_read, len(read.rejects)  # (8674, 8674, 0)
    """
    read = _read_records(Path(path), "doc", ("title", "group"))
    columns = read.value
    corpus = RetrievalCorpus(columns["ids"], columns["texts"], columns.get("title"), columns.get("group"))
    return RetrievalRead(corpus, read.rows_read, read.rejects)


def read_queries(path: Path | str) -> RetrievalRead[RetrievalQueries]:
    """Read queries: one JSONL line or Parquet row per query, fields ``_id`` (or ``id``), ``text`` and an optional
    ``group``. A query with no id or an empty text is a counted reject; a query id given twice, a SpecError.

    Args:
        path: A .jsonl (or .json) or .parquet file.

    Returns:
        The queries (in file order), the records read and the rejects.

    Example:
        ::

            queries = read_queries("beir/arguana/queries.jsonl").value
    """
    read = _read_records(Path(path), "query", ("group",))
    columns = read.value
    return RetrievalRead(RetrievalQueries(columns["ids"], columns["texts"], columns.get("group")), read.rows_read, read.rejects)


def _parse_grade(value: str) -> int | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None  # "1.0" is grade 1; "0.5" is no grade


def read_qrels(
    path: Path | str, queries: RetrievalQueries | None = None, corpus: RetrievalCorpus | None = None,
) -> RetrievalRead[Qrels]:
    """Read BEIR's qrels TSV: the header ``query-id<TAB>corpus-id<TAB>score``, then one judgement a line.

    A line with the wrong number of fields, a blank id, a grade that is not an integer, a query id not in
    ``queries`` or a doc id not in ``corpus`` (say, a reject of the corpus file), or a (query, doc) judged a second
    time is a counted reject naming the file and line. A missing or different header is a SpecError.

    Args:
        path: The TSV file.
        queries: The known queries; None checks no query id.
        corpus: The known documents; None checks no doc id.

    Returns:
        The qrels, the lines read (header and blank lines not counted) and the rejects.

    Example:
        ::

            qrels = read_qrels("beir/arguana/qrels/test.tsv", queries, corpus).value
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"qrels {path}: no such file")
    known_queries = None if queries is None else set(queries.ids)
    known_docs = None if corpus is None else corpus.position
    grades: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    rejects: list[Reject] = []
    rows_read = 0
    header_seen = False
    for line in _record_lines(path):
        if isinstance(line, Reject):
            if not header_seen:
                raise SpecError(f"{path}:{line.line}: the header is not readable ({line.reason}); "
                                f"expected {chr(9).join(QRELS_HEADER)!r}")
            rows_read += 1
            rejects.append(line)
            continue
        number, text = line
        cells = [cell.strip() for cell in text.split("\t")]
        if not header_seen:
            if tuple(cells) != QRELS_HEADER:
                raise SpecError(f"{path}:{number}: header {text[:80]!r}, expected {chr(9).join(QRELS_HEADER)!r} (BEIR qrels)")
            header_seen = True
            continue
        rows_read += 1
        if len(cells) != 3:
            rejects.append(Reject(str(path), number, RECORD, f"expected 3 tab-separated fields, got {len(cells)}", text[:200]))
            continue
        query_id, doc_id, score = cells
        grade = _parse_grade(score)
        problem: tuple[str, str] | None = None  # (field, reason)
        if not query_id:
            problem = ("query-id", MISSING_FIELD)
        elif not doc_id:
            problem = ("corpus-id", MISSING_FIELD)
        elif grade is None:
            problem = ("score", f"not an integer grade: {score!r}"[:200])
        elif known_queries is not None and query_id not in known_queries:
            problem = ("query-id", f"unknown query id {query_id!r} (not among the queries read)")
        elif known_docs is not None and doc_id not in known_docs:
            problem = ("corpus-id", f"unknown doc id {doc_id!r} (not in the corpus read)")
        elif (query_id, doc_id) in first_line:
            problem = ("corpus-id", f"judged twice (first at line {first_line[query_id, doc_id]})")
        if problem is not None:
            rejects.append(Reject(str(path), number, problem[0], problem[1], text[:200]))
            continue
        first_line[query_id, doc_id] = number
        grades.setdefault(query_id, {})[doc_id] = grade  # type: ignore[assignment]
    if not header_seen:
        raise SpecError(f"{path}: an empty file; expected the header {chr(9).join(QRELS_HEADER)!r}")
    return RetrievalRead(Qrels(grades), rows_read, tuple(rejects))


def read_beir(folder: Path | str, split: str = "test", exclude_identical_ids: bool = True) -> RetrievalSet:
    """Read one split of a dataset in BEIR's folder layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.

    All queries of queries.jsonl are kept (``judged_queries`` gives those of this split's qrels), so that every
    stream's counts add up: ``counts`` holds ``<stream>_read``, ``<stream>_kept`` and ``<stream>_rejected`` for
    corpus, queries and qrels.

    Args:
        folder: The dataset's folder.
        split: The qrels file to read: ``train``, ``dev`` or ``test``.
        exclude_identical_ids: BEIR's evaluation rule (``ignore_identical_ids``): a doc whose id is a query's id is
            never ranked for that query (in ArguAna, the query's own argument).

    Returns:
        The task, with all readers' rejects and counts.

    Example:
        ::

            task = read_beir("beir/arguana", "test")
            len(task.judged_queries)  # 1406
    """
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        present = sorted(path.stem for path in (folder / "qrels").glob("*.tsv"))
        raise SpecError(f"{qrels_path}: no such file (qrels splits here: {', '.join(present) or 'none'}; "
                        f"BEIR layout: {BEIR_FILES})")
    corpus = read_corpus(folder / "corpus.jsonl")
    queries = read_queries(folder / "queries.jsonl")
    qrels = read_qrels(qrels_path, queries.value, corpus.value)
    counts: dict[str, int] = {}
    for name, read in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        counts |= {f"{name}_read": read.rows_read, f"{name}_kept": read.kept, f"{name}_rejected": len(read.rejects)}
    excluded = {}
    if exclude_identical_ids:
        excluded = {query: frozenset({query}) for query in queries.value.ids if query in corpus.value.position}
    return RetrievalSet(corpus.value, queries.value, qrels.value, excluded,
                        rejects=corpus.rejects + queries.rejects + qrels.rejects, counts=counts)
