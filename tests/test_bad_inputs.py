"""Issue 26, nothing silently wrong: every bad input gets exit status 2 and one line naming the file, line or field,
or a counted reject. `augsbert evaluate` on bad pair files and model directories, Ray auth token files, plain-http
token transport, the local cluster's state dir, job names that leave output_dir, the embedded Ray's ports, unusable
output directories, malformed records met inside Ray tasks, sentence columns of numbers, `augsbert label`'s flags and
empty inputs, unreachable cluster addresses, and failures that come through Ray (one line, exit 1)."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from ray.train import WorkerGroupError

from augsbert_ray.cli import main, ray_failure
from augsbert_ray.config import SpecError, load_spec
from augsbert_ray.evaluation import UnusableScores
from augsbert_ray.data import check_gold_usable, load_gold, read_sentences
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.pipeline.gold import read_gold
from augsbert_ray.pipeline.result import RunResult
from augsbert_ray.report import write_report
from augsbert_ray.runtime import InsecureTokenError, check_gcs, check_token_file, connect_timeout

REPO = Path(__file__).resolve().parents[1]
START, STOP = REPO / "cluster" / "local" / "start.sh", REPO / "cluster" / "local" / "stop.sh"
OTHER_UID = 65534  # nobody
NO_SESSION = 2**31 - 1  # a session id no process has: were a refusal missed, stop.sh would signal nothing


def pair_file(path: Path, labels: list[str], tag: str = "") -> Path:
    """A csv of distinct pairs with these label cells (line 2 holds the first); files of different tags share no pair."""
    rows = [f"a cat sits on mat {tag}{i},a dog runs in park {i * 7 % 11},{label}" for i, label in enumerate(labels)]
    path.write_text("sentence1,sentence2,label\n" + "".join(row + "\n" for row in rows))
    return path


def scores(count: int) -> list[str]:
    return [f"{(i * 37 % 100) / 100:.2f}" for i in range(count)]


def evaluate(capsys, model: Path, *args: str) -> tuple[int, str, str]:
    code = main(["evaluate", str(model), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_line(err: str) -> str:
    """The one error line (stderr may hold the counts before it)."""
    lines = [line for line in err.splitlines() if line.startswith("augsbert ")]
    assert len(lines) == 1, err
    return lines[0]


# --- augsbert evaluate: rejects are counted and shown -------------------------------------------------------


def test_evaluate_counts_and_lists_a_nan_label(tiny_model: Path, tmp_path: Path, capsys) -> None:
    labels = scores(100)
    labels[5] = "nan"  # line 7
    data = pair_file(tmp_path / "pairs.csv", labels)
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data))
    assert code == 0, err
    assert "read 100 rows: 99 accepted, 1 rejected\n" in err
    assert f"  rejected {data}:7 field 'label': non-finite score 'nan'\n" in err
    assert json.loads(out)["rows"] == {"read": 100, "accepted": 99, "rejected": 1, "dev": 99, "test": 99}


def test_an_unreadable_data_file_is_one_line(tiny_model: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file its user may not read (the OS's answer is simulated: these tests run as root, whom no mode stops).
    Before: PermissionError's traceback."""
    data = pair_file(tmp_path / "pairs.csv", scores(10))
    opened = Path.open

    def refused(path: Path, *args: object, **kwargs: object) -> object:
        if path == data:
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refused)
    code, _, err = evaluate(capsys, tiny_model, "--data", str(data))
    assert code == 2 and err == f"augsbert evaluate: error: [Errno 13] Permission denied: '{data}'\n"


def test_evaluate_writes_rejects_to_a_file(tiny_model: Path, tmp_path: Path, capsys) -> None:
    labels = scores(100)
    labels[9] = ""  # line 11
    data, rejects = pair_file(tmp_path / "pairs.csv", labels), tmp_path / "out" / "rejects.jsonl"
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data), "--rejects", str(rejects))
    assert code == 0, err
    assert f"read 100 rows: 99 accepted, 1 rejected (see {rejects})" in err and "  rejected " not in err
    written = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(row["file"], row["line"], row["field"], row["reason"]) for row in written] == [(str(data), 11, "label", "missing field")]
    assert json.loads(out)["rows"]["read"] == 100


@pytest.mark.parametrize(("flags", "message"), [
    (["--data", "mrpc", "--dev", "dev.csv"], "--dev is for pair files; the named dataset mrpc has its own"),
    (["--data", "stsb", "--format", "csv"], "--format is for pair files; the named dataset stsb has its own"),
    (["--data", "stsb", "--rejects", "."], "--rejects .: a directory; give a file to write the rejected rows to"),
    (["--data", "stsb", "--rejects", ""], "--rejects '': a directory; give a file to write the rejected rows to"),
    (["--data", "stsb", "--rejects", "README.md/rejects.jsonl"], "--rejects README.md: is a file, not a directory"),
    (["--data", "README.md", "--format", "csv", "--dev", "tests"], "--dev tests: a directory, not a file"),
], ids=["dev-with-named", "format-with-named", "rejects-dir", "rejects-empty", "rejects-under-a-file", "dev-dir"])
def test_evaluate_refuses_flags_it_would_ignore_or_cannot_follow(tiny_model: Path, capsys, monkeypatch: pytest.MonkeyPatch,
                                                                 flags: list[str], message: str) -> None:
    """Before: --dev and --format were silently ignored with a named dataset; --rejects DIR was a traceback, as were
    --rejects under a file (after reading the data) and a directory as --dev; --rejects '' was ignored."""
    monkeypatch.chdir(REPO)
    code, out, err = evaluate(capsys, tiny_model, *flags)
    assert (code, out, err) == (2, "", f"augsbert evaluate: error: {message}\n")


@pytest.mark.parametrize(("flag", "value", "message"), [("--seed", "-1", "must be >= 0, got -1"), ("--threads", "0", "must be >= 1, got 0")])
def test_evaluate_refuses_a_negative_seed_or_no_threads(capsys, flag: str, value: str, message: str) -> None:
    """Before: --threads 0 was taken for 1, and --seed -1 failed later without naming the flag."""
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "minilm", "--data", "stsb", flag, value])
    assert exited.value.code == 2 and capsys.readouterr().err.endswith(f"augsbert evaluate: error: argument {flag}: {message}\n")


def test_evaluate_refuses_a_kind_its_model_is_not(tiny_cross_encoder: Path, capsys) -> None:
    """Before: a bi-encoder scored as a cross-encoder (or the reverse) got a fresh, random head, and exit 0."""
    for model, kind, actual in (("minilm", "cross_encoder", "bi-encoder"), (str(tiny_cross_encoder), "bi_encoder", "cross-encoder")):
        assert main(["evaluate", model, "--data", "stsb", "--kind", kind]) == 2
        assert capsys.readouterr().err == (f"augsbert evaluate: error: --kind {kind}: {model} is a {actual} (scored as the "
                                           "other, it would get a fresh, random part)\n")


def test_evaluate_reads_a_file_named_for_dev_and_test_once(tiny_model: Path, tmp_path: Path, capsys) -> None:
    labels = scores(50)
    labels[0] = "high"
    data = pair_file(tmp_path / "pairs.csv", labels)
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data), "--max-reject-fraction", "0.05")
    assert code == 0, err
    assert json.loads(out)["rows"] == {"read": 50, "accepted": 49, "rejected": 1, "dev": 49, "test": 49}
    assert err.count("  rejected ") == 1


def test_evaluate_fails_above_the_reject_fraction(tiny_model: Path, tmp_path: Path, capsys) -> None:
    """0-5 scores read without --score-range: only those up to 1 stay; the command fails instead of scoring them."""
    data = pair_file(tmp_path / "stsb_like.csv", ["0.1", "0.9", "0.4", "0.6"] + [f"{1 + i % 2}.5" for i in range(16)])
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data))
    assert code == 2 and out == ""
    assert err == (
        "read 20 rows: 4 accepted, 16 rejected\n"
        "augsbert evaluate: error: 16 of 20 rows rejected (80.00%), above --max-reject-fraction=1.00% "
        f"(score '1.5' outside [0, 1]: 8, score '2.5' outside [0, 1]: 8); first at {data}:6 field 'label': "
        "score '1.5' outside [0, 1]\n"
    )


# --- augsbert evaluate: --score-range ------------------------------------------------------------------------


def test_evaluate_score_range_scales_regression_labels(tiny_model: Path, tmp_path: Path, capsys) -> None:
    data = pair_file(tmp_path / "stsb_like.csv", [f"{i % 6}.5" for i in range(19)] + ["5.0"])
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data), "--score-range", "0", "6")
    assert code == 0, err
    assert json.loads(out)["rows"] == {"read": 20, "accepted": 20, "rejected": 0, "dev": 20, "test": 20}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # worded as the flags (were the spec's fields: `score_range must be`, `set 'format'`)
        (["--score-range", "5", "0"], "--data {data}: --score-range must be [low, high] with low < high, got [5.0, 0.0]"),
        (["--dev", "{data}.txt"], "--dev {data}.txt: cannot infer the format of {data}.txt: pass --format"),
        (["--score-range", "0", "5", "--task", "classification"],
         "--score-range scales regression scores; --task classification takes 0/1 labels"),
    ],
)
def test_evaluate_refuses_a_bad_score_range(tiny_model: Path, tmp_path: Path, capsys, args: list[str], message: str) -> None:
    data = pair_file(tmp_path / "pairs.csv", scores(10))
    shutil.copy(data, f"{data}.txt")
    code, _, err = evaluate(capsys, tiny_model, "--data", str(data), *(arg.format(data=data) for arg in args))
    assert code == 2
    assert err == f"augsbert evaluate: error: {message.format(data=data)}\n"


def test_evaluate_refuses_a_score_range_for_a_named_dataset(tiny_model: Path, data_dir: Path, capsys) -> None:
    code, _, err = evaluate(capsys, tiny_model, "--data", "stsb", "--data-dir", str(data_dir), "--score-range", "0", "5")
    assert code == 2
    assert err == "augsbert evaluate: error: --score-range is for pair files; the named dataset stsb has its own\n"


# --- augsbert evaluate: classification labels ----------------------------------------------------------------


def test_evaluate_refuses_classification_on_scores(tiny_model: Path, tmp_path: Path, capsys) -> None:
    labels = ["0.84", "1", "0"] + scores(97)
    data = pair_file(tmp_path / "scores.csv", labels)
    bad = sum(label not in ("0", "1") for label in labels)
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data), "--task", "classification")
    assert code == 2 and out == ""
    assert err == (
        f"augsbert evaluate: error: --task classification needs 0/1 labels: {data}:2 field 'label': "
        f"bad label '0.84': expected 0 or 1 ({bad} of 100 rows); scores need --task regression\n"
    )


