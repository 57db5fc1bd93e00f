import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.config import DataSpec, SourceSpec
from augsbert_ray.data import DataNotFoundError, TooManyRejectsError, check_reject_fraction, load_gold, read_pairs, resolve_data_dir, write_rejects
from augsbert_ray.data.hygiene import pair_keys


def reasons(result) -> list[tuple[int, str, str]]:
    return [(r.line, r.field, r.reason.split(" ")[0]) for r in result.rejects]


def test_csv_with_column_map_and_every_reject_kind(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_bytes(
        b"first,second,gold\n"
        b"a cat,a dog,0.5\n"  # line 2 ok
        b"a cat,,0.5\n"  # line 3 empty sentence
        b"a cat,a dog,high\n"  # line 4 non-numeric
        b"a cat,a dog,1.5\n"  # line 5 out of range
        b"a cat,a dog\n"  # line 6 missing field
        b"caf\xe9,a dog,0.1\n"  # line 7 bad UTF-8 (latin-1)
        b'"quoted, with comma",b,1\n'  # line 8 ok
    )
    source = SourceSpec(path=path, columns={"sentence1": "first", "sentence2": "second", "label": "gold"})
    result = read_pairs(source, "regression")
    assert result.table.column("sentence1").to_pylist() == ["a cat", "quoted, with comma"]
    assert sorted(reasons(result)) == [
        (3, "sentence2", "empty"),
        (4, "label", "non-numeric"),
        (5, "label", "score"),
        (6, "label", "missing"),
        (7, "(line)", "bad"),
    ]
    assert result.rows_read == result.table.num_rows + len(result.rejects) == 7
    assert all(r.file == str(path) for r in result.rejects)


@pytest.mark.parametrize("closed_at", [None, 12, "past-the-field-limit"])
def test_a_quote_left_open_takes_no_line_after_it(tmp_path: Path, closed_at: int | str | None) -> None:
    """A quote opened in line 5 and never closed (or closed by a stray quote on line 12; or past the csv module's
    128 KiB field limit): before, every line up to there became one rejected record and was never counted, so 999
    rows read into 1 reject lost 150 rows silently, and the reject named the last line."""
    long = closed_at == "past-the-field-limit"
    rows = [f"s{i} {'w' * 60 if long else 'a'},t{i} b,0.5" for i in range(3000 if long else 20)]
    rows[3] = 's3 a,"t3 left open,0.5'
    if closed_at == 12:
        rows[10] = 's10 "a,t10 b,0.5'  # a stray quote, read as text once its line is read on its own
    path = tmp_path / "pairs.csv"
    path.write_text("sentence1,sentence2,label\n" + "".join(row + "\n" for row in rows))
    result = read_pairs(SourceSpec(path=path), "regression")
    assert result.rows_read == len(rows) and result.table.num_rows == len(rows) - 1
    ((line, field, reason),) = [(r.line, r.field, r.reason) for r in result.rejects]
    assert (line, field) == (5, "(line)")
    problem = {None: "unexpected end of data", 12: "',' expected after '\"'", "past-the-field-limit": "field larger than field limit"}
    assert reason.startswith(f"unparseable: {problem[closed_at]}") and reason.endswith("as one record; they are read again)")


def test_a_stray_quote_swallows_no_record_and_a_literal_one_spoils_none(tmp_path: Path) -> None:
    """The check counted quotes: a quote closed by a stray quote lines later (here on line 5) made one accepted record of
    lines 3-5, and line 4's pair was lost uncounted; a valid multi-line record beside a literal quote, or without its
    unmapped last column, was rejected and its second line accepted as a pair."""
    path = tmp_path / "pairs.csv"
    path.write_text('sentence1,sentence2,label\na,b,0.1\n"Stop, he said,x,0.2\ne,f,0.3\nHe is 6" tall,i,0.4\nj,k,0.5\n')
    result = read_pairs(SourceSpec(path=path, score_range=(0, 1)), "regression")
    assert result.table.column("sentence1").to_pylist() == ["a", "e", 'He is 6" tall', "j"]
    assert [(r.line, r.reason) for r in result.rejects] == [
        (3, "unparseable: ',' expected after '\"' (a quote opened here took lines 3-5 as one record; they are read again)")]
    assert result.rows_read == 5

    path.write_text('sentence1,sentence2,label,comment\n"first part\nsecond part",other 6" sentence,0.5\n"a\nb",c,0.2,note\n')
    result = read_pairs(SourceSpec(path=path, score_range=(0, 1)), "regression")
    assert result.table.column("sentence1").to_pylist() == ["first part\nsecond part", "a\nb"] and not result.rejects
    assert result.table.column("sentence2").to_pylist() == ['other 6" sentence', "c"]


def test_a_bws_row_without_its_topic_is_a_reject_and_an_unknown_topic_is_named(tmp_path: Path) -> None:
    """Before: a blank topic stopped the cross-topic split with `unknown topics ['']` (no file, no line), and the
    in-topic split took it as a stratum of its own."""
    from augsbert_ray.data.splits import bws_cross_topic

    path = tmp_path / "bws.csv"
    path.write_text("topic,sentence_1,sentence_2,regression_label_binary,regression_label\n"
                    "Abortion,a b,c d,1,0.5\n"
                    " ,e f,g h,0,0.1\n"
                    "Nuclear energy ,i j,k l,1,0.7\n")
    result = read_pairs(SourceSpec(path=path, format="bws"), "regression")
    assert result.table.column("topic").to_pylist() == ["Abortion", "Nuclear energy"]
    assert [(r.line, r.field, r.reason) for r in result.rejects] == [(3, "topic", "missing field")]
    misspelled = result.table.set_column(3, "topic", pa.array(["Abortion", "Nuclear energ"]))
    with pytest.raises(ValueError, match=r"^BWS cross-topic split: 1 row\(s\) of topics it does not know, \['Nuclear energ'\]; its topics: "):
        bws_cross_topic(misspelled)


def test_a_huge_json_number_a_lone_surrogate_and_a_boolean_score_are_rejects(tmp_path: Path) -> None:
    """Before: an OverflowError traceback for the number, for the surrogate the whole file refused with an
    encoding error naming neither file nor line, and a JSON `true` under regression read as the score 1.0."""
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"sentence1": "a b", "sentence2": "c d", "label": ' + "9" * 400 + '}\n'
                    '{"sentence1": "a \\ud800 b", "sentence2": "c d", "label": 0.5}\n'
                    '{"sentence1": "e f", "sentence2": "g h", "label": 0.3}\n'
                    '{"sentence1": "i j", "sentence2": "k l", "label": true}\n')
    result = read_pairs(SourceSpec(path=path), "regression")
    assert result.rows_read == 4 and result.table.column("sentence1").to_pylist() == ["e f"]
    assert [(r.line, r.field, r.reason[:16]) for r in result.rejects] == [(1, "label", "non-finite score"),
                                                                         (2, "sentence1", "not valid text ("),
                                                                         (4, "label", "boolean score Tr")]
    # a yes/no label is fine where the task is classification
    assert read_pairs(SourceSpec(path=path), "classification").table.column("label").to_pylist() == [1]


