"""The labeling engine: scores, resume after a kill, counts with rejects, bad-input errors, int8 and bf16."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.cli import main
from augsbert_ray.config import LabelingSpec
from augsbert_ray.labeling import LabelJob, LabelResult, Teacher, label_files

REPO = Path(__file__).resolve().parents[1]


def stsb_pairs(data_dir: Path, count: int) -> list[tuple[str, str]]:
    lines = (data_dir / "stsb" / "sts-train.csv").read_text(encoding="utf-8").splitlines()[:count]
    return [tuple(line.split("\t")[5:7]) for line in lines]


def pair_table(pairs: list[tuple[str | None, str | None]]) -> pa.Table:
    return pa.table({
        "sentence1": [a for a, _ in pairs], "sentence2": [b for _, b in pairs], "pair_id": np.arange(len(pairs)),
    })


@pytest.mark.parametrize("runtime", ["auto", "torch"])  # auto on CPU: ONNX Runtime fp32
def test_scores_equal_a_direct_model_call(runtime: str, ray_session, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path) -> None:
    """The engine's scores are the model's. And a pool's first output comes when its first shard is labeled (a slow
    teacher: tens of minutes): Ray Data's guard against executions without progress, here 1 s, must not stop it."""
    import ray.data
    from sentence_transformers import CrossEncoder

    pairs = stsb_pairs(data_dir, 600)
    pq.write_table(pair_table(pairs), tmp_path / "pairs.parquet", row_group_size=150)
    spec = LabelingSpec(batch_size=32, min_actors=1, max_actors=2, shard_rows=150, runtime=runtime)
    context = ray.data.DataContext.get_current()
    default, context.execution_no_progress_timeout_s = context.execution_no_progress_timeout_s, 1
    try:
        result = label_files(str(tmp_path / "pairs.parquet"), tmp_path / "silver",
                             LabelJob(Teacher.cross_encoder(str(tiny_cross_encoder)), spec, "tiny@test"))
    finally:
        context.execution_no_progress_timeout_s = default
    silver = pq.read_table(tmp_path / "silver").sort_by("pair_id")

    assert (result.pairs_in, result.labeled, result.shards) == (600, 600, 4)
    assert silver.column_names == ["sentence1", "sentence2", "pair_id", "score", "labeler", "strategy"]
    assert silver.column("pair_id").to_pylist() == list(range(600))
    assert set(silver.column("labeler").to_pylist()) == {"tiny@test"}
    assert set(silver.column("strategy").to_pylist()) == {"given"}
    direct = CrossEncoder(str(tiny_cross_encoder)).predict(pairs, batch_size=64)
    assert np.ptp(direct) > 0  # the comparison below is between real, varied scores
    assert np.max(np.abs(silver.column("score").to_numpy() - direct)) < 1e-5
    assert (tmp_path / "silver" / "_onnx").is_dir() == (runtime == "auto")


