"""Retrieval data: the JSONL/Parquet/BEIR readers with their rejects and errors, the ArguAna tasks (a mini tree and
the real validation split), the by-group split and distant supervision. No Ray, no models."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.config import SpecError
from augsbert_ray.data.arguana import read_arguana, split_point
from augsbert_ray.data.retrieval import (
    Qrels, RetrievalCorpus, RetrievalQueries, RetrievalSet, distant_queries, keep_groups, split_by_group,
)
from augsbert_ray.data.retrieval_readers import read_beir, read_corpus, read_qrels, read_queries

ARGUANA = Path(__file__).resolve().parents[2] / "shared" / "data" / "arguana"


def jsonl(path: Path, *records: object) -> Path:
    """One line per record: a dict as JSON, a str as is."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def where(read) -> list[tuple[int, str, str]]:
    return [(r.line, r.field, r.reason) for r in read.rejects]


# --- JSONL and Parquet ----------------------------------------------------------------------------------------------


def test_jsonl_corpus_keeps_good_records_and_counts_each_reject(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "corpus.jsonl",
        {"_id": "d1", "title": "T1", "text": "first doc", "group": "g1"},  # 1 ok
        {"id": 7, "text": "an integer id, as text"},  # 2 ok: `id` when `_id` is absent
        {"_id": "d3", "title": "a title alone", "text": ""},  # 3 ok: BEIR has title-only documents
        {"_id": "d4", "text": " \u200b "},  # 4 reject: nothing visible
        {"text": "no id"},  # 5 reject
        "{not json",  # 6 reject
        "",  # 7: a blank line is no record
        {"_id": "d8", "text": 3},  # 8 reject: not text
        {"_id": "d9", "text": "ok", "group": ["a"]},  # 9 reject: a group that is not text
    )
    read = read_corpus(path)
    corpus = read.value
    assert corpus.ids == ("d1", "7", "d3")
    assert corpus.texts == ("first doc", "an integer id, as text", "")
    assert corpus.titles == ("T1", "", "a title alone") and corpus.groups == ("g1", "", "")
    assert where(read) == [(4, "text", "empty text"), (5, "_id", "missing field"), (6, "(line)", where(read)[2][2]),
                           (8, "text", "not text: 3"), (9, "group", "not text: ['a']")]
    assert where(read)[2][2].startswith("invalid JSON")
    assert all(r.file == str(path) for r in read.rejects)
    assert read.rows_read == read.kept + len(read.rejects) == 8


def test_duplicate_doc_id_is_one_line_error_naming_file_line_and_field(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "corpus.jsonl", {"_id": "d1", "text": "a"}, {"_id": "d2", "text": "b"}, {"_id": "d1", "text": "c"})
    with pytest.raises(SpecError) as error:
        read_corpus(path)
    assert str(error.value) == f"{path}:3: field '_id': duplicate doc id 'd1' (first at line 1)"
    queries = jsonl(tmp_path / "queries.jsonl", {"id": "q", "text": "a"}, {"id": "q", "text": "b"})
    with pytest.raises(SpecError, match=r"queries.jsonl:2: field 'id': duplicate query id 'q' \(first at line 1\)$"):
        read_queries(queries)


def test_empty_query_is_a_counted_reject(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "queries.jsonl", {"_id": "q1", "text": "why?"}, {"_id": "q2", "text": "  "},
                 {"_id": "q3", "text": None}, {"_id": "q4", "text": "how?", "metadata": {}})
    read = read_queries(path)
    assert read.value.ids == ("q1", "q4") and read.value.groups is None
    assert where(read) == [(2, "text", "empty text"), (3, "text", "missing field")]
    assert read.rows_read == read.kept + len(read.rejects) == 4


def test_parquet_corpus_and_queries(tmp_path: Path) -> None:
    corpus_path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"id": ["a", "b", None, "d"], "text": ["x", "y", "z", ""], "title": ["t", None, None, None],
                             "group": [1, 1, 2, 2]}), corpus_path)
    read = read_corpus(corpus_path)
    assert read.value.ids == ("a", "b") and read.value.titles == ("t", "") and read.value.groups == ("1", "1")
    assert where(read) == [(3, "id", "missing field"), (4, "text", "empty text")]  # the row number stands in for a line
    assert read.rows_read == read.kept + len(read.rejects) == 4

    queries_path = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"_id": ["q1", "q2"], "text": ["first", ""]}), queries_path)
    queries = read_queries(queries_path)
    assert queries.value.ids == ("q1",) and where(queries) == [(2, "text", "empty text")]

    pq.write_table(pa.table({"_id": ["a", "a"], "text": ["x", "y"]}), corpus_path)
    with pytest.raises(SpecError, match=r"corpus.parquet:2: field '_id': duplicate doc id 'a' \(first at line 1\)$"):
        read_corpus(corpus_path)
    pq.write_table(pa.table({"doc": ["a"], "text": ["x"]}), corpus_path)
    with pytest.raises(SpecError, match="no column '_id' or 'id'"):
        read_corpus(corpus_path)
    (tmp_path / "corpus.csv").write_text("_id,text\na,x\n")
    with pytest.raises(SpecError, match="cannot tell the format from the suffix '.csv'"):
        read_corpus(tmp_path / "corpus.csv")