def test_score_range_normalizes(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("sentence1\tsentence2\tlabel\nx\ty\t4\nx\tz\t\"2\n")
    result = read_pairs(SourceSpec(path=path, score_range=(0, 5)), "regression")
    assert result.table.column("label").to_pylist() == [0.8]
    assert reasons(result) == [(3, "label", "non-numeric")]  # tsv reads quotes literally


def test_jsonl_and_classification_labels(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    lines = [
        {"sentence1": "a", "sentence2": "b", "label": 1},
        {"sentence1": "a", "sentence2": "c", "label": "0"},
        {"sentence1": "a", "sentence2": "d", "label": 2},
        {"sentence1": "a", "label": 1},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{not json\n")
    result = read_pairs(SourceSpec(path=path), "classification")
    assert result.table.column("label").to_pylist() == [1, 0]
    assert result.table.schema.field("label").type == pa.int64()
    assert reasons(result) == [(3, "label", "bad"), (4, "sentence2", "missing"), (5, "(line)", "invalid")]


def test_parquet_rows_count_as_lines(tmp_path: Path) -> None:
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"s1": ["a", "b"], "s2": ["c", " "], "y": [0.1, 0.2]}), path)
    result = read_pairs(SourceSpec(path=path, columns={"sentence1": "s1", "sentence2": "s2", "label": "y"}), "regression")
    assert result.table.num_rows == 1 and reasons(result) == [(2, "sentence2", "empty")]


def test_missing_column_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("a,b,c\nx,y,1\n")
    with pytest.raises(ValueError, match=r"pairs.csv:1: header has no column 'sentence1'"):
        read_pairs(SourceSpec(path=path), "regression")


def test_a_row_with_more_fields_than_the_header_is_a_reject_not_shifted_sentences(tmp_path: Path) -> None:
    """Before: an unquoted comma in a sentence shifted the fields, and the pair was accepted with a cut sentence."""
    path = tmp_path / "pairs.csv"
    path.write_text("score,sentence1,sentence2\n0.5,He said hi, then left,She left\n0.2,a,b\n")
    result = read_pairs(SourceSpec(path=path, columns={"label": "score"}), "regression")
    assert (result.rows_read, result.table.column("sentence1").to_pylist()) == (2, ["a"])
    assert [str(reject) for reject in result.rejects] == [f"{path}:2 field '(line)': expected 3 fields, got 4"]


def test_a_quoted_sentence_spanning_lines_keeps_its_newline(tmp_path: Path) -> None:
    """Before: the line end was dropped, gluing 'line one' to 'line two'."""
    path = tmp_path / "pairs.csv"
    path.write_bytes(b'sentence1,sentence2,label\r\n"line one\r\nline two",b,0.5\r\nc,d,0.2\r\n')
    result = read_pairs(SourceSpec(path=path), "regression")
    assert result.table.column("sentence1").to_pylist() == ["line one\nline two", "c"] and not result.rejects


@pytest.mark.parametrize("content, message", [
    (b"sentence1,sentence2,label\ra,b,0.5\rc,d,0.3\r", "pairs.csv:1: cannot read the header: new-line character seen"),
    ("sentence1,sentence2,label\na,b,0.5\n".encode("utf-16"), r"pairs.csv:1: the header is not UTF-8 \(UTF-16\?\)"),
    (b"sentence1,sentence1,sentence2,label\na,x,b,0.5\n", "pairs.csv:1: column 'sentence1' appears 2 times in the header"),
], ids=["cr-line-ends", "utf-16", "repeated-column"])
def test_an_unreadable_header_is_one_line_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    """Before: a raw _csv.Error traceback (CR-only line ends, UTF-16), or the last repeated column silently won."""
    (tmp_path / "pairs.csv").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_pairs(SourceSpec(path=tmp_path / "pairs.csv"), "regression")


def test_a_jsonl_sentence_that_is_a_number_is_named_so_and_a_numeric_topic_is_text(tmp_path: Path) -> None:
    """Before: the number was rejected as an 'empty sentence', and an int topic stopped the read (ArrowTypeError)."""
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"sentence1": 1984, "sentence2": "a year", "label": 0.5, "topic": 1}\n'
                    '{"sentence1": "a", "sentence2": "b", "label": 0.5, "topic": 2}\n')
    result = read_pairs(SourceSpec(path=path, columns={"topic": "topic"}), "regression")
    assert [str(reject) for reject in result.rejects] == [f"{path}:1 field 'sentence1': not text: 1984"]
    assert result.table.column("topic").to_pylist() == ["2"]