# --- augsbert evaluate: splits a metric cannot score ---------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "0 pair(s) to score; Spearman needs at least 2"),
        ("sentence1,sentence2,label\n", "0 pair(s) to score; Spearman needs at least 2"),
        ("sentence1,sentence2,label\na cat,a dog,0.5\n", "1 pair(s) to score; Spearman needs at least 2"),
        ("sentence1,sentence2,label\na cat,a dog,0.5\nrain,sun,0.5\nx y,y z,0.5\n",
         "all 3 labels are equal; Spearman needs at least two different labels"),
    ],
    ids=["empty-file", "header-only", "one-pair", "constant-labels"],
)
def test_evaluate_refuses_an_unscorable_split(tiny_model: Path, tmp_path: Path, capsys, content: str, message: str) -> None:
    data = tmp_path / "pairs.csv"
    data.write_text(content)
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data))
    assert code == 2 and out == ""
    assert error_line(err) == f"augsbert evaluate: error: {data} (test split): {message}"


def test_evaluate_refuses_a_dev_file_of_one_class(tiny_model: Path, tmp_path: Path, capsys) -> None:
    test = pair_file(tmp_path / "test.csv", ["0", "1"] * 5)
    dev = pair_file(tmp_path / "dev.csv", ["1"] * 4)
    code, _, err = evaluate(capsys, tiny_model, "--data", str(test), "--dev", str(dev), "--task", "classification")
    assert code == 2
    assert error_line(err) == (
        f"augsbert evaluate: error: {dev} (dev split): all 4 labels are equal; F1/AUC needs at least two different labels"
    )


# --- augsbert evaluate: model directories --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "not a model directory (no config.json)"),
        ({"config.json": "{not json"}, "config.json is not valid JSON (line 1: Expecting property name enclosed in double quotes)"),
        ({"config.json": "[1, 2]"}, "config.json is not a JSON object"),
        ({"config.json": '{"hidden_size": 32}'},
         "config.json is not a model config (Unrecognized model in {model}. Should have a `model_type` key in its config.json.)"),
        ({"config.json": '{"model_type": "bert"}', "config_sentence_transformers.json": "{", "model.safetensors": ""},
         "config_sentence_transformers.json is not valid JSON (line 1: Expecting property name enclosed in double quotes)"),
        # before: transformers' OSError traceback when the weights were loaded, exit 1
        ({"config.json": '{"model_type": "bert"}'}, "no weights in the directory (model.safetensors or pytorch_model.bin)"),
    ],
    ids=["no-config", "config-not-json", "config-not-object", "config-without-model-type", "st-config-not-json", "no-weights"],
)
def test_evaluate_refuses_an_invalid_model_dir(tmp_path: Path, capsys, files: dict[str, str], message: str) -> None:
    model = tmp_path / "model"
    model.mkdir()
    for name, text in files.items():
        (model / name).write_text(text)
    data = pair_file(tmp_path / "pairs.csv", scores(10))
    code, out, err = evaluate(capsys, model, "--data", str(data))
    assert code == 2 and out == ""
    assert err == f"augsbert evaluate: error: model {model}: {message.format(model=model)}\n"


# --- job spec: the name must keep the run directory inside output_dir ----------------------------------------


@pytest.mark.parametrize("name", ["../escape", "runs/inner", "..", "a..b", "back\\slash", "", "   "])
def test_job_name_must_not_leave_output_dir(tmp_path: Path, capsys, name: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: {json.dumps(name)}\n")
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"augsbert run: error: invalid job spec {job}:\n  name: Value error, ")
    assert ("is empty" if not name.strip() else "must not contain '/', '\\' or '..'") in err


# --- augsbert run: gold data a fit or a metric cannot use stops the run before any fit -----------------------


def split_file(path: Path, content: list[str] | str) -> Path:
    """Distinct pairs with these labels (tagged by the file's name, so that splits share no pair), or raw text."""
    if isinstance(content, str):
        path.write_text(content)
        return path
    return pair_file(path, content, tag=path.stem)


def own_data(tmp_path: Path, train: list[str] | str, dev: list[str] | str = scores(20), test: list[str] | str = scores(20),
             **fields: str) -> dict:
    """A data section of csv files under tmp_path/<name>/ (no named dataset)."""
    folder = tmp_path / fields.pop("name", "gold")
    folder.mkdir()
    files = {split: split_file(folder / f"{split}.csv", content) for split, content in (("train", train), ("dev", dev), ("test", test))}
    return {"dataset": None, **{split: {"path": str(path)} for split, path in files.items()}, **fields}


def job_file(tmp_path: Path, data: dict, **sections: object) -> Path:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "bad", "output_dir": str(tmp_path / "runs"), "data": data, **sections}))
    return job


def run_error(tmp_path: Path, capsys, job: Path, *settings: str, data_dir: Path | None = None) -> tuple[str, Path]:
    """`augsbert run` must exit 2 with one error line, having fitted nothing: (the line, the run directory)."""
    args = ["run", str(job), *[arg for setting in settings for arg in ("--set", setting)]]
    assert main(args + (["--data-dir", str(data_dir)] if data_dir else [])) == 2
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert {path.name for path in run_dir.iterdir()} <= {"spec.yaml", ".fingerprint.json", "run.log", "rejects.jsonl", "gold", "target_rejects.jsonl", "target"}
    return error_line(capsys.readouterr().err), run_dir


def too_small(what: str, rows: int, need: int, setting: str) -> str:
    pairs = "pair" if rows == 1 else "pairs"
    return (f"{what} train split: {rows} {pairs}, fewer than one training batch ({setting}); "
            f"needs at least {need} pairs (a fit drops an incomplete batch)")


@pytest.mark.parametrize(
    ("train", "rows"),
    [("", 0), ("sentence1,sentence2,label\n", 0), (scores(1), 1), (scores(2), 2), (scores(15), 15)],
    ids=["empty-file", "header-only", "one-pair", "two-pairs", "one-short-of-a-batch"],
)
def test_run_refuses_a_train_split_smaller_than_a_batch(ray_session, tmp_path: Path, capsys, train: list[str] | str, rows: int) -> None:
    """Before: Ray Train tracebacks after one to two minutes."""
    line, run_dir = run_error(tmp_path, capsys, job_file(tmp_path, own_data(tmp_path, train)))
    assert line == f"augsbert run: error: {too_small('gold', rows, 16, 'bi_encoder.batch_size=16')}"
    assert not (run_dir / "models").exists()


def test_run_refuses_a_train_limit_below_a_batch(ray_session, tmp_path: Path, data_dir: Path, capsys) -> None:
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, {"dataset": "stsb"}), "data.train_limit=7", data_dir=data_dir)
    assert line == f"augsbert run: error: {too_small('gold', 7, 16, 'bi_encoder.batch_size=16')}"


@pytest.mark.parametrize(
    ("settings", "need", "setting"),
    [
        (["cross_encoder.batch_size=64"], 32, "cross_encoder.batch_size=64 with both_orders"),
        (["cross_encoder.batch_size=48", "cross_encoder.both_orders=false"], 48, "cross_encoder.batch_size=48"),
        (["teacher.kind=bi-encoder", "teacher.bi_encoder.model=minilm", "teacher.bi_encoder.batch_size=40"], 40,
         "teacher.bi_encoder.batch_size=40"),
        (["training.num_workers=2"], 32, "bi_encoder.batch_size=16 on each of training.num_workers=2"),
    ],
    ids=["cross-encoder-both-orders", "cross-encoder-one-order", "bi-encoder-teacher", "two-workers"],
)
def test_the_largest_batch_of_the_fits_on_train_sets_the_smallest_split(tmp_path: Path, settings: list[str], need: int, setting: str) -> None:
    spec = load_spec(job_file(tmp_path, own_data(tmp_path, scores(need))), settings)
    check_gold_usable(load_gold(spec.data, seed=1), spec)  # exactly one batch: usable
    short = load_spec(job_file(tmp_path, own_data(tmp_path, scores(need - 1), name="short")), settings)
    with pytest.raises(SpecError) as raised:
        check_gold_usable(load_gold(short.data, seed=1), short)
    assert str(raised.value) == too_small("gold", need - 1, need, setting)


def test_a_teacher_given_trained_does_not_size_the_train_split(tmp_path: Path, tiny_cross_encoder: Path) -> None:
    spec = load_spec(job_file(tmp_path, own_data(tmp_path, scores(16))), ["cross_encoder.batch_size=64", f"cross_encoder.trained={tiny_cross_encoder}"])
    check_gold_usable(load_gold(spec.data, seed=1), spec)


def test_run_refuses_identical_train_scores_with_kde(ray_session, tmp_path: Path, capsys) -> None:
    """Before: a clear error, but after two fits and 5,700 labels (215 s)."""
    data = own_data(tmp_path, ["0.5"] * 20)
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, data), "sampling.strategies=[kde]")
    assert line == ("augsbert run: error: gold train split: all 20 labels are 0.5; sampling.strategies kde fits a density "
                    "to them and needs at least two different labels")
    spec = load_spec(job_file(tmp_path, data), ["sampling.strategies=[bm25]"])
    with pytest.raises(SpecError, match=r"^gold train split: all 20 labels are 0.5; regression on one label value learns nothing"):
        check_gold_usable(load_gold(spec.data, seed=1), spec)  # without KDE too: a regression on them learns nothing


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ({"train": ["1"] * 20}, "gold train split: all 20 labels are 1; classification needs both classes, 0 and 1"),
        ({"dev": ["1"] * 20}, "gold dev split: all 20 labels are equal; F1/AUC needs at least two different labels"),
    ],
    ids=["train", "dev"],
)
def test_run_refuses_a_single_class(ray_session, tmp_path: Path, capsys, splits: dict[str, list[str]], message: str) -> None:
    data = own_data(tmp_path, **{"train": ["0", "1"] * 10, "dev": ["0", "1"] * 10, "test": ["0", "1"] * 10, **splits}, task="classification")
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, data))
    assert line == f"augsbert run: error: {message}"


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ({"dev": "sentence1,sentence2,label\n"}, "gold dev split: 0 pair(s) to score; Spearman needs at least 2"),
        ({"dev": scores(1)}, "gold dev split: 1 pair(s) to score; Spearman needs at least 2"),
        ({"test": ""}, "gold test split: 0 pair(s) to score; Spearman needs at least 2"),
        ({"test": scores(1)}, "gold test split: 1 pair(s) to score; Spearman needs at least 2"),
    ],
    ids=["dev-header-only", "dev-one-pair", "test-empty", "test-one-pair"],
)
def test_run_refuses_dev_or_test_below_two_pairs(ray_session, tmp_path: Path, capsys, splits: dict[str, list[str] | str], message: str) -> None:
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, own_data(tmp_path, scores(20), **splits)))
    assert line == f"augsbert run: error: {message}"