# --- BEIR -----------------------------------------------------------------------------------------------------------


def beir_folder(root: Path) -> Path:
    jsonl(root / "corpus.jsonl", *({"_id": f"d{i}", "title": "", "text": f"document {i}"} for i in range(1, 5)),
          {"_id": "q1", "title": "", "text": "the first query, also a document (as in ArguAna)"})
    jsonl(root / "queries.jsonl", {"_id": "q1", "text": "the first query, also a document (as in ArguAna)"},
          {"_id": "q2", "text": "second"}, {"_id": "q3", "text": ""}, {"_id": "q4", "text": "a train query"})
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        "q1\td1\t1\n"  # line 2 ok
        "q2\td2\t2\n"  # line 3 ok
        "q2\td3\t0\n"  # line 4 ok: judged not relevant
        "q9\td1\t1\n"  # line 5: unknown query
        "q2\td99\t1\n"  # line 6: unknown doc
        "q3\td1\t1\n"  # line 7: q3 was rejected (empty text), so it is unknown too
        "q2\td4\thigh\n"  # line 8: no grade
        "q2\td2\t1\n"  # line 9: judged twice
        "q2\td4\n"  # line 10: two fields
        "\n"  # a blank line: no record
    )
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td4\t1\n")
    return root


def test_beir_layout_with_unknown_ids_as_counted_rejects(tmp_path: Path) -> None:
    task = read_beir(beir_folder(tmp_path), "test")
    qrels_file = str(tmp_path / "qrels" / "test.tsv")
    assert task.qrels.grades == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}
    qrels_rejects = [(r.file, r.line, r.field, r.reason) for r in task.rejects if r.file == qrels_file]
    assert qrels_rejects == [
        (qrels_file, 5, "query-id", "unknown query id 'q9' (not among the queries read)"),
        (qrels_file, 6, "corpus-id", "unknown doc id 'd99' (not in the corpus read)"),
        (qrels_file, 7, "query-id", "unknown query id 'q3' (not among the queries read)"),
        (qrels_file, 8, "score", "not an integer grade: 'high'"),
        (qrels_file, 9, "corpus-id", "judged twice (first at line 3)"),
        (qrels_file, 10, "(line)", "expected 3 tab-separated fields, got 2"),
    ]
    assert str(task.rejects[-1]).startswith(f"{qrels_file}:10 field '(line)'")
    counts = task.counts
    for stream in ("corpus", "queries", "qrels"):
        assert counts[f"{stream}_read"] == counts[f"{stream}_kept"] + counts[f"{stream}_rejected"]
    assert (counts["corpus_kept"], counts["queries_read"], counts["queries_kept"], counts["qrels_read"]) == (5, 4, 3, 9)
    assert task.excluded == {"q1": frozenset({"q1"})}  # BEIR's ignore_identical_ids
    assert task.judged_queries.ids == ("q1", "q2") and task.queries.ids == ("q1", "q2", "q4")
    assert read_beir(tmp_path, "train", exclude_identical_ids=False).excluded == {}


def test_beir_missing_split_and_bad_header_are_errors(tmp_path: Path) -> None:
    beir_folder(tmp_path)
    with pytest.raises(SpecError, match=r"dev.tsv: no such file \(qrels splits here: test, train"):
        read_beir(tmp_path, "dev")
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\td1\t1\n")
    with pytest.raises(SpecError, match=r"bad.tsv:1: header 'q1\\td1\\t1', expected 'query-id\\tcorpus-id\\tscore'"):
        read_qrels(bad)
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1.0\nq1\td2\t0.5\n")  # no ids to check against
    read = read_qrels(bad)
    assert read.value.grades == {"q1": {"d1": 1}} and where(read) == [(3, "score", "not an integer grade: '0.5'")]


# --- containers -----------------------------------------------------------------------------------------------------