def test_a_parquet_category_column_is_text(tmp_path: Path) -> None:
    """Before: refused as 'holds dictionary<values=string, ...>, not text' (pandas saves a category column so)."""
    path = tmp_path / "pairs.parquet"
    sentences = pa.array(["a cat", "a dog"]).dictionary_encode()
    pq.write_table(pa.table({"sentence1": sentences, "sentence2": ["sits", "runs"], "label": [0.2, 0.8]}), path)
    result = read_pairs(SourceSpec(path=path), "regression")
    assert result.table.column("sentence1").to_pylist() == ["a cat", "a dog"] and not result.rejects


def test_named_formats_read_cleanly(data_dir: Path) -> None:
    stsb = read_pairs(SourceSpec(path=data_dir / "stsb/sts-train.csv", format="stsb"), "regression")
    assert stsb.table.num_rows == 5749 and not stsb.rejects  # SOURCE.txt: train 5749, 9-field lines included
    assert stsb.table.slice(0, 1).to_pylist()[0]["label"] == 1.0  # 5.000 / 5
    mrpc = read_pairs(SourceSpec(path=data_dir / "mrpc/msr_paraphrase_train.txt", format="mrpc"), "classification")
    assert mrpc.table.num_rows == 4076 and sum(mrpc.table.column("label").to_pylist()) == 2753
    bws = read_pairs(SourceSpec(path=data_dir / "bws/BWS_corpus.csv", format="bws"), "regression")
    assert bws.table.num_rows == 3400 and len(set(bws.table.column("topic").to_pylist())) == 8