def transfer_sections(target: dict) -> dict:
    return {"scenario": "domain-transfer", "target": target}


@pytest.mark.parametrize(("setting", "message"), [
    ("evaluation.zero_shot_model=minlm", "evaluation.zero_shot_model: model minlm: no such directory, and not a loadable model id"),
    ("sampling.semantic_model=./no-such-model", "sampling.semantic_model: model path not found: ./no-such-model"),
    ("labeling.gpus_per_actor=0.25", "labeling.gpus_per_actor 0.25, but the Ray cluster has 0 GPUs"),
    ("training.num_workers=2", "training.num_workers 2 x cpus_per_worker 2 (4 CPUs at once), but the Ray cluster has 2 CPUs"),  # was: a hang
], ids=["zero-shot-model", "semantic-model", "labeling-gpus", "training-cpus"])
def test_run_refuses_what_it_would_first_need_late_before_reading_data(ray_session, tmp_path: Path, capsys, setting: str,
                                                                        message: str) -> None:
    """Before: these failed after the cross-encoder and SBERT fits (labeling, sampling) or at the last stage. A model
    is checked before the run writes its spec.yaml, so that run leaves no directory; the resources once Ray is up."""
    assert main(["run", str(job_file(tmp_path, own_data(tmp_path, scores(20)))), "--set", setting]) == 2
    assert error_line(capsys.readouterr().err).startswith(f"augsbert run: error: {message}")
    assert [run_dir.name for run_dir in (tmp_path / "runs").glob("*/spec.yaml")] == (["spec.yaml"] if "model" not in setting else [])
    assert not list((tmp_path / "runs").glob("*/gold"))


def test_run_refuses_a_transfer_source_smaller_than_a_batch(ray_session, tmp_path: Path, capsys) -> None:
    target = {"data": own_data(tmp_path, scores(20), name="target")}
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, own_data(tmp_path, scores(7)), **transfer_sections(target)))
    # the target's splits are read first (the source's train must not hold their pairs), then the source is refused
    assert line == f"augsbert run: error: {too_small('source', 7, 16, 'bi_encoder.batch_size=16')}"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"dev": scores(1)}, "target dev split: 1 pair(s) to score; Spearman needs at least 2"),
        ({"test": "sentence1,sentence2,label\n"}, "target test split: 0 pair(s) to score; Spearman needs at least 2"),
        ({"train": "sentence1,sentence2,label\n"}, too_small("target", 0, 16, "bi_encoder.batch_size=16")),
        ({"train": scores(5)}, too_small("target", 5, 16, "bi_encoder.batch_size=16")),
    ],
    ids=["dev-one-pair", "test-header-only", "train-empty", "train-below-a-batch"],
)
def test_run_refuses_a_transfer_target_it_cannot_use(ray_session, tmp_path: Path, capsys, target: dict, message: str) -> None:
    sections = transfer_sections({"data": own_data(tmp_path, **{"train": scores(20), **target}, name="target")})
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, own_data(tmp_path, scores(20)), **sections))
    assert line == f"augsbert run: error: {message}"


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.csv", "sentence,id\nhello there,a\nbad,row,extra\nhi,c\n", "bad.csv:3: expected 2 fields, got 3"),
        ("bad.jsonl", '{"sentence": "a b"}\n\nnot json\n', "bad.jsonl:3: invalid JSON: "),
        ("number.jsonl", '{"sentence": "a b"}\n{"sentence": 5}\n', "number.jsonl:2 field 'sentence': not text: 5"),
    ],
)
def test_a_malformed_sentence_record_is_one_line_naming_file_and_line(tmp_path: Path, name: str, content: str, message: str) -> None:
    """Before: a raw ArrowInvalid (a bad CSV record or JSONL line)."""
    (tmp_path / name).write_text(content)
    with pytest.raises(SpecError, match=re.escape(f"target.sentences {tmp_path}/{message}")):
        read_sentences(tmp_path / name, "target.sentences")


def test_sentences_that_look_like_numbers_are_text(tmp_path: Path) -> None:
    """Before: arrow typed the column as integers, and the read failed on `int.strip`."""
    (tmp_path / "numbers.csv").write_text("sentence,id\n1,a\n2,b\n 3 ,c\n")
    assert read_sentences(tmp_path / "numbers.csv") == ["1", "2", "3"]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"train": scores(18) + ["x", "y"]}, "target: 2 of 60 rows rejected (3.33%), above target.data.max_reject_fraction=1.00%"),
        ({split: "sentence1,sentence2,label\n" for split in ("train", "dev", "test")}, "target: no rows were read"),
    ],
    ids=["bad-labels", "header-only"],
)
def test_target_rejects_name_the_target_and_its_setting(ray_session, tmp_path: Path, capsys, target: dict, message: str) -> None:
    """Before: "no gold rows were read", and the source's setting, for a transfer's target."""
    sections = transfer_sections({"data": own_data(tmp_path, **{"train": scores(20), **target}, name="target")})
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, own_data(tmp_path, scores(20)), **sections))
    assert line.startswith(f"augsbert run: error: {message}")


def test_a_transfer_target_without_train_is_usable_with_sentences(tmp_path: Path) -> None:
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("a cat sits\na dog runs\nrain falls\n")
    data = own_data(tmp_path, "sentence1,sentence2,label\n", name="target")
    del data["train"]
    target = {"data": data, "candidates": "sentences", "sentences": str(sentences)}
    spec = load_spec(job_file(tmp_path, own_data(tmp_path, scores(20)), **transfer_sections(target)))
    assert spec.target is not None
    gold = load_gold(spec.target.data, seed=1)
    assert gold.train.num_rows == 0
    check_gold_usable(gold, spec, target=True)


# --- gold data hygiene: repeated pairs, dev/test pairs also in train, rejects per split -----------------------


def rows_file(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text("sentence1,sentence2,label\n" + "".join(",".join(row) + "\n" for row in rows))
    return path


def repeating_gold(tmp_path: Path) -> dict:
    """train: 30 distinct pairs, then 3 exact repeats (one with another label) and 2 swapped ones (one with another
    label); dev: 20 distinct pairs, 2 of them in train (one swapped), then 1 swapped repeat; test: 20, 1 in train."""
    train = [(f"t{i} one", f"t{i} two", f"{i / 40:.3f}") for i in range(30)]
    train += [train[0], train[1], (train[2][0], train[2][1], "0.999"), (train[3][1], train[3][0], train[3][2]),
              (train[4][1], train[4][0], "0.998")]
    dev = [(f"d{i} one", f"d{i} two", f"{i / 25:.3f}") for i in range(18)] + [(train[5][1], train[5][0], "0.1"), train[6]]
    dev.append((dev[0][1], dev[0][0], dev[0][2]))
    test = [(f"e{i} one", f"e{i} two", f"{i / 25:.3f}") for i in range(19)] + [train[7], (dev[1][1], dev[1][0], "0.5")]
    files = {split: rows_file(tmp_path / f"{split}.csv", rows) for split, rows in (("train", train), ("dev", dev), ("test", test))}
    return {"dataset": None, **{split: {"path": str(path)} for split, path in files.items()}}


def test_repeated_and_overlapping_pairs_are_counted_removed_and_reported(tmp_path: Path) -> None:
    """Before: accepted without a word, and dev/test pairs also in train inflated the test metrics."""
    spec = load_spec(job_file(tmp_path, repeating_gold(tmp_path)), ["bi_encoder.batch_size=8", "cross_encoder.batch_size=8"])
    (tmp_path / "run").mkdir()
    ctx = RunContext.open(spec, tmp_path / "run")
    read = read_gold(ctx)
    gold, counts = read.splits, read.counts
    assert counts["gold_duplicates"] == {"train": 5, "dev": 1, "test": 0}
    assert counts["gold_label_conflicts"] == {"train": 2, "dev": 0, "test": 0}
    assert counts["gold_overlap"] == {"dev": 2, "test": 1} and counts["gold_overlap_dropped"] == 3
    assert (counts["gold_train"], counts["gold_dev"], counts["gold_test"]) == (27, 20, 21)
    assert counts["gold_dev_test_overlap"] == 1  # counted, kept in both
    # nothing silently dropped: read = accepted + rejected, accepted = the splits + the pairs removed on purpose
    assert counts["rows_read"] == counts["accepted"] + counts["rejected"] == 77
    removed = sum(counts["gold_duplicates"].values()) + counts["gold_overlap_dropped"]
    assert counts["accepted"] == counts["gold_train"] + counts["gold_dev"] + counts["gold_test"] + removed
    labels = dict(zip(gold.train.column("sentence1").to_pylist(), gold.train.column("label").to_pylist()))
    assert (labels["t2 one"], labels["t4 one"]) == (0.05, 0.1)  # the first row of a repeated pair, not its later label
    assert not {"t4 two", "t5 one", "t6 one", "t7 one"} & labels.keys()  # a swapped repeat; pairs dev or test has
    assert pq.read_table(tmp_path / "run" / "gold" / "train.parquet").num_rows == 27
    write_report(spec, RunResult(ctx.layout.root, spec.task, {}, counts=counts).metrics(), tmp_path / "run" / "report.md")
    report = (tmp_path / "run" / "report.md").read_text()
    assert ("- gold rows read 77 = accepted 77 + rejected 0 (rejects in rejects.jsonl)\n"
            "- gold pairs repeated within a split (either order), removed with the first kept: train 5, dev 1, test 0; "
            "of these with another label: train 2, dev 0, test 0\n"
            "- gold dev/test pairs also in train (either order): dev 2, test 1; 3 dropped from train (on_overlap: drop)\n"
            "- gold test pairs also in dev (either order), kept: dev only picks seeds and checkpoints: 1\n") in report


def test_overlap_kept_is_counted(tmp_path: Path) -> None:
    spec = load_spec(job_file(tmp_path, repeating_gold(tmp_path)), ["data.on_overlap=keep"])
    gold = load_gold(spec.data, seed=1)
    assert (gold.train.num_rows, gold.overlap, gold.overlap_dropped) == (30, {"dev": 2, "test": 1}, 0)


def test_run_stops_on_overlap_with_on_overlap_error(ray_session, tmp_path: Path, capsys) -> None:
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, repeating_gold(tmp_path)), "data.on_overlap=error")
    assert line == ("augsbert run: error: 2 dev and 1 test pairs are also in train (either order; on_overlap: error), "
                    "the first in dev: ('t5 two', 't5 one'); on_overlap: drop removes them from train")