def test_containers_are_frozen_and_check_their_ids() -> None:
    corpus = RetrievalCorpus(["a", "b"], ["x", "y"], groups=["g", "h"])
    assert corpus.ids == ("a", "b") and corpus.position == {"a": 0, "b": 1}
    with pytest.raises(AttributeError):
        corpus.ids = ("c",)  # type: ignore[misc]
    with pytest.raises(ValueError, match="id 'a' appears 2 times"):
        RetrievalCorpus(["a", "a"], ["x", "y"])
    with pytest.raises(ValueError, match="2 ids but 1 texts"):
        RetrievalQueries(["q", "r"], ["x"])
    queries = RetrievalQueries(["q"], ["x"])
    with pytest.raises(ValueError, match="qrels: query 'q' names doc 'z', not in the corpus"):
        RetrievalSet(corpus, queries, Qrels({"q": {"z": 1}}))
    with pytest.raises(TypeError, match=r"RetrievalCorpus.texts: None is not text"):
        RetrievalCorpus(["a"], [None])  # type: ignore[list-item]
    assert RetrievalSet(corpus, queries, {"q": {"a": 1}}).qrels.grades == {"q": {"a": 1}}  # type: ignore[arg-type]
    qrels = Qrels({"q": {"a": 2, "b": 0}, "r": {"a": 0}})
    assert qrels.relevant("q") == {"a": 2} and qrels.judged_query_ids == ("q",) and len(qrels) == 3


# --- ArguAna --------------------------------------------------------------------------------------------------------


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def mini_arguana(root: Path) -> Path:
    """culture/debate-one is filed again as science/e-one (a copy, same URL, fewer files); law/debate-two has no
    metadata, an unreadable counter and a point without its counter file."""
    one = root / "validation" / "culture" / "debate-one"
    write(one / "metadata.txt", "url\thttps://idebate.org/debatabase/culture/debate-one\nreads\t1\n")
    write(one / "thesis.txt", "This house would test.\n")
    write(one / "pro" / "pro01a-point.txt", "Claim A\n\nPremise A,\nin two lines.\n")
    write(one / "pro" / "pro01b-counter.txt", "Counter A.\n")
    write(one / "pro" / "pro02a-point.txt", "Claim B\n\nPremise B.\n")  # no counter file
    write(one / "con" / "con01a-point.txt", "\n\nA premise, but no conclusion.\n")
    write(one / "con" / "con01b-counter.txt", "Counter C.\r\n")
    write(one / "con" / "notes.txt", "not an argument file: ignored")
    copy = root / "validation" / "science" / "e-one"
    write(copy / "metadata.txt", "url\thttps://idebate.org/debatabase/culture/debate-one\n")
    write(copy / "pro" / "pro01a-point.txt", "Claim A\n\nPremise A,\nin two lines.\n")
    write(copy / "pro" / "pro01b-counter.txt", "Counter A.\n")
    two = root / "validation" / "law" / "debate-two"
    write(two / "pro" / "pro01a-point.txt", "Claim D\n\nPremise D.\n")
    write(two / "pro" / "pro01b-counter.txt", b"caf\xe9\n")  # latin-1: not UTF-8
    write(two / "con" / "con01a-point.txt", "Claim E\n\nPremise E.\n")
    write(two / "con" / "con01b-counter.txt", "Counter E.\n")
    write(root / "validation" / "law" / "empty-debate" / "thesis.txt", "no arguments here\n")
    return root


def test_split_point() -> None:
    assert split_point("Claim\n\nPremise one.\nPremise two.\n") == ("Claim", "Premise one.\nPremise two.")
    assert split_point("\n\nOnly a premise.") == ("", "Only a premise.")