def test_stsb_bad_lines_become_rejects(tmp_path: Path) -> None:
    path = tmp_path / "sts.csv"
    path.write_text("g\tf\t2012\t1\t3.2\tA \"quoted\tB\ng\tf\t2012\t2\t7.0\tA\tB\ng\tf\t2012\t3\n")
    result = read_pairs(SourceSpec(path=path, format="stsb"), "regression")
    assert result.table.column("sentence1").to_pylist() == ['A "quoted']
    assert reasons(result) == [(2, "label", "score"), (3, "sentence1", "missing")]


def test_stsb_and_jsonl_lines_with_a_cr_or_only_blanks_are_counted(tmp_path: Path) -> None:
    """Before: with CR-only line ends a whole STSb file was one accepted pair (sentence2 ran into the next record) and
    the other records vanished; a line of tabs only was skipped uncounted. Only an empty line is not a row."""
    path = tmp_path / "sts.csv"
    path.write_text("".join(f"g\tf\t2012\t{i}\t3.2\tsentence a{i}\tsentence b{i}\r" for i in range(5)), newline="")
    result = read_pairs(SourceSpec(path=path, format="stsb"), "regression")
    assert (result.rows_read, result.table.num_rows) == (1, 0)
    assert [(r.line, r.reason) for r in result.rejects] == [
        (1, "a CR (\\r) inside the line: CR-only line ends? save the file with LF or CRLF line ends")]
    path.write_text("g\tf\t2012\t1\t3.2\tA\tB\n\t\t\t\t\t\t\n\ng\tf\t2012\t2\t1.0\tC\tD\n")
    result = read_pairs(SourceSpec(path=path, format="stsb"), "regression")
    assert result.rows_read == 3 and result.table.num_rows == 2 and [line for line, _, _ in reasons(result)] == [2]
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"sentence1": "a", "sentence2": "b", "label": 0.5}\n   \n')
    result = read_pairs(SourceSpec(path=path, score_range=(0, 1)), "regression")
    assert result.rows_read == 2 and [(r.line, r.reason.split(":")[0]) for r in result.rejects] == [(2, "invalid JSON")]