def test_run_applies_the_reject_gate_per_split(ray_session, tmp_path: Path, capsys) -> None:
    """1 bad row in 50 train rows is 2%; pooled with 200 clean dev and test rows it was 0.4%, under the 1% gate."""
    labels = scores(50)
    labels[9] = "x"  # line 11
    data = own_data(tmp_path, labels, dev=scores(100), test=scores(100))
    line, run_dir = run_error(tmp_path, capsys, job_file(tmp_path, data))
    assert line == (
        "augsbert run: error: gold train split: 1 of 50 rows rejected (2.00%), above data.max_reject_fraction=1.00% "
        f"(non-numeric score 'x': 1); first at {data['train']['path']}:11 field 'label': non-numeric score 'x'; "
        f"all listed in {run_dir / 'rejects.jsonl'}"
    )


def test_evaluate_removes_and_reports_repeated_pairs(tiny_model: Path, tmp_path: Path, capsys) -> None:
    data = rows_file(tmp_path / "pairs.csv", [(f"s{i} one", f"s{i} two", f"{i / 20:.2f}") for i in range(10)] + [("s3 two", "s3 one", "0.9")])
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data))
    assert code == 0, err
    assert "repeated pairs removed (either order, the first kept): dev 1 (1 with another label), test 1 (1 with another label)\n" in err
    assert json.loads(out)["rows"] == {"read": 11, "accepted": 11, "rejected": 0, "dev": 10, "test": 10}


# --- Ray auth token files ------------------------------------------------------------------------------------


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """RAY_AUTH_TOKEN_PATH names tmp_path/auth_token (not written); no other token settings."""
    path = tmp_path / "auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    return path


def test_a_missing_token_file_is_created_private(token_env: Path) -> None:
    check_token_file(create=True)
    assert oct(token_env.stat().st_mode & 0o777) == "0o600"
    assert len(token_env.read_text()) == 64
    check_token_file(create=True)  # exists now: checked, kept
    assert len(token_env.read_text()) == 64


def test_a_token_file_linked_to_nothing_is_refused(token_env: Path, tmp_path: Path) -> None:
    """Before: the private file was not created (the link exists), nothing was checked (its target does not), and Ray
    would have created the target readable by everyone."""
    token_env.symlink_to(tmp_path / "secrets" / "token")
    with pytest.raises(InsecureTokenError) as raised:
        check_token_file(create=True)
    assert str(raised.value) == (f"token file {token_env} is a symlink to {tmp_path / 'secrets' / 'token'}, which does not exist (Ray "
                                 "would create it readable by everyone); create it there with chmod 600, or remove the link")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_token_file_others_can_access_is_refused(token_env: Path, mode: int) -> None:
    token_env.write_text("secret")
    token_env.chmod(mode)
    with pytest.raises(InsecureTokenError) as raised:
        check_token_file()
    assert str(raised.value) == f"token file {token_env} has mode {mode:03o}: group or others may access it; chmod 600 {token_env}"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_token_file_of_another_user_is_refused(token_env: Path) -> None:
    token_env.write_text("secret")
    token_env.chmod(0o600)
    os.chown(token_env, OTHER_UID, OTHER_UID)
    with pytest.raises(InsecureTokenError, match=rf"token file {token_env} is owned by uid {OTHER_UID}, not by you"):
        check_token_file()