def test_counts_add_up_with_rejects_and_truncation(label_as_a_fresh_process, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path) -> None:
    pairs: list = list(stsb_pairs(data_dir, 200))
    pairs[3] = ("", pairs[3][1])
    pairs[50] = (pairs[50][0], None)
    pairs[120] = ("   ", "also rejected: the other side is blank")
    pairs[7] = (" ".join(["word"] * 80), pairs[7][1])  # beyond max_seq_length: truncated, still labeled
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "pair_id": i}) + "\n" for i, (a, b) in enumerate(pairs)))

    spec = LabelingSpec(batch_size=16, shard_rows=64, max_seq_length=32)
    result = label_files(str(path), tmp_path / "silver", LabelJob(Teacher.cross_encoder(str(tiny_cross_encoder)), spec, "tiny@test"))

    assert (result.pairs_in, result.labeled, result.totals["rejected"]) == (200, 197, 3)
    assert result.totals["truncated"] >= 1
    assert "pairs in 200 = labeled 197 + rejected 3" in result.summary()
    rejects = [json.loads(line) for line in result.rejects.read_text().splitlines()]
    assert [(r["line"], r["field"], r["reason"]) for r in rejects] == [
        (4, "sentence1", "empty sentence"), (51, "sentence2", "missing sentence"), (121, "sentence1", "empty sentence"),
    ]
    silver = pq.read_table(tmp_path / "silver")
    assert sorted(silver.column("pair_id").to_pylist()) == sorted(set(range(200)) - {3, 50, 120})
    manifest = json.loads(result.manifest.read_text())
    assert manifest["complete"] and manifest["totals"]["pairs_in"] == 200 and len(manifest["shards"]) == 4
    assert sum(shard["labeled"] for shard in manifest["shards"].values()) == 197


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.slow
def test_resume_after_a_kill_labels_every_pair_once(ray_session, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path) -> None:
    """`augsbert label` with one CPU actor and no Ray labels in its own process: SIGKILLed mid-shard and run again, it
    labels every pair once, and its labels equal those of the engine's actor pool in this session's Ray."""
    pairs = stsb_pairs(data_dir, 300) * 20  # 6000 pairs, 24 shards
    pq.write_table(pair_table(pairs), tmp_path / "pairs.parquet", row_group_size=250)
    output = tmp_path / "silver"
    command = [sys.executable, "-m", "augsbert_ray.cli", "label", "--model", str(tiny_cross_encoder),
               "--input", str(tmp_path / "pairs.parquet"), "--output", str(output), "--shard-rows", "250",
               "--batch-size", "8", "--max-seq-length", "128"]
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}  # its own local Ray
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(list(output.glob("part-*.parquet"))) < 2:
        assert process.poll() is None and time.monotonic() < deadline, "the first run ended before it could be killed"
        time.sleep(0.05)
    tree = _tree(process.pid)  # the labeling process, mid-shard
    for proc in tree:
        proc.send_signal(signal.SIGKILL)
    process.wait()
    psutil.wait_procs(tree, timeout=10)

    finished = {path.name: path.stat().st_mtime_ns for path in output.glob("part-*.parquet")}
    assert 2 <= len(finished) < 24, f"kill landed after {len(finished)} of 24 shards"

    rerun = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"shards: 24, {len(finished)} already done" in rerun.stdout
    assert "pairs in 6000 = labeled 6000 + rejected 0" in rerun.stdout
    ids = pq.read_table(output, columns=["pair_id"]).column("pair_id").to_pylist()
    assert sorted(ids) == list(range(6000))  # every pair, none twice
    assert {name: (output / name).stat().st_mtime_ns for name in finished} == finished  # not rewritten
    assert not list(output.glob(".*.tmp"))
    assert "Started a local Ray" not in rerun.stderr + (output / "_label.log").read_text(encoding="utf-8")  # none was started

    spec = LabelingSpec(shard_rows=250, batch_size=8, max_seq_length=128)
    on_ray = label_files(str(tmp_path / "pairs.parquet"), tmp_path / "on_ray", LabelJob(Teacher.cross_encoder(str(tiny_cross_encoder)), spec))
    assert on_ray.labeled == 6000
    by_id = [pq.read_table(path, columns=["pair_id", "score"]).sort_by("pair_id") for path in (output, tmp_path / "on_ray")]
    assert by_id[0].equals(by_id[1])