def test_a_score_with_an_underscore_is_not_a_number(tmp_path: Path) -> None:
    """float("0_5") is 5.0 (Python's digit separator): before, it was accepted as 5 (1.0 on a 0-5 scale)."""
    path = tmp_path / "pairs.csv"
    path.write_text("sentence1,sentence2,label\na,b,0_5\nc,d,2.5\n")
    result = read_pairs(SourceSpec(path=path, score_range=(0, 5)), "regression")
    assert result.table.column("label").to_pylist() == [0.5] and reasons(result) == [(2, "label", "non-numeric")]


def test_every_accepted_gold_pair_is_in_a_split_or_a_count(data_dir: Path, tmp_path: Path) -> None:
    """accepted = train before train_limit + dev + test + repeats removed + overlap dropped + left out by eval_limit +
    the dataset's own pairs of splits given as files. Before: eval_limit's and the replaced BWS test pairs (850 of
    them) were in none."""
    def unaccounted(gold) -> int:
        kept = gold.train_before_limit + gold.dev.num_rows + gold.test.num_rows
        removed = sum(gold.duplicates.values()) + gold.overlap_dropped + sum(gold.eval_limit_dropped.values()) + gold.replaced_by_files
        return gold.rows_read - len(gold.rejects) - kept - removed

    stsb = load_gold(DataSpec(dataset="stsb", eval_limit=200, train_limit=100), seed=42, data_dir=data_dir)
    assert stsb.eval_limit_dropped == {"dev": 1297, "test": 1177} and unaccounted(stsb) == 0
    test_file = tmp_path / "test.csv"
    test_file.write_text("sentence1,sentence2,label\n" + "".join(f"a{i},b{i},0.5\n" for i in range(20)))
    bws = load_gold(DataSpec(dataset="bws", test={"path": str(test_file)}), seed=42, data_dir=data_dir)
    assert bws.test.num_rows == 20 and bws.replaced_by_files == 850 and unaccounted(bws) == 0


def test_a_transfer_source_keeps_none_of_the_targets_dev_and_test_pairs(data_dir: Path) -> None:
    """STSb's MSRpar part comes from MRPC: its train holds 498 of MRPC's 1,725 test pairs and 61 of the 408 dev
    pairs carved at seed 42. Before, transfer STSb -> MRPC fitted the teacher and SBERT-source on them, labels and all."""
    target = load_gold(DataSpec(dataset="mrpc"), seed=42, data_dir=data_dir)
    held_out = {f"target_{split}": target.split(split) for split in ("dev", "test")}
    source = load_gold(DataSpec(dataset="stsb"), seed=42, data_dir=data_dir, held_out=held_out)
    assert source.overlap == {"dev": 7, "test": 12, "target_dev": 61, "target_test": 498}
    assert source.overlap_dropped == 18 + 559 and source.train_before_limit == 5749 - 57 - 18 - 559
    assert not set(pair_keys(source.train)) & {key for table in held_out.values() for key in pair_keys(table)}