def test_mini_arguana_counter_task_keeping_theme_copies(tmp_path: Path) -> None:
    task = read_arguana(mini_arguana(tmp_path), "validation", "counter", theme_copies="keep")
    one, copy, two = "culture/debate-one", "science/e-one", "law/debate-two"
    assert task.queries.ids == (f"{one}/con01a-point", f"{one}/pro01a-point", f"{two}/con01a-point", f"{copy}/pro01a-point")
    assert task.queries.text_of[f"{one}/pro01a-point"] == "Claim A\n\nPremise A,\nin two lines."  # conclusion and premise
    group = "culture/debate-one"  # the URL's path, one group for both copies
    assert task.queries.groups == (group, group, two, group)
    # a copy of the counter (another theme, the same text) is as relevant as the counter itself
    assert task.qrels.grades[f"{one}/pro01a-point"] == {f"{one}/pro01b-counter": 1, f"{copy}/pro01b-counter": 1}
    assert task.qrels.grades[f"{one}/con01a-point"] == {f"{one}/con01b-counter": 1}
    # the query's own point is never ranked, nor its copy
    assert task.excluded[f"{one}/pro01a-point"] == {f"{one}/pro01a-point", f"{copy}/pro01a-point"}
    assert task.excluded[f"{two}/con01a-point"] == {f"{two}/con01a-point"}
    assert len(task.corpus) == 6 + 4  # points + readable counters
    assert [(Path(r.file).relative_to(tmp_path).as_posix(), r.line, r.field, r.reason) for r in task.rejects] == [
        ("validation/law/debate-two/pro/pro01b-counter.txt", 1, "(line)", "bad UTF-8"),
        ("validation/law/debate-two/pro/pro01a-point.txt", 1, "(line)", "its counter was rejected: no relevant document"),
    ]
    c = task.counts
    assert (c["points_read"], c["counters_read"], c["points_without_counter"], c["debates_read"]) == (6, 5, 1, 4)
    assert c["points_read"] + c["counters_read"] == c["documents"] + c["unreadable_files"] + c["document_rejects"]
    assert c["points_read"] == c["queries"] + c["points_without_counter"] + c["query_rejects"]


def test_mini_arguana_drops_theme_copies_by_default(tmp_path: Path) -> None:
    task = read_arguana(mini_arguana(tmp_path), "validation", "counter")
    c = task.counts
    assert (c["debate_copies_dropped"], c["points_in_dropped_copies"], c["counters_in_dropped_copies"]) == (1, 1, 1)
    assert not any(doc.startswith("science/") for doc in task.corpus.ids)
    assert task.qrels.grades["culture/debate-one/pro01a-point"] == {"culture/debate-one/pro01b-counter": 1}
    assert len(task.queries) == 3 and len(task.corpus) == 8


def test_mini_arguana_premise_task(tmp_path: Path) -> None:
    task = read_arguana(mini_arguana(tmp_path), "validation", "premise", theme_copies="keep")
    base = "culture/debate-one/pro01a"
    assert task.queries.text_of[f"{base}-conclusion"] == "Claim A"
    assert task.corpus.texts[task.corpus.position[f"{base}-premise"]] == "Premise A,\nin two lines."
    assert task.qrels.grades[f"{base}-conclusion"] == {f"{base}-premise": 1, "science/e-one/pro01a-premise": 1}
    assert task.excluded == {}
    # the point with a blank first line: its premise is a document, its empty conclusion a counted reject
    ((reject),) = task.rejects
    assert (Path(reject.file).name, reject.line, reject.field) == ("con01a-point.txt", 1, "conclusion")
    assert "culture/debate-one/con01a-premise" in task.corpus.position
    c = task.counts
    assert (c["documents"], c["queries"], c["query_rejects"]) == (6, 5, 1)
    assert c["documents"] == c["queries"] + c["query_rejects"]


def test_missing_split_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"validation: no such folder \(splits in .*: training\)"):
        (tmp_path / "training").mkdir()
        read_arguana(tmp_path, "validation")


needs_arguana = pytest.mark.skipif(not (ARGUANA / "validation").is_dir(), reason=f"no ArguAna at {ARGUANA}")


@needs_arguana
def test_real_arguana_validation_counts_match_source_txt() -> None:
    """SOURCE.txt: validation 211 debates, 1,290 points, 1,287 counters (3 points have no counter)."""
    task = read_arguana(ARGUANA, "validation", "counter", theme_copies="keep")
    c = task.counts
    assert (c["debates_read"], c["points_read"], c["counters_read"]) == (211, 1290, 1287)
    assert len(task.queries) == 1287 and c["points_without_counter"] == 3
    assert len(task.corpus) == 1290 + 1287 and task.rejects == ()
    assert all(task.corpus.ids[task.corpus.position[q]] == q for q in task.queries.ids)  # each query's point is a doc
    assert all(q in task.excluded[q] for q in task.queries.ids)

    deduped = read_arguana(ARGUANA, "validation", "counter")  # each debate once: 211 folders, 193 debates
    d = deduped.counts
    assert (d["points_read"], d["counters_read"], d["debate_copies_dropped"]) == (1290, 1287, 18)
    assert d["points_read"] - d["points_in_dropped_copies"] == d["queries"] + d["points_without_counter"]
    assert set(deduped.corpus.texts) == set(task.corpus.texts)  # no argument was lost with a copy

    premise = read_arguana(ARGUANA, "validation", "premise", theme_copies="keep")
    assert len(premise.corpus) == 1290 and len(premise.queries) == 1289  # one point's first line is blank
    assert [r.field for r in premise.rejects] == ["conclusion"]