def test_resume_refuses_an_input_edited_in_place_and_a_teacher_whose_config_changed(
    tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path
) -> None:
    """Before, the job key held the input's size and the teacher's weights only: a same-size edit of the input, or a
    cross-encoder whose activation changed, resumed and mixed its shards with the earlier labels."""
    from augsbert_ray.config import SpecError
    from augsbert_ray.labeling.engine import MANIFEST, label_shards
    from augsbert_ray.labeling.plan import plan_shards

    pairs = stsb_pairs(data_dir, 200)
    path, output, teacher = tmp_path / "pairs.jsonl", tmp_path / "silver", tmp_path / "teacher"
    text = "".join(json.dumps({"sentence1": a, "sentence2": b}) + "\n" for a, b in pairs)
    path.write_text(text, encoding="utf-8")
    shutil.copytree(tiny_cross_encoder, teacher)
    job = LabelJob(Teacher.cross_encoder(str(teacher)), LabelingSpec(shard_rows=100))

    def label() -> LabelResult:
        return label_shards(plan_shards([str(path)], "jsonl", job.text_columns, 100), output, job, here=True)

    assert label().skipped == 0
    manifest = json.loads((output / MANIFEST).read_text())
    for entry in ("input_digests", "teacher_settings"):  # as an earlier version wrote it: it resumes as before
        del manifest["job"][entry]
    (output / MANIFEST).write_text(json.dumps(manifest))
    assert (label().skipped, label().skipped) == (2, 2)

    edited = text.replace(pairs[150][0], pairs[150][0][::-1], 1)
    assert edited != text and len(edited.encode()) == len(text.encode())
    path.write_text(edited, encoding="utf-8")
    with pytest.raises(SpecError, match=r"holds labels from other settings \(input_digests differ\)"):
        label()
    path.write_text(text, encoding="utf-8")

    settings = teacher / "config_sentence_transformers.json"
    config = json.loads(settings.read_text())
    assert config["activation_fn"] == "torch.nn.modules.activation.Sigmoid"
    settings.write_text(json.dumps({**config, "activation_fn": "torch.nn.modules.linear.Identity"}))
    with pytest.raises(SpecError, match=r"holds labels from other settings \(teacher_settings differ\)"):
        label()


@pytest.mark.parametrize("case", ["missing column", "repeated column", "mixed formats", "tsv", "json array", "unreadable file", "no model", "no gpu"])
def test_bad_input_gives_one_clear_error(case: str, label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    good = tmp_path / "pairs.parquet"
    pq.write_table(pair_table([("a b", "c d")]), good)
    args = ["label", "--model", str(tiny_cross_encoder), "--input", str(good), "--output", str(tmp_path / "out")]
    expected = {
        "missing column": "no column 'text_b'",
        "repeated column": "repeated.csv: column 'sentence1' appears 2 times",  # was: arrow's "Invalid column index"
        "mixed formats": f"the inputs mix formats (csv: {tmp_path / 'in' / 'a.csv'}, parquet: {tmp_path / 'in' / 'b.parquet'})",
        "tsv": "pairs.tsv: tsv is not read here, only parquet, csv, jsonl; convert the file",  # was: "pass --format"
        "json array": "pairs.json: a JSON array; jsonl is JSON Lines, one object per line",  # was: "Empty JSON file"
        "unreadable file": "cannot read as parquet",
        "no model": "model path not found",
        "no gpu": "but the Ray cluster has 0 GPUs",
    }[case]
    if case == "missing column":
        args += ["--text-columns", "sentence1,text_b"]
    elif case == "repeated column":
        (tmp_path / "repeated.csv").write_text("sentence1,sentence2,sentence1\na,b,c\n")
        args[4] = str(tmp_path / "repeated.csv")
    elif case == "mixed formats":  # was: every file read as the first one's format, with a misleading error
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "a.csv").write_text("sentence1,sentence2\na b,c d\n")
        pq.write_table(pair_table([("a b", "c d")]), tmp_path / "in" / "b.parquet")
        args[4] = str(tmp_path / "in")
    elif case == "tsv":
        (tmp_path / "pairs.tsv").write_text("sentence1\tsentence2\na b\tc d\n")
        args[4] = str(tmp_path / "pairs.tsv")
    elif case == "json array":
        (tmp_path / "pairs.json").write_text('[{"sentence1": "a b", "sentence2": "c d"},\n {"sentence1": "e", "sentence2": "f"}]\n')
        args[4] = str(tmp_path / "pairs.json")
    elif case == "unreadable file":
        (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
        args[4] = str(tmp_path / "broken.parquet")
    elif case == "no model":
        args[2] = str(tmp_path / "no_such_model")
    else:
        args += ["--gpus-per-actor", "1"]

    assert main(args) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("augsbert label: error:") and expected in errors[0], errors
    assert not list((tmp_path / "out").glob("part-*")), "no work may start on bad input"


def test_int8_and_bf16_labels_correlate_with_fp32(label_as_a_fresh_process, minilm_with_trained_head: Path, data_dir: Path, tmp_path: Path) -> None:
    from scipy.stats import spearmanr

    lines = (data_dir / "stsb" / "sts-test.csv").read_text(encoding="utf-8").splitlines()[:300]
    pq.write_table(pair_table([tuple(line.split("\t")[5:7]) for line in lines]), tmp_path / "pairs.parquet")
    scores = {}
    for precision in ("fp32", "int8", "bf16"):
        spec = LabelingSpec(batch_size=32, cpus_per_actor=2, precision=precision)
        label_files(str(tmp_path / "pairs.parquet"), tmp_path / precision, LabelJob(Teacher.cross_encoder(str(minilm_with_trained_head)), spec, "m"))
        scores[precision] = pq.read_table(tmp_path / precision).sort_by("pair_id").column("score").to_numpy()
    assert np.std(scores["fp32"]) > 0.05
    assert spearmanr(scores["int8"], scores["fp32"])[0] >= 0.99
    assert (tmp_path / "int8" / "_onnx").is_dir()
    assert spearmanr(scores["bf16"], scores["fp32"])[0] >= 0.99
    assert not np.array_equal(scores["bf16"], scores["fp32"])  # bf16 really ran


def test_actors_cast_their_weights_and_gpu_actors_tokenize_on_their_cpus(monkeypatch, tiny_model: Path) -> None:
    """bf16/fp16 are half-precision weights (no cast per operation, on CPU too); a GPU actor's tokenizer gets the
    actor's CPUs, a CPU actor's one thread (the bench's GPU run measures the GPU side)."""
    import torch

    from augsbert_ray.scoring.backend import EmbeddingModel, weights_dtype, use_tokenizer_threads

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    use_tokenizer_threads("cpu", 4)
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false" and "RAYON_NUM_THREADS" not in os.environ
    use_tokenizer_threads("cuda", 4)
    assert (os.environ["TOKENIZERS_PARALLELISM"], os.environ["RAYON_NUM_THREADS"]) == ("true", "4")

    assert (weights_dtype("bf16"), weights_dtype("fp16"), weights_dtype("fp32")) == (torch.bfloat16, torch.float16, None)
    bf16 = EmbeddingModel(str(tiny_model), "bf16", 1, None)
    assert {parameter.dtype for parameter in bf16.encoder.parameters()} == {torch.bfloat16}
    embeddings = bf16.embed(["a cat sat on the mat", "a dog"], 2)
    assert embeddings.dtype == np.float32 and np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-2)