def test_load_gold_splits_and_limit(data_dir: Path) -> None:
    stsb = load_gold(DataSpec(train_limit=1000), seed=1, data_dir=data_dir)
    again = load_gold(DataSpec(train_limit=1000), seed=1, data_dir=data_dir)
    other = load_gold(DataSpec(train_limit=1000), seed=2, data_dir=data_dir)
    # STSb repeats 57 train, 3 dev and 2 test pairs (14, 0 and 1 of them with another label); 7 dev and 12 test
    # pairs are also in train, 18 train pairs in all (one is in both), and leave train; 3 test pairs are also in dev
    assert (stsb.train.num_rows, stsb.dev.num_rows, stsb.test.num_rows) == (1000, 1500 - 3, 1379 - 2)
    assert stsb.train.equals(again.train) and not stsb.train.equals(other.train)
    assert stsb.rows_read == 8628 and stsb.train_before_limit == 5749 - 57 - 18
    assert stsb.cleaning_counts("gold_") == {
        "gold_duplicates": {"train": 57, "dev": 3, "test": 2}, "gold_duplicates_kept": False,
        "gold_label_conflicts": {"train": 14, "dev": 0, "test": 1},
        "gold_overlap": {"dev": 7, "test": 12}, "gold_overlap_dropped": 18, "gold_dev_test_overlap": 3,
        "gold_replaced_by_files": 0, "gold_eval_limit_dropped": {},
    }
    kept = load_gold(DataSpec(on_overlap="keep"), seed=1, data_dir=data_dir)
    assert kept.train_before_limit == 5749 - 57 and kept.overlap == {"dev": 7, "test": 12} and kept.overlap_dropped == 0
    # the splits of runs made before repeats and overlaps were dropped: every pair as read, the same subset drawn
    as_read = load_gold(DataSpec(train_limit=1000, duplicates="keep", on_overlap="keep"), seed=1, data_dir=data_dir)
    assert (as_read.train_before_limit, as_read.dev.num_rows, as_read.test.num_rows) == (5749, 1500, 1379)
    assert as_read.duplicates == {"train": 57, "dev": 3, "test": 2} and as_read.duplicates_kept

    mrpc = load_gold(DataSpec(dataset="mrpc"), seed=1, data_dir=data_dir)
    assert mrpc.task == "classification" and mrpc.train.num_rows + mrpc.dev.num_rows == 4076

    cross = load_gold(DataSpec(dataset="bws"), seed=1, data_dir=data_dir)
    assert set(cross.test.column("topic").to_pylist()) == {"Nuclear energy", "School uniforms"}
    in_topic = load_gold(DataSpec(dataset="bws", bws_split="in-topic"), seed=1, data_dir=data_dir)
    sizes = (in_topic.train.num_rows, in_topic.dev.num_rows, in_topic.test.num_rows)
    assert sum(sizes) == 3400 and abs(sizes[0] - 2471) < 10 and abs(sizes[1] - 478) < 10


def test_a_split_file_replaces_that_split_of_bws_too(data_dir: Path, tmp_path: Path) -> None:
    """Before: BWS's one file, split after reading, overwrote the test file given (read and counted, then unused)."""
    test = tmp_path / "test.csv"
    test.write_text("sentence1,sentence2,label\na cat,a dog,0.2\nrain falls,sun shines,0.4\nx y,y z,0.9\n")
    gold = load_gold(DataSpec(dataset="bws", test=SourceSpec(path=test)), seed=1, data_dir=data_dir)
    assert gold.test.column("sentence1").to_pylist() == ["a cat", "rain falls", "x y"]
    assert set(gold.dev.column("topic").to_pylist()) == {"Minimum wage"}  # the other splits: BWS's


def test_data_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUGSBERT_DATA_DIR", str(tmp_path))
    assert resolve_data_dir() == tmp_path.resolve()
    with pytest.raises(DataNotFoundError, match="dataset 'stsb' is missing .*sts-train.csv.*AUGSBERT_DATA_DIR"):
        load_gold(DataSpec(), seed=1)
    monkeypatch.delenv("AUGSBERT_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataNotFoundError, match=r"shared/data .* does not exist: get the files"):
        resolve_data_dir()


def test_reject_fraction_gate(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("sentence1,sentence2,label\n" + "a,b,0.5\n" * 98 + "a,,0.5\na,b,x\n")
    result = read_pairs(SourceSpec(path=path), "regression")
    rejects_file = tmp_path / "rejects.jsonl"
    write_rejects(result.rejects, rejects_file)
    assert [json.loads(line)["line"] for line in rejects_file.read_text().splitlines()] == [100, 101]
    check_reject_fraction(result.rows_read, result.rejects, 0.02, rejects_file)  # 2% is allowed
    with pytest.raises(TooManyRejectsError, match=r"2 of 100 rows rejected .*pairs.csv:100 field 'sentence2'"):
        check_reject_fraction(result.rows_read, result.rejects, 0.01, rejects_file)