@needs_arguana
def test_real_arguana_split_by_debate_is_disjoint_and_seeded() -> None:
    task = read_arguana(ARGUANA, "validation", "counter")
    dev, test = split_by_group(task, seed=42)
    again, _ = split_by_group(task, seed=42)
    other, _ = split_by_group(task, seed=43)
    assert dev.queries.ids == again.queries.ids and dev.corpus.ids == again.corpus.ids
    assert set(dev.queries.ids) != set(other.queries.ids)
    assert not set(dev.corpus.groups) & set(test.corpus.groups)
    assert not set(dev.corpus.ids) & set(test.corpus.ids) and not set(dev.queries.ids) & set(test.queries.ids)
    assert len(dev.corpus) + len(test.corpus) == len(task.corpus)
    assert len(dev.queries) + len(test.queries) == len(task.queries)
    assert abs(dev.counts["groups"] - test.counts["groups"]) <= 1
    for half in (dev, test):  # every query keeps its counter: a debate's arguments stay together
        assert all(half.qrels.relevant(q) for q in half.queries.ids)


def test_split_and_keep_groups_on_a_hand_made_task() -> None:
    corpus = RetrievalCorpus(["a1", "a2", "b1", "c1"], ["w", "x", "y", "z"], groups=["A", "A", "B", "C"])
    queries = RetrievalQueries(["qa", "qb"], ["?", "!"], groups=["A", "B"])
    task = RetrievalSet(corpus, queries, Qrels({"qa": {"a2": 1, "b1": 0}, "qb": {"b1": 1}}), {"qa": {"a1"}})
    part = keep_groups(task, {"A"})
    assert part.corpus.ids == ("a1", "a2") and part.queries.ids == ("qa",)
    assert part.qrels.grades == {"qa": {"a2": 1}} and part.excluded == {"qa": frozenset({"a1"})}
    first, second = split_by_group(task, seed=0)
    assert sorted([first.counts["groups"], second.counts["groups"]]) == [1, 2]  # round(0.5 * 3) = 2 groups first
    with pytest.raises(ValueError, match="need groups"):
        split_by_group(RetrievalSet(RetrievalCorpus(["a"], ["x"]), RetrievalQueries([], []), Qrels()), seed=0)


# --- distant supervision --------------------------------------------------------------------------------------------


def test_distant_queries_from_first_lines() -> None:
    corpus = RetrievalCorpus(
        ["d1", "d2", "d3", "d4", "d5"],
        ["Abortion!\nIt is a right.", "abortion\nIt is not.", "Cloning\nIt is risky.\nVery.", "one line only", "\nno first line"],
        titles=["t1", "t2", "t3", "t4", "t5"], groups=["g1", "g1", "g2", "g3", "g3"],
    )
    pairs = distant_queries(corpus, origin="my.jsonl")
    # "Abortion!" and "abortion" normalize to one query: both bodies are relevant to it
    assert pairs.queries.ids == ("q:d1", "q:d3") and pairs.queries.texts == ("Abortion!", "Cloning")
    assert pairs.qrels.grades == {"q:d1": {"d1": 1, "d2": 1}, "q:d3": {"d3": 1}}
    assert pairs.corpus.texts == ("It is a right.", "It is not.", "It is risky.\nVery.") and pairs.corpus.titles == ("t1", "t2", "t3")
    assert pairs.queries.groups == ("g1", "g2")
    assert [(r.file, r.line, r.field, r.reason) for r in pairs.rejects] == [
        ("my.jsonl", 4, "text", "no document after the query"), ("my.jsonl", 5, "text", "no query (a blank first line)")]
    assert pairs.counts == {"documents_read": 5, "documents": 3, "rejected": 2, "queries": 2}
    assert len(distant_queries(corpus, merge_identical=False).queries) == 3


def test_distant_queries_from_titles() -> None:
    corpus = RetrievalCorpus(["d1", "d2"], ["body one", "body two"], titles=["Title one", ""])
    pairs = distant_queries(corpus, source="title", query_prefix="")
    assert pairs.queries.ids == ("d1",) and pairs.queries.texts == ("Title one",)
    assert pairs.corpus.titles is None and pairs.qrels.grades == {"d1": {"d1": 1}}
    assert [r.field for r in pairs.rejects] == ["title"]
    with pytest.raises(ValueError, match="no titles"):
        distant_queries(RetrievalCorpus(["d"], ["x"]), source="title")