def test_a_labeler_runs_on_the_gpu_it_reserved_and_only_there(monkeypatch) -> None:
    """Labeling in the driver (one CPU actor: labels_in_process) on a machine with a GPU: before, it ran there, and
    at `--precision int8` (ONNX Runtime, CPU only) it labeled fp32 on the GPU under an int8 manifest."""
    import torch

    from augsbert_ray.scoring.backend import actor_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    assert actor_device("int8", 1, gpu=False) == ("cpu", None)
    assert actor_device("fp16", 2, gpu=True) == ("cuda", torch.float16)
    # an actor that reserved a GPU its torch cannot see (a CPU build) stops; before, it labeled on the CPU in silence
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"reserved a GPU, but torch .* there sees none .* or set labeling.gpus_per_actor: 0$"):
        actor_device("fp16", 2, gpu=True)


def test_batch_widths_rounded_up_leave_the_scores_unchanged(minilm_with_trained_head: Path, data_dir: Path) -> None:
    """GPU actors at bf16/fp16 pad each batch to a multiple of 8 tokens (fewer shapes to meet): the mask keeps
    the extra padding out of every score."""
    from augsbert_ray.labeling.scorer import COUNT_KEYS
    from augsbert_ray.scoring import CrossEncoderScorer
    from augsbert_ray.scoring.backend import PairModel

    pairs = stsb_pairs(data_dir, 100)
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    model = PairModel(str(minilm_with_trained_head), "fp32", 1, None, None, runtime="torch")
    assert model.width_multiple == 1  # CPU
    stats = {multiple: dict.fromkeys(COUNT_KEYS, 0) for multiple in (1, 8)}
    exact = CrossEncoderScorer(model, 16).score(first, second, stats[1])
    model.width_multiple = 8
    rounded = CrossEncoderScorer(model, 16).score(first, second, stats[8])
    assert np.std(exact) > 0.05 and np.max(np.abs(rounded - exact)) < 1e-5
    assert stats[8]["tokens"] == stats[1]["tokens"] and stats[8]["padded_tokens"] > stats[1]["padded_tokens"]
    assert CrossEncoderScorer(model, 16).batch_width(np.array([9, 17])) == 24