def test_submit_refuses_a_world_readable_token_file(token_env: Path, capsys) -> None:
    token_env.write_text("secret")
    token_env.chmod(0o644)
    assert main(["status", "raysubmit_x", "--address", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == (
        f"augsbert status: error: token file {token_env} has mode 644: group or others may access it; chmod 600 {token_env}\n"
    )


def test_embedded_ray_refuses_a_world_readable_token_file(token_env: Path, tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """`augsbert label --sentences` starts an embedded Ray (a process of its own: this session's Ray is running)."""
    token_env.write_text("secret")
    token_env.chmod(0o644)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("a cat sits\na dog runs\n")
    result = subprocess.run(
        [sys.executable, "-m", "augsbert_ray.cli", "label", "--model", str(tiny_cross_encoder), "--sentences", str(sentences),
         "--output", str(tmp_path / "out")], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"augsbert label: error: token file {token_env} has mode 644: group or others may access it; chmod 600 {token_env}"
    )
    assert not (tmp_path / "out").exists()


# --- augsbert submit/status/logs: no token over plain http to another host -----------------------------------


@pytest.mark.parametrize("command", [["submit", "jobs/stsb_indomain_bm25.yaml", "--working-dir", str(REPO), "--set", "output_dir=/shared/runs"],
                                     ["status", "raysubmit_x"],
                                     ["logs", "raysubmit_x"]])
def test_token_not_sent_over_plain_http_to_another_host(token_env: Path, monkeypatch: pytest.MonkeyPatch, capsys, command: list[str]) -> None:
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    monkeypatch.chdir(REPO)
    assert main([*command, "--address", "http://10.1.2.3:8265"]) == 2
    assert capsys.readouterr().err == (
        f"augsbert {command[0]}: error: --address http://10.1.2.3:8265: refusing to send the Ray auth token over plain http "
        "to 10.1.2.3; use https, a tunnel to 127.0.0.1 (ssh -L, kubectl port-forward, ray dashboard), or --insecure\n"
    )


def test_token_from_rays_default_file_is_not_sent_over_plain_http(token_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    """RAY_AUTH_MODE=token alone: Ray's client would send ~/.ray/auth_token itself."""
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("HOME", str(tmp_path))
    default = tmp_path / ".ray" / "auth_token"
    default.parent.mkdir()
    default.write_text("secret")
    default.chmod(0o600)
    assert main(["status", "raysubmit_x", "--address", "http://ray-head.example:8265"]) == 2
    assert "refusing to send the Ray auth token over plain http to ray-head.example;" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("address", "flags"),
    [("http://127.0.0.5:1", []), ("http://localhost:1", []), ("http://[::1]:1", []), ("http://0.0.0.0:1", ["--insecure"])],
)
def test_token_goes_to_this_host_or_with_insecure(token_env: Path, monkeypatch: pytest.MonkeyPatch, capsys, address: str, flags: list[str]) -> None:
    """Past the transport check the client connects: nothing listens on port 1, so it cannot reach the dashboard."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    assert main(["status", "raysubmit_x", "--address", address, *flags]) == 2
    assert capsys.readouterr().err.startswith(f"augsbert status: error: cannot reach the Ray dashboard at {address}: ")


# --- cluster/local: a private state dir ----------------------------------------------------------------------


def run_script(script: Path, state: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), str(state)], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_start_creates_a_private_state_dir(tmp_path: Path) -> None:
    """No ray executable to be found: start.sh stops (exit 2) after making the state dir, before any node starts."""
    state = tmp_path / "parent" / "state"
    result = run_script(START, state, RAY=str(tmp_path / "no-ray"), PATH="/usr/bin:/bin")
    assert (result.returncode, result.stderr) == (2, "start.sh: error: no ray executable (set RAY=...)\n")
    assert state.is_dir() and oct(state.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o777])
def test_start_refuses_a_state_dir_others_can_access(tmp_path: Path, mode: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(mode)
    result = run_script(START, state)
    assert result.returncode == 2
    assert result.stderr == f"start.sh: error: {state} has mode {mode:o}: group or others may access it; chmod go= {state} (or use another state dir)\n"
    assert os.listdir(state) == []


def test_start_refuses_a_token_file_others_can_read(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "auth_token").write_text("planted")
    (state / "auth_token").chmod(0o644)
    result = run_script(START, state)
    assert result.returncode == 2
    assert result.stderr == (
        f"start.sh: error: {state}/auth_token has mode 644: group or others may access it; chmod go= {state}/auth_token (or use another state dir)\n"
    )
    assert sorted(os.listdir(state)) == ["auth_token"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("script", [START, STOP], ids=["start", "stop"])
def test_cluster_scripts_refuse_a_state_dir_of_another_user(tmp_path: Path, script: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "pids").write_text(f"head {NO_SESSION}\n")  # for stop.sh: a session someone else planted
    os.chown(state, OTHER_UID, OTHER_UID)
    result = run_script(script, state)
    assert result.returncode == 2
    assert result.stderr == f"{script.name}: error: {state} is owned by uid {OTHER_UID}, not by you (uid 0); use a state dir of your own\n"


def test_stop_refuses_a_state_dir_others_can_write(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "pids").write_text(f"head {NO_SESSION}\n")
    state.chmod(0o777)
    result = run_script(STOP, state)
    assert result.returncode == 2 and "has mode 777: group or others may access it" in result.stderr
    assert (state / "pids").exists()


# --- the embedded Ray listens on 127.0.0.1 only --------------------------------------------------------------


def is_loopback(host: str) -> bool:
    ip = ipaddress.ip_address(host)
    return ip.is_loopback or (isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def test_embedded_ray_listens_on_loopback_only(ray_session) -> None:
    """Every listening socket of this session's Ray (started by init_ray): the GCS, raylet, dashboard and its agents,
    the driver's and a worker's gRPC servers. Before the fix the GCS, raylet and workers listened on all interfaces."""
    ray = ray_session

    @ray.remote(num_cpus=0)
    def worker_pid() -> int:
        return os.getpid()

    assert ray.get(worker_pid.remote()) != os.getpid()  # a worker process is up, with its own server
    tree = [psutil.Process(), *psutil.Process().children(recursive=True)]
    names = {process.pid: process.name() for process in tree}
    listening = [(c.laddr.ip, c.laddr.port, names[c.pid]) for c in psutil.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.pid in names]
    listeners = {name for _, _, name in listening}
    assert {"gcs_server", "raylet"} <= listeners, listening
    assert len(listening) >= 8, listening
    assert [socket for socket in listening if not is_loopback(socket[0])] == []
    assert ray.util.get_node_ip_address() == "127.0.0.1"


# --- output directories: one line naming the field and the path ------------------------------------------------


def unwritable(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Output paths that cannot be used, with the reason each gets. sysfs refuses new files and directories to
    every user, root included (EPERM), so the case does not depend on who runs the tests."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    return {
        "is-a-file": (blocker, "is a file, not a directory"),
        "under-a-file": (blocker / "runs", f"{blocker} is a file, not a directory"),
        "unwritable": (Path("/sys"), "cannot write there ({})"),
        "not-creatable": (Path("/sys/augsbert-runs"), "cannot write there ({})"),
    }


def matches_reason(line: str, expected: str) -> bool:
    """``expected`` with its '{}' standing for an OS error text that refuses a write."""
    refusals = ("Permission denied", "Operation not permitted", "Read-only file system")
    return any(line == expected.format(refusal) for refusal in refusals)


@pytest.mark.parametrize("case", ["is-a-file", "under-a-file", "unwritable", "not-creatable"])
def test_run_refuses_an_unusable_output_dir(tmp_path: Path, capsys, case: str) -> None:
    output_dir, reason = unwritable(tmp_path)[case]
    job = tmp_path / "job.yaml"
    job.write_text(f"output_dir: {output_dir}\n")
    assert main(["run", str(job)]) == 2
    assert matches_reason(capsys.readouterr().err, f"augsbert run: error: output_dir {output_dir}: {reason}\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a_file", "job.yaml"]


@pytest.mark.parametrize("source", ["--input", "--sentences"])
@pytest.mark.parametrize("case", ["is-a-file", "under-a-file", "unwritable", "not-creatable"])
def test_label_refuses_an_unusable_output(tiny_cross_encoder: Path, tmp_path: Path, capsys, case: str, source: str) -> None:
    """Refused before Ray starts, with nothing created."""
    output, reason = unwritable(tmp_path)[case]
    given = tmp_path / ("pairs.csv" if source == "--input" else "sentences.txt")
    given.write_text("sentence1,sentence2\na cat,a dog\n" if source == "--input" else "a cat sits\na dog runs\n")
    assert main(["label", "--model", str(tiny_cross_encoder), source, str(given), "--output", str(output)]) == 2
    assert matches_reason(capsys.readouterr().err, f"augsbert label: error: --output {output}: {reason}\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["a_file", given.name])


# --- augsbert label: malformed records inside the Ray tasks ---------------------------------------------------


def big_csv(path: Path, tail: str) -> Path:
    """Over 1 MB of good pairs (pyarrow reads the header and infers the types from the first MB), then ``tail``:
    lines 602 onwards (line 1 is the header)."""
    rows = "".join(f"{'a long sentence ' * 120}{i},a dog runs {i},{i % 5}.5\n" for i in range(600))
    path.write_text("sentence1,sentence2,label\n" + rows + tail)
    assert path.stat().st_size > 1 << 20
    return path


def label(capsys, model: Path, source: Path, output: Path, *args: str) -> tuple[int, str, str]:
    code = main(["label", "--model", str(model), "--input", str(source), "--output", str(output), "--max-seq-length", "16", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rejects_of(output: Path) -> list[tuple[int, str, str]]:
    return [(r["line"], r["field"], r["reason"]) for r in map(json.loads, (output / "_rejects.jsonl").read_text().splitlines())]


def test_label_counts_a_malformed_csv_record_after_the_first_mb(label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    """Before: a Ray UserCodeException without file or line, on every rerun."""
    data = big_csv(tmp_path / "pairs.csv", "a cat,with,one field,too many\nlast,pair,1.5\n")
    code, out, err = label(capsys, tiny_cross_encoder, data, tmp_path / "out", "--shard-rows", "250")
    assert code == 0, err
    assert "pairs in 602 = labeled 601 + rejected 1" in out
    assert rejects_of(tmp_path / "out") == [(602, "(line)", "expected 3 fields, got 4")]
    silver = pq.read_table(tmp_path / "out")
    assert silver.num_rows == 601 and silver.schema.field("label").type == pa.float64()


@pytest.mark.parametrize(("later", "message"), [
    ('"score": 4.5, "topic": null', "Failed to convert JSON to int64, couldn't parse:4.5"),
    ('"score": 4, "topic": "cats"', "field 'topic': Column(/topic) changed from null to string"),
])
def test_label_stops_on_a_jsonl_value_of_another_type_than_its_column(
    label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys, later: str, message: str
) -> None:
    """Before: the well-formed pair was rejected as `invalid JSON record`, and the command went on (exit 0)."""
    data = tmp_path / "pairs.jsonl"
    first = '{"sentence1": "a cat %d", "sentence2": "a dog", "score": 4, "topic": null, "pad": "%s"}\n'
    data.write_text("".join(first % (i, "x" * 1100) for i in range(1000))
                    + '{"sentence1": "one", "sentence2": 5, "score": 4, "topic": null}\n'  # a number for a sentence: a reject
                    + '{"sentence1": "a cat", "sentence2": "a bird", ' + later + '}\n')
    code, out, err = label(capsys, tiny_cross_encoder, data, tmp_path / "out", "--shard-rows", "250")
    assert code == 2
    assert error_line(err).startswith(f"augsbert label: error: {data}:1002{'' if 'field' in message else ':'}")
    assert message in error_line(err) and error_line(err).endswith(
        "the types of the columns beside the sentences come from the file's first MiB: give each column values of one type "
        "(4.0, not 4, among decimals; text, not null, where text follows)")


def test_label_stops_on_a_value_that_does_not_fit_its_column(label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    """A label that is not a number after the first MB: the column's type cannot hold it, so the record cannot be
    passed through; one line names the file, the record and the field."""
    data = big_csv(tmp_path / "pairs.csv", "a cat,a dog,high\n")
    code, out, err = label(capsys, tiny_cross_encoder, data, tmp_path / "out", "--shard-rows", "250")
    assert code == 2
    assert error_line(err) == (
        f"augsbert label: error: {data}:602 field 'label': CSV conversion error to double: invalid value 'high'; "
        "the column's type, double, was read from the file's first rows"
    )
    assert err.endswith(error_line(err) + "\n") and "Traceback" not in err
    assert not list((tmp_path / "out").glob(".*.tmp"))  # the refused shard left no partial file


def test_label_counts_malformed_jsonl_lines(label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    lines = ['{"sentence1": "a cat", "sentence2": "a dog"}', '{"sentence1": "cut off', "",
             '{"sentence1": 7, "sentence2": "a number is not a sentence"}', "[1, 2]", '{"sentence1": "rain", "sentence2": "sun"}']
    data = tmp_path / "pairs.jsonl"
    # and a latin-1 line, which arrow's JSON reader took (before: the labeler then failed decoding it, exit 1)
    data.write_bytes(("\n".join(lines) + "\n").encode() + b'{"sentence1": "caf\xe9", "sentence2": "a bar"}\n')
    code, out, err = label(capsys, tiny_cross_encoder, data, tmp_path / "out")
    assert code == 0, err
    assert "pairs in 6 = labeled 2 + rejected 4" in out
    assert rejects_of(tmp_path / "out") == [
        (2, "(line)", "invalid JSON record: Missing a closing quotation mark in string."),
        (4, "sentence1", "invalid JSON record: Column(/sentence1) changed from string to number"),
        (5, "(line)", "invalid JSON record: Column() changed from object to array"),
        (7, "(line)", "bad UTF-8"),
    ]


# --- sentence columns of numbers ----------------------------------------------------------------------------


def int_sentences(path: Path) -> Path:
    pq.write_table(pa.table({"sentence1": list(range(10)), "sentence2": [f"a dog runs {i}" for i in range(10)],
                             "label": [i / 10 for i in range(10)]}), path)
    return path


def test_evaluate_names_a_parquet_sentence_column_of_ints(tiny_model: Path, tmp_path: Path, capsys) -> None:
    """Before: every row rejected as an 'empty sentence'."""
    data = int_sentences(tmp_path / "pairs.parquet")
    code, out, err = evaluate(capsys, tiny_model, "--data", str(data))
    assert (code, out) == (2, "")
    assert err == f"augsbert evaluate: error: --data {data}: column 'sentence1' holds int64, not text\n"


def test_job_spec_names_a_parquet_sentence_column_of_ints(tmp_path: Path) -> None:
    data = int_sentences(tmp_path / "train.parquet")
    with pytest.raises(SpecError, match=r"\n  data\.train: Value error, column 'sentence1' holds int64, not text\n"):  # not the section's dump
        load_spec(None, ["data.dataset=null", f"data.train={{path: {data}}}", f"data.test={{path: {data}}}"])


# --- augsbert label: bad flags, empty input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-size", "0"], "--batch-size: must be > 0"),
        (["--cpus-per-actor", "0"], "--cpus-per-actor: must be > 0"),
        (["--gpus-per-actor", "-1"], "--gpus-per-actor: must be >= 0"),
        (["--shard-rows", "0", "--max-seq-length", "-3"], "--max-seq-length: must be > 0; --shard-rows: must be > 0"),
        (["--precision", "bf16", "--runtime", "onnx"], "--precision bf16 runs on torch: use --runtime torch or auto"),
    ],
)
def test_label_words_field_errors_with_its_flags(tmp_path: Path, capsys, flags: list[str], message: str) -> None:
    """Before: pydantic's multi-line dump with the spec's field names."""
    code = main(["label", "--model", str(tmp_path / "unread"), "--input", str(tmp_path / "unread.csv"), "--output", str(tmp_path / "out"), *flags])
    assert code == 2
    assert capsys.readouterr().err == f"augsbert label: error: {message}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--pairs", "4"], "--pairs 4: the 3 distinct sentences of {file} make only 3 pairs"),
    (["--strategy", "bm25"], "--sentences {file}: --top-k=3 asks for more neighbours than the 2 other sentences"),
    (["--top-k", "0"], "argument --top-k: must be >= 1, got 0"),  # was: pydantic's multi-line dump
])
def test_label_refuses_more_pairs_than_its_sentences_make_before_ray(tiny_cross_encoder: Path, tmp_path: Path, capsys, flags: list[str],
                                                                      message: str) -> None:
    """Before: after Ray started, `asked for 9 random pairs but the pool of 3 sentences has only 3` (the default
    --pairs, --top-k x sentences, above every pair), or a sampling.top_k the user never set."""
    sentences = tmp_path / "three.txt"
    sentences.write_text("a cat sits\na dog runs\na bird sings\n")
    args = ["label", "--model", str(tiny_cross_encoder), "--sentences", str(sentences), "--output", str(tmp_path / "out")]
    try:
        code = main([*args, *flags])
    except SystemExit as exc:  # argparse's refusal of a flag
        code = exc.code
    assert code == 2
    assert error_line(capsys.readouterr().err) == f"augsbert label: error: {message.format(file=sentences)}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("mode", "flags", "message"), [
    ("--sentences", ["--format", "csv", "--text-columns", "x,y"], "--format, --text-columns: not used with --sentences"),
    ("--input", ["--strategy", "bm25", "--top-k", "5"], "--strategy, --top-k: not used with --input"),
    ("--input", ["--pairs", "10", "--seed", "7"], "--pairs, --seed: not used with --input"),
    ("--sentences", ["--strategy", "bm25", "--pairs", "10"],
     "--pairs draws random pairs; --strategy bm25 pairs each sentence with its --top-k BM25 neighbours"),
])
def test_label_refuses_flags_of_the_other_way_of_giving_pairs(tiny_cross_encoder: Path, tmp_path: Path, capsys, mode: str,
                                                             flags: list[str], message: str) -> None:
    """Before: accepted and ignored (a --sentences file read as text lines whatever --format said)."""
    given = tmp_path / ("three.txt" if mode == "--sentences" else "pairs.csv")
    given.write_text("a cat sits\na dog runs\na bird sings\n" if mode == "--sentences" else "sentence1,sentence2\na,b\n")
    code = main(["label", "--model", str(tiny_cross_encoder), mode, str(given), "--output", str(tmp_path / "out"), *flags])
    assert code == 2
    assert error_line(capsys.readouterr().err) == f"augsbert label: error: {message}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("model", "flags", "message"), [
    ("tiny_model", [], "{model}: not a cross-encoder: it has no classification head (architectures: BertModel), so every score "
                       "would come from a random one"),  # was: labeled with a random head, exit 0
    ("tiny_two_label_cross_encoder", [], "{model}: a cross-encoder with 2 outputs (e.g. a paraphrase or NLI classifier): a "
                                         "teacher scores similarity with one (num_labels 1), and the first output of several "
                                         "may even be 'not similar'; fit one on gold instead (leave cross_encoder.trained unset)"),
    # was: labeled with the first logit (class 0, "not similar"), exit 0
    ("tiny_cross_encoder", ["--max-seq-length", "512"], "--max-seq-length 512: {model} takes at most 128 tokens"),  # was: ONNX error at the first long pair
    ("tiny_cross_encoder", ["--max-seq-length", "2"], "--max-seq-length 2: a pair takes 3 special tokens before any word"),  # was: 0 truncated
    ("tiny_cross_encoder", ["--input-columns"], "{input}: column 'note' appears 2 times"),  # was: KeyError after the model loaded
], ids=["no-head", "two-outputs", "past-positions", "below-special-tokens", "repeated-extra-column"])
def test_label_refuses_a_model_or_input_it_would_label_wrongly_before_reading_pairs(request, tmp_path: Path, capsys, model: str,
                                                                                     flags: list[str], message: str) -> None:
    model_dir = request.getfixturevalue(model)
    source = tmp_path / "pairs.csv"
    source.write_text("sentence1,sentence2,note,note\na b,c d,x,y\n" if flags == ["--input-columns"] else "sentence1,sentence2\na b,c d\n")
    flags = [] if flags == ["--input-columns"] else flags
    args = ["label", "--model", str(model_dir), "--input", str(source), "--output", str(tmp_path / "out"), *flags]
    assert main(args) == 2
    assert error_line(capsys.readouterr().err) == f"augsbert label: error: {message.format(model=model_dir, input=source)}"
    assert not (tmp_path / "out" / "_manifest.json").exists()


def test_scoring_with_a_two_output_cross_encoder_is_refused(tiny_two_label_cross_encoder: Path) -> None:
    """Before: `evaluate` and the teacher gate took its (n, 2) logits as scores."""
    from augsbert_ray.config import SpecError
    from augsbert_ray.evaluation import score_pairs

    with pytest.raises(SpecError, match=r"a cross-encoder with 2 outputs"):
        score_pairs("cross_encoder", str(tiny_two_label_cross_encoder), ["a b"], ["c d"])


def test_label_rejects_a_jsonl_line_of_two_objects(label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    """Before: arrow read two rows from the line, the line numbers went out of step, and the labeler failed."""
    source = tmp_path / "pairs.jsonl"
    source.write_text('{"sentence1": "a b", "sentence2": "c d"} {"sentence1": "e f", "sentence2": "g h"}\n'
                      '{"sentence1": "i j", "sentence2": ""}\n{"sentence1": "k l", "sentence2": "m n"}\n')
    code, out, _ = label(capsys, tiny_cross_encoder, source, tmp_path / "out")
    assert code == 0 and "pairs in 3 = labeled 1 + rejected 2" in out
    rejects = [json.loads(line) for line in (tmp_path / "out" / "_rejects.jsonl").read_text().splitlines()]
    assert [(row["line"], row["reason"]) for row in rejects] == [
        (1, "2 JSON objects on one line; JSON Lines has one per line"), (2, "empty sentence")]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("where", ["first", "middle"])
def test_a_record_longer_than_arrows_block_is_read(tmp_path: Path, fmt: str, where: str) -> None:
    """Before: `cannot read as jsonl: straddling object straddles two block boundaries (try to increase block
    size?)` (JSONL, CSV sentences), or that line naming the shard (CSV pairs): arrow reads 1 MiB blocks."""
    from augsbert_ray.data.formats import read_schema
    from augsbert_ray.data.sentences import read_sentences
    from augsbert_ray.labeling.plan import plan_shards, read_shard

    long = "word " * 600_000  # 3 MB: arrow stops at a record that crosses two block boundaries
    pairs = [("a b", "c d"), ("e f", "g h")]
    pairs.insert(0 if where == "first" else 1, (long, "i j"))
    source, sentences = tmp_path / f"pairs.{fmt}", tmp_path / f"sentences.{fmt}"
    if fmt == "csv":
        source.write_text("sentence1,sentence2\n" + "".join(f"{a},{b}\n" for a, b in pairs))
        sentences.write_text("sentence\n" + "".join(f"{a}\n" for a, _ in pairs))
    else:
        source.write_text("".join(json.dumps({"sentence1": a, "sentence2": b}) + "\n" for a, b in pairs))
        sentences.write_text("".join(json.dumps({"sentence": a}) + "\n" for a, _ in pairs))
    assert read_schema(str(source), fmt, ("sentence1", "sentence2")).names == ["sentence1", "sentence2"]
    windows = [window for shard in plan_shards([str(source)], fmt, ("sentence1", "sentence2"), 100) for window in read_shard(shard, 100)]
    assert [row for window in windows for row in zip(*window.table.to_pydict().values())] == pairs
    assert [window.lines.tolist() for window in windows] == [[2, 3, 4] if fmt == "csv" else [1, 2, 3]]
    assert read_sentences(sentences) == [a.strip() for a, _ in pairs]


@pytest.mark.parametrize(("text", "message"), [
    ("", "{file}: an empty file, no record"),
    ("not json\n[1]\n", "{file}:1: invalid JSON: Expecting value: line 1 column 1 (char 0); no line of the file is a record"),
    ('{"sentence1": 3, "sentence2": "x"}\n', "{file}:1 field 'sentence1': not text: 3; no line of the file is a record"),
], ids=["empty", "no-json", "no-text"])
def test_a_jsonl_input_without_a_record_names_its_first_bad_line(tmp_path: Path, text: str, message: str) -> None:
    """Before: `cannot read as jsonl: Empty JSON file` for each (the schema came from well-formed lines only)."""
    from augsbert_ray.data.formats import read_schema

    source = tmp_path / "pairs.jsonl"
    source.write_text(text)
    with pytest.raises(SpecError) as raised:
        read_schema(str(source), "jsonl", ("sentence1", "sentence2"))
    assert str(raised.value) == message.format(file=source)


def test_a_sentence_list_reads_lines_as_its_csv_and_jsonl_siblings_do(tmp_path: Path) -> None:
    """A .txt sentence list. Before: a UTF-8 BOM stayed on the first sentence (its gold pairs then passed the
    exclusion and became candidates), U+2028 split a sentence in two, and bad UTF-8 was a bare
    UnicodeDecodeError naming neither file nor line."""
    sentences = tmp_path / "sentences.txt"
    sentences.write_bytes(b"\xef\xbb\xbfthe cat sat\r\nthe dog ran\xe2\x80\xa8on\na bird flew\n")
    assert read_sentences(sentences) == ["the cat sat", "the dog ran\u2028on", "a bird flew"]
    sentences.write_bytes(b"a b\nc d\n\xff e\n")
    with pytest.raises(SpecError, match=rf"^target.sentences {re.escape(str(sentences))}:3: not UTF-8; save the file as UTF-8$"):
        read_sentences(sentences, "target.sentences")
    # JSONL: arrow's reader kept the bytes, and reading them as text raised a bare UnicodeDecodeError
    sentences = tmp_path / "sentences.jsonl"
    sentences.write_bytes(b'{"sentence": "alpha"}\n{"sentence": "beta"}\n{"sentence": "\xff bad"}\n')
    with pytest.raises(SpecError, match=rf"^target.sentences {re.escape(str(sentences))}:3: not UTF-8; save the file as UTF-8$"):
        read_sentences(sentences, "target.sentences")


def test_a_sentence_of_invisible_characters_is_empty(tmp_path: Path) -> None:
    """A zero-width space, a BOM or a soft hyphen alone reach the model as an empty sentence. Before: gold kept the
    pair, labeling scored it, and a sentence list kept it as a sentence (`str.strip` leaves them)."""
    from augsbert_ray.config import SourceSpec
    from augsbert_ray.data import read_pairs
    from augsbert_ray.labeling.scorer import check_pairs

    invisible = ["\u200b", "\ufeff \u200b", "\u00ad", "\u2060\t"]
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"sentence1": text, "sentence2": "a dog", "label": 0.5}) + "\n" for text in invisible)
                    + json.dumps({"sentence1": "a cat\u200b", "sentence2": "a dog", "label": 0.5}) + "\n")
    result = read_pairs(SourceSpec(path=gold), "regression")
    assert result.table.column("sentence1").to_pylist() == ["a cat\u200b"]
    assert [(r.line, r.field, r.reason) for r in result.rejects] == [(line, "sentence1", "empty sentence") for line in range(1, 5)]

    pairs = pa.table({"sentence1": [*invisible, "a cat"], "sentence2": ["a dog"] * 5})
    valid, rejects = check_pairs(pairs, ("sentence1", "sentence2"), "pairs.jsonl", np.arange(1, 6))
    assert valid.tolist() == [False] * 4 + [True]
    assert [(r.line, r.reason) for r in rejects] == [(line, "empty sentence") for line in range(1, 5)]

    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join([*invisible, "a cat", "a dog"]) + "\n")
    assert read_sentences(sentences) == ["a cat", "a dog"]


def test_a_parquet_string_view_column_is_text(tmp_path: Path) -> None:
    """Polars and newer pyarrow can write string_view columns; they were refused as 'not text'."""
    from augsbert_ray.data.formats import read_schema

    table = pa.table({"sentence1": pa.array(["a b"], pa.string_view()), "sentence2": pa.array(["c d"], pa.string_view())})
    pq.write_table(table, tmp_path / "view.parquet")
    assert read_schema(str(tmp_path / "view.parquet"), "parquet", ("sentence1", "sentence2")).field("sentence1").type == pa.string()


def test_run_refuses_an_sbert_seed_search_too_short_to_cull_before_any_fit(ray_session, tmp_path: Path, capsys) -> None:
    """Before: the teacher was fitted first, and the search failed after it."""
    job = job_file(tmp_path, own_data(tmp_path, scores(20)), tuning={"seeds": 2, "models": ["sbert"]})
    line, _ = run_error(tmp_path, capsys, job)
    assert line == ("augsbert run: error: tuning of sbert on 20 gold train pairs (bi_encoder.batch_size=16, epochs=1): a fit of 1 "
                    "step(s) is too short to cull at 0.2: it needs at least 5 steps; train on more pairs or epochs, or raise "
                    "tuning.cull_at")


def test_run_refuses_sampling_the_pool_cannot_give_before_any_fit(ray_session, tmp_path: Path, capsys) -> None:
    """Before: it failed after the teacher and SBERT fits."""
    line, _ = run_error(tmp_path, capsys, job_file(tmp_path, own_data(tmp_path, scores(20))), "sampling.strategies=[kde]",
                        "sampling.kde_pool=100000")
    assert re.fullmatch(r"augsbert run: error: sampling.kde_pool 100000: the \d+ sentences make only \d+ pairs that are not gold", line), line


@pytest.mark.parametrize("kind", ["header-only-csv", "empty-parquet", "all-rejected", "all-rejected-int8"])
def test_label_warns_when_nothing_is_labeled(label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path, capsys, kind: str) -> None:
    """Before: exit 0 and no word of it; at int8, `ValueError: --precision int8 calibrates on the input's first
    pairs, and it has no pair with two sentences`, exit 1."""
    if kind == "empty-parquet":
        data = tmp_path / "pairs.parquet"
        pq.write_table(pa.table({"sentence1": pa.array([], pa.string()), "sentence2": pa.array([], pa.string())}), data)
    else:
        data = tmp_path / "pairs.csv"
        data.write_text("sentence1,sentence2\n" + (" ,a dog\na cat,\n" if kind.startswith("all-rejected") else ""))
    code, out, err = label(capsys, tiny_cross_encoder, data, tmp_path / "out", *(["--precision", "int8"] if kind.endswith("int8") else []))
    assert code == 0, err
    rejected = kind.startswith("all-rejected")
    why = f"every pair was rejected (see {tmp_path / 'out' / '_rejects.jsonl'})" if rejected else "the input holds no pairs"
    pairs_in = 2 if rejected else 0
    assert f"pairs in {pairs_in} = labeled 0 + rejected {pairs_in}" in out
    assert err.endswith(f"augsbert label: warning: 0 pairs labeled ({pairs_in} pairs in): {why}\n")


# --- --address: an unreachable cluster fails within AUGSBERT_CONNECT_TIMEOUT -----------------------------------


def label_in_a_process(
    tiny_cross_encoder: Path, tmp_path: Path, address: str | None, timeout_s: str, env_vars: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    """`augsbert label --address ADDRESS` (no --address for None) in a process of its own (this session's Ray would
    be reused)."""
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2\na cat,a dog\n")
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(REPO), AUGSBERT_CONNECT_TIMEOUT=timeout_s, **(env_vars or {}))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "augsbert_ray.cli", "label", "--model", str(tiny_cross_encoder), "--input", str(pairs),
         "--output", str(tmp_path / "out"), *(["--address", address] if address else [])],
        env=env, capture_output=True, text=True, timeout=300)
    return result, time.monotonic() - started


def test_address_with_nothing_listening_fails_at_once(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """Before: ray.init retried for more than 7 minutes (measured on 127.0.0.1:1)."""
    result, _ = label_in_a_process(tiny_cross_encoder, tmp_path, "127.0.0.1:1", "60")
    assert result.returncode == 2, result.stderr[-3000:]
    line = result.stderr.splitlines()[-1]
    assert line.startswith("augsbert label: error: cannot reach a Ray cluster at 127.0.0.1:1: ") and "Connection refused" in line


def test_address_that_does_not_answer_fails_after_the_timeout(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """A port that accepts connections but never answers (as a host behind a firewall that drops packets would
    not even accept): the check gives up after AUGSBERT_CONNECT_TIMEOUT seconds."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        result, seconds = label_in_a_process(tiny_cross_encoder, tmp_path, f"127.0.0.1:{port}", "3")
    assert result.returncode == 2, result.stderr[-3000:]
    line = result.stderr.splitlines()[-1]
    assert line.startswith(f"augsbert label: error: cannot reach a Ray cluster at 127.0.0.1:{port}: ")
    assert line.endswith(": no answer within 3 s ($AUGSBERT_CONNECT_TIMEOUT sets the wait)")
    assert 3 <= seconds < 60  # it waited the 3 s, not the minutes ray.init would (the process, imports included)


def test_a_ray_client_address_that_does_not_answer_is_one_line(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """ray:// goes to Ray Client, which gives up by itself (3 tries, 5 + 10 + 15 s by default; 1 s each here, set
    through Ray's own variables); its ConnectionError becomes one line."""
    quick = {"RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "1", "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "1"}
    result, _ = label_in_a_process(tiny_cross_encoder, tmp_path, "ray://127.0.0.1:1", "60", quick)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "augsbert label: error: cannot join a Ray cluster at ray://127.0.0.1:1: ray client connection timeout"


def test_ray_address_in_the_environment_is_the_default_address(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """`ray job submit -- augsbert label ...` (no --address): the driver's $RAY_ADDRESS is joined as --address is, its
    GCS checked first. Before: Ray's own fallback joined it, unchecked, with labeling in the driver."""
    result, _ = label_in_a_process(tiny_cross_encoder, tmp_path, None, "60", {"RAY_ADDRESS": "127.0.0.1:1"})
    assert result.returncode == 2, result.stderr[-3000:]
    line = result.stderr.splitlines()[-1]
    assert line.startswith("augsbert label: error: cannot reach a Ray cluster at 127.0.0.1:1: ") and "Connection refused" in line


def test_ray_address_resolution(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path, capsys) -> None:
    """--address, else $RAY_ADDRESS, else an embedded local Ray; the defaults that follow a cluster follow it too. A
    dashboard URL there (exported for `ray job submit`) stopped `augsbert run` with Ray's multi-line error."""
    import argparse

    from augsbert_ray import cli, runtime

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert runtime.cluster_address(None) is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert runtime.cluster_address(None) == "10.0.0.5:6379"
    assert runtime.cluster_address("auto") == "auto"
    args = argparse.Namespace(address=None, resume=None, force_resume=False, job=str(REPO / "jobs/stsb_indomain_bm25.yaml"))
    spec, _ = cli.job_spec(args, [f"data.data_dir={data_dir}", "training.max_failures=null"])  # its default
    assert (spec.ray.address, spec.training.max_failures) == ("10.0.0.5:6379", 1)

    monkeypatch.setattr(runtime.ray, "is_initialized", lambda: False)  # as a library caller's fresh process finds it
    with pytest.raises(SpecError) as raised:
        runtime.init_ray(None)
    assert str(raised.value) == ("$RAY_ADDRESS is 10.0.0.5:6379, which ray.init would join instead of starting an embedded "
                                 "local Ray: set ray.address to it (the CLI does), or unset it")

    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    monkeypatch.chdir(REPO)
    assert main(["run", "jobs/stsb_indomain_bm25.yaml", "--data-dir", str(data_dir), "--set", f"output_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err == (
        "augsbert run: error: $RAY_ADDRESS: http://127.0.0.1:8265 is a dashboard URL, which `augsbert submit` takes; to "
        "join a cluster give auto, HOST:6379 or ray://HOST:10001; or unset it to run on an embedded local Ray\n"
    )
    assert not list(tmp_path.iterdir())


def test_a_running_cluster_passes_the_check(ray_session) -> None:
    gcs = ray_session.get_runtime_context().gcs_address
    check_gcs(gcs, gcs, 10)  # this session's GCS answers (with the session's auth token)


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan"])
def test_connect_timeout_must_be_positive(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AUGSBERT_CONNECT_TIMEOUT", value)
    with pytest.raises(SpecError) as raised:
        connect_timeout()
    assert str(raised.value) == f"$AUGSBERT_CONNECT_TIMEOUT must be a positive number of seconds, got {value!r}"


# --- errors that come through Ray: one line, exit 1 (2 for bad input), the traceback with -v -------------------


def model_with_cut_weights(tiny_cross_encoder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the tiny cross-encoder with its weights cut in half (it passes the driver's checks, and fails to
    load), and a one-pair CSV to label with it."""
    model = tmp_path / "model"
    shutil.copytree(tiny_cross_encoder, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2\na cat,a dog\n")
    return model, pairs


@pytest.mark.parametrize("verbose", [False, True])
def test_a_failed_labeling_actor_is_one_line(ray_session, tiny_cross_encoder: Path, tmp_path: Path, capsys, verbose: bool) -> None:
    """Weights cut in half: the model directory passes the driver's checks, and every actor fails to start."""
    model, pairs = model_with_cut_weights(tiny_cross_encoder, tmp_path)
    code = main([*(["-v"] if verbose else []), "label", "--model", str(model), "--input", str(pairs), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    hint = "" if verbose else " (rerun with -v for Ray's traceback)"
    assert re.fullmatch(rf"augsbert label: error: \S*SafetensorError: .+{re.escape(hint)}", error_line(err)), error_line(err)
    assert err.endswith(error_line(err) + "\n")
    assert ('augsbert_ray/cli/__init__.py", line' in err) == verbose  # the driver's own traceback, from main down


def test_a_labeler_that_fails_without_ray_is_one_line(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """With one CPU actor and no Ray (a process of its own: this session's Ray is running), the labeler runs in the
    command's process: its failure is one line and exit 1 too."""
    model, pairs = model_with_cut_weights(tiny_cross_encoder, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run([sys.executable, "-m", "augsbert_ray.cli", "label", "--model", str(model), "--input", str(pairs),
                             "--output", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    line = error_line(result.stderr)
    assert re.fullmatch(r"augsbert label: error: \S*SafetensorError: .+ \(rerun with -v for the traceback\)", line), line
    assert "Traceback" not in result.stderr and "Started a local Ray" not in result.stderr


def test_ray_failure_finds_the_root_cause(ray_session) -> None:
    ray = ray_session

    @ray.remote(num_cpus=0)
    def fails(error: Exception) -> None:
        raise error

    def raised(error: Exception) -> BaseException:
        try:
            ray.get(fails.remote(error))
        except Exception as exc:  # RayTaskError(<type of error>)
            return exc
        raise AssertionError("the task did not fail")

    assert ray_failure(raised(KeyError("no column 'x'"))) == ("KeyError: \"no column 'x'\"", 1)
    assert ray_failure(raised(SpecError("pairs.csv:7 field 'label': bad"))) == ("pairs.csv:7 field 'label': bad", 2)
    collapsed = "models/sbert: dev split: all 4 scores are 1 (a fit that collapsed?)"  # an evaluation task's: was exit 1
    assert ray_failure(raised(UnusableScores(collapsed))) == (collapsed, 2)
    try:
        raise RuntimeError("tuning sbert cull: 1 trial(s) failed: seed42") from raised(ZeroDivisionError("division by zero"))
    except RuntimeError as chained:
        assert ray_failure(chained) == ("ZeroDivisionError: division by zero", 1)
    assert ray_failure(WorkerGroupError("worker 0 failed", {0: MemoryError("out of memory")})) == ("MemoryError: out of memory", 1)
    assert ray_failure(ValueError("no Ray in it")) is None


def test_ray_failure_reads_a_ray_data_udf_error_from_its_remote_traceback(ray_session) -> None:
    """Ray Data wraps a UDF's exception in a UserCodeException whose cause stays in the worker."""
    import ray.data

    class Fails:
        def __call__(self, batch: dict) -> dict:
            raise KeyError("no column 'x'")

    # no CPU reserved: Ray Data may keep the failed actor alive, and a reserved CPU would starve a later test's fit
    with pytest.raises(Exception) as raised:
        ray.data.from_items([{"a": 1}]).map_batches(Fails, compute=ray.data.ActorPoolStrategy(size=1), batch_size=1, num_cpus=0).materialize()
    assert ray_failure(raised.value) == ("KeyError: \"no column 'x'\"", 1)


def test_a_missing_training_file_is_named_before_ray_train_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from augsbert_ray.config import BiEncoderSpec, TrainingSpec
    from augsbert_ray.training import fit_bi_encoder

    monkeypatch.chdir(tmp_path)  # a relative path is named as the absolute one the workers would have read
    with pytest.raises(FileNotFoundError, match=rf"^training sbert: no such file: {re.escape(str(tmp_path / 'gone.parquet'))}$"):
        fit_bi_encoder(BiEncoderSpec(), "minilm", [("gone.parquet", "label")], TrainingSpec(), 0, tmp_path / "ray_train", "sbert",
                       tmp_path / "model")
    assert not (tmp_path / "ray_train").exists()


# --- bf16 on a CPU without bf16 instructions ---------------------------------------------------------------------


def test_cpu_bf16_follows_the_cpus_flags() -> None:
    from augsbert_ray.runtime import cpu_has_bf16

    if platform.machine() != "x86_64":
        assert cpu_has_bf16()  # not judged off x86
        return
    flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)[1].split())
    assert cpu_has_bf16() == bool(flags & {"avx512_bf16", "amx_tile"})


def test_bf16_on_a_cpu_without_it_stops_before_ray_starts(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path, capsys) -> None:
    """Without bf16 instructions, torch runs bf16 8-45 times slower than fp32 (runtime.cpu_has_bf16): a run or a
    labeling job asking for it on this machine's CPU stops at once, naming the settings."""
    from augsbert_ray import runtime

    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(REPO)
    both = ["--set", "training.bf16=true", "--set", "labeling.precision=bf16"]
    assert main(["run", "jobs/stsb_indomain_bm25.yaml", "--data-dir", str(data_dir), "--set", f"output_dir={tmp_path}", *both]) == 2
    assert capsys.readouterr().err == (
        "augsbert run: error: training.bf16 and labeling.precision bf16: this CPU has no bf16 instructions (AVX512-BF16 "
        "or AMX), where bf16 runs 8-45 times slower than fp32; use fp32 here, or bf16 on a GPU\n"
    )
    assert not list(tmp_path.iterdir())  # nothing read, fitted or labeled, and no run directory left
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2\na cat,a dog\n", encoding="utf-8")
    assert main(["label", "--model", "minilm", "--input", str(pairs), "--output", str(tmp_path / "out"), "--precision", "bf16"]) == 2
    assert "augsbert label: error: --precision bf16: this CPU has no bf16 instructions" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    runtime.check_cpu_bf16(None, {"training.bf16": False, "labeling.precision bf16": False})  # fp32, or bf16 on a GPU
    runtime.check_cpu_bf16("auto", {"training.bf16": True})  # a cluster's CPUs are not this machine's
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    runtime.check_cpu_bf16(runtime.cluster_address(None), {"training.bf16": True})


def test_bf16_on_a_nodes_cpu_without_it_warns_there(monkeypatch: pytest.MonkeyPatch, tiny_model: Path, caplog) -> None:
    """The driver judges only its own CPU: on a cluster, a labeling actor (and a fit, ray_fit.train_and_report) that
    runs bf16 on a CPU without bf16 instructions logs one warning naming its node; fp32 logs none."""
    from augsbert_ray import runtime
    from augsbert_ray.scoring.backend import EmbeddingModel

    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(runtime.log, "propagate", True)  # as in the driver (a worker's logger has its own handler)
    with caplog.at_level(logging.WARNING, logger="augsbert"):
        EmbeddingModel(str(tiny_model), "fp32", 1, None)
        EmbeddingModel(str(tiny_model), "bf16", 1, None)
    assert [record.getMessage() for record in caplog.records] == [
        f"a labeling actor runs bf16 on the CPU of {socket.gethostname()}, which has no bf16 instructions (AVX512-BF16 "
        "or AMX): 8-45 times slower than fp32 there"
    ]


GPU_PROBE = """
import ray
from augsbert_ray.training.ray_fit import check_gpu_workers

ray.init(num_cpus=1, num_gpus=1, include_dashboard=False)  # a GPU declared to Ray, which this torch cannot see
try:
    check_gpu_workers("sbert")
except RuntimeError as exc:
    print(exc)
"""


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine's torch sees a GPU")
def test_a_fit_on_a_gpu_its_torch_cannot_see_stops_naming_why(tmp_path: Path) -> None:
    """training.use_gpu on a GPU node whose torch is a CPU build (as `make install` makes it): Ray Train's NCCL
    set-up failed without saying why; a task on a GPU node asks its torch first. A Ray of its own, with a GPU
    declared (this session's Ray has none)."""
    import tempfile

    import torch

    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "PYTHONPATH": str(REPO),
           "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp")}
    try:
        result = subprocess.run([sys.executable, "-c", GPU_PROBE], env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == (
        f"training sbert: a Ray Train worker on {socket.gethostname()} reserved a GPU, but torch {torch.__version__} there "
        "sees none (a CPU build, or no CUDA driver): install a CUDA build of torch on the GPU nodes, or set training.use_gpu: false"
    )


def test_a_ray_without_its_dashboard_packages_stops_with_one_line(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path, capsys) -> None:
    """A Ray installed without ray[default] (as on a lent GPU machine's image) made ray.init fail with a traceback
    and "Cannot include dashboard with missing packages."; a run now stops with one line that says what to install."""
    import ray

    monkeypatch.setitem(sys.modules, "ray.dashboard.optional_deps", None)  # its import raises ImportError, as there
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as a fresh `augsbert run` finds it
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(REPO)
    assert main(["run", "jobs/stsb_indomain_bm25.yaml", "--data-dir", str(data_dir), "--set", f"output_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err == (
        "augsbert run: error: the embedded Ray's dashboard, whose State API Ray Train's fits need, lacks a package "
        "(import of ray.dashboard.optional_deps halted; None in sys.modules): pip install 'ray[default]==2.60.0'\n"
    )


def test_tune_without_a_tuning_section_makes_no_run_directory(tmp_path: Path, capsys) -> None:
    """Before: the refused command left a run directory with a run.log."""
    assert main(["tune", str(REPO / "jobs" / "stsb_indomain_bm25.yaml"), "--set", f"output_dir={tmp_path / 'runs'}"]) == 2
    assert error_line(capsys.readouterr().err) == "augsbert tune: error: augsbert tune needs a 'tuning' section in the job spec (e.g. tuning: {seeds: 5})"
    assert not (tmp_path / "runs").exists()


def test_tune_refuses_a_cross_encoder_no_tuned_model_uses(tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    """Before: README's tune example (tuning.models: [sbert]) took --cross-encoder and never used it."""
    assert main(["tune", str(REPO / "jobs" / "stsb_seed_opt.yaml"), "--cross-encoder", str(tiny_cross_encoder),
                 "--set", f"output_dir={tmp_path / 'runs'}"]) == 2
    assert error_line(capsys.readouterr().err) == (
        f"augsbert tune: error: --cross-encoder {tiny_cross_encoder}: the tuned models (tuning.models: [sbert]) need no "
        "teacher; it labels silver for tuned AugSBERT models (e.g. --set 'tuning.models=[augsbert_bm25]')")
    assert not (tmp_path / "runs").exists()


def test_a_run_refused_for_its_data_leaves_no_spec_to_resume(tmp_path: Path, capsys) -> None:
    """Before: spec.yaml was written before the data directory was checked, so `augsbert reproduce` took the refused
    run for a stopped one and continued it with that spec, unchecked; and the refused run left its directory."""
    assert main(["run", str(REPO / "jobs" / "stsb_indomain_bm25.yaml"), "--data-dir", str(tmp_path / "no-data"),
                 "--set", f"output_dir={tmp_path / 'runs'}"]) == 2
    assert "data directory" in error_line(capsys.readouterr().err)
    assert not list((tmp_path / "runs").iterdir())