def test_sentence_list_is_paired_by_a_sampling_strategy(label_as_a_fresh_process, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path, capsys) -> None:
    sentences = sorted({s for pair in stsb_pairs(data_dir, 100) for s in pair})
    (tmp_path / "sentences.txt").write_text("\n".join(sentences) + "\n\n")
    args = ["label", "--model", str(tiny_cross_encoder), "--sentences", str(tmp_path / "sentences.txt"),
            "--strategy", "random", "--pairs", "120", "--output", str(tmp_path / "out")]
    assert main(args) == 0
    assert "pairs in 120 = labeled 120 + rejected 0" in capsys.readouterr().out
    silver = pq.read_table(tmp_path / "out")
    assert silver.num_rows == 120 and set(silver.column("strategy").to_pylist()) == {"random"}
    pairs = {frozenset(p) for p in zip(silver.column("sentence1").to_pylist(), silver.column("sentence2").to_pylist())}
    assert len(pairs) == 120 and all(len(p) == 2 for p in pairs)  # no self-pairs, (a,b) = (b,a) once
    assert main(args) == 0  # same arguments: the shard is kept
    assert "1 already done" in capsys.readouterr().out


def test_csv_shards_end_at_records_not_at_quoted_newlines(tmp_path: Path) -> None:
    from augsbert_ray.labeling.plan import plan_shards, read_shard

    path = tmp_path / "pairs.csv"
    path.write_text('sentence1,sentence2,id\na,"b, with a comma",0\n"two\nlines",c,1\nd,e,2\n"""quoted""",f,3\ng,h,4')
    shards = plan_shards([str(path)], "csv", ("sentence1", "sentence2"), shard_rows=2)
    assert [shard.first_row for shard in shards] == [0, 2, 4]
    assert [shard.first_line for shard in shards] == [1, 5, 7]
    windows = [window for shard in shards for window in read_shard(shard, window=10)]
    rows = [row for window in windows for row in window.table.to_pylist()]
    assert [list(window.lines) for window in windows] == [[2, 3], [5, 6], [7]]  # where each record starts
    assert [row["id"] for row in rows] == [0, 1, 2, 3, 4]
    assert [row["sentence1"] for row in rows] == ["a", "two\nlines", "d", '"quoted"', "g"]
    assert len({shard.name for shard in shards}) == 3
    assert [s.name for s in plan_shards([str(path)], "csv", ("sentence1", "sentence2"), shard_rows=2)] == [s.name for s in shards]


def read_in_shards(path: Path, shard_rows: int) -> tuple[list[dict], list[int], list[tuple[int, str]]]:
    from augsbert_ray.labeling.plan import plan_shards, read_shard

    rows, lines, rejects = [], [], []
    for shard in plan_shards([str(path)], "csv", ("s1", "s2"), shard_rows):
        for window in read_shard(shard, window=100):
            rows += window.table.to_pylist()
            lines += window.lines.tolist()
            rejects += [(reject.line, reject.reason) for reject in window.rejects]
    return rows, lines, rejects


@pytest.mark.parametrize("scan_chunk", [4 << 20, 1, 2, 5], ids=["default", "1-byte", "2-byte", "5-byte"])
def test_csv_shards_read_what_arrow_reads_from_the_whole_file(tmp_path: Path, monkeypatch, scan_chunk: int) -> None:
    """Before: the shard plan took every quote for a field's start or end, and only newlines for line ends, so a
    stray quote (`5" screen`) or CR line ends cut shards inside records or not at all: in 2,253 of 6,000 such
    random files the shards held other rows than arrow reads from the whole file. Small scan chunks cut quoted
    fields, CRLFs and quote runs between chunks (the plan carries an open field from one chunk to the next)."""
    import random

    import pyarrow.csv as pacsv

    from augsbert_ray.labeling import plan

    monkeypatch.setattr(plan, "SCAN_CHUNK", scan_chunk)

    pieces = ["a", "b c", '"q"', '"x\ny"', '"p""q"', '5" s', "", '""', '"""a\n"""', 'x"y', '"a"b', '"a\n"b"c', '"""', ' "z"']
    options = pacsv.ReadOptions(column_names=["s1", "s2"], skip_rows=1, use_threads=False)
    chance = random.Random(0)
    for _ in range(300):
        records = [",".join(chance.choice(pieces) for _ in range(chance.choice([2, 2, 3]))) for _ in range(chance.randint(1, 12))]
        end = chance.choice(["\n", "\r\n", "\r"])
        content = ("s1,s2" + end + end.join(records) + chance.choice([end, ""])).encode()
        (tmp_path / "pairs.csv").write_bytes(content)
        whole = pacsv.read_csv(io.BytesIO(content), read_options=options, parse_options=pacsv.ParseOptions(invalid_row_handler=lambda row: "skip"),
                               convert_options=pacsv.ConvertOptions(column_types={"s1": pa.string(), "s2": pa.string()}))
        assert read_in_shards(tmp_path / "pairs.csv", chance.choice([1, 2, 3]))[0] == whole.to_pylist(), content


def test_csv_rows_and_rejects_name_the_line_where_their_record_starts(tmp_path: Path) -> None:
    """Before: record numbers (the header not counted, a blank line counted in one shard and not in another)."""
    path = tmp_path / "pairs.csv"
    path.write_bytes(b's1,s2\r\na,5" screen\r\n\r\nc,d\r\n"x\r\ny",z\r\ne,f,g\r\nh,i')
    rows, lines, rejects = read_in_shards(path, shard_rows=2)
    assert [row["s1"] for row in rows] == ["a", "c", "x\r\ny", "h"]
    assert lines == [2, 4, 5, 8]
    assert rejects == [(7, "expected 2 fields, got 3")]


def test_a_csv_record_that_is_not_utf8_is_a_reject_and_a_header_an_error(tmp_path: Path) -> None:
    """Before: a latin-1 byte in the first MB refused the whole file without a line, one later stopped the command."""
    from augsbert_ray.config import SpecError
    from augsbert_ray.data.formats import read_schema

    path = tmp_path / "pairs.csv"
    path.write_bytes(b"s1,s2\na,b\ncaf\xe9,x\n" + b"".join(b"c%d,d\n" % i for i in range(4)) + b"\xe9t\xe9,y\n")
    rows, lines, rejects = read_in_shards(path, shard_rows=3)
    assert [row["s1"] for row in rows] == ["a", "c0", "c1", "c2", "c3"]
    assert lines == [2, 4, 5, 6, 7]
    assert rejects == [(3, "bad UTF-8"), (8, "bad UTF-8")]
    path.write_bytes(b"s\xe91,s2\na,b\n")
    with pytest.raises(SpecError, match=r"pairs.csv:1: the header is not UTF-8 \(invalid continuation byte\); save the file as UTF-8$"):
        read_schema(str(path), "csv", ("s1", "s2"))


def test_int8_smoothing_keeps_the_fp32_function(tiny_cross_encoder: Path, data_dir: Path) -> None:
    """The smoothed copy that int8 quantizes computes what the model does: only the int8 rounding may differ."""
    import torch

    from augsbert_ray.scoring.backend import PairModel, _smoothed

    lines = (data_dir / "stsb" / "sts-dev.csv").read_text(encoding="utf-8").splitlines()[:40]
    pairs = [tuple(line.split("\t")[5:7]) for line in lines]
    model = PairModel(str(tiny_cross_encoder), "fp32", 1, 64, None, runtime="torch")
    smoothed = _smoothed(model, pairs[:20])
    wrapped = [name for name, module in smoothed[0].auto_model.named_modules() if type(module).__name__ == "Smoothed"]
    assert wrapped and not any(name.endswith("output.dense") and "attention" not in name for name in wrapped)
    features = model.tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = model.cross_encoder[0].auto_model(**features).logits
        actual = smoothed[0].auto_model(**features).logits
    assert torch.allclose(actual, expected, atol=1e-5)
