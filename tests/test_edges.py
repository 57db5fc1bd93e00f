"""Reliability at the edges (issue 60): one Ctrl-C stops a command with one line; a moved data folder resumes; a
train split emptied by overlap, a full disk, an overlong or looping path, a NUL byte and constant labels each get one
line; reject summaries stay short; a refused address leaves no run directory; `label` keeps Ray's output off the
console; a fit's rendezvous listens on 127.0.0.1 only.

The Ctrl-C tests send SIGINT to the whole process group of an `augsbert` subprocess, as a terminal does."""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from augsbert_ray.cli import main

REPO = Path(__file__).resolve().parents[1]
JOB = "jobs/stsb_indomain_bm25.yaml"
CONSOLE = re.compile(r"\d\d:\d\d:\d\d [A-Z]+ augsbert(\.[\w.]+)?: |fit \S+: step \d+/\d+")  # the augsbert logger's lines
STOPPED = 130


@dataclass
class Stopped:
    """What an `augsbert` subprocess printed before and after the SIGINT, its status and its seconds to exit."""

    before: list[str]
    after: list[str]
    status: int
    seconds: float

    def own_lines_after(self) -> list[str]:
        """The lines after the signal that are not the augsbert logger's (which may still be on their way)."""
        return [line for line in self.after if line.strip() and not CONSOLE.match(line)]


def subprocess_env() -> dict[str, str]:
    """The test's environment for an `augsbert` subprocess: offline, with an embedded Ray of its own (a short
    RAY_TMPDIR: AF_UNIX paths stay under 108 bytes), never the test session's."""
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", RAY_TMPDIR=tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    return env


def augsbert(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = subprocess_env()
    try:
        return subprocess.run([sys.executable, "-m", "augsbert_ray.cli", *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=timeout)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def sigint_as_on_a_terminal() -> None:
    """In the child: SIGINT's default action, as a shell gives a command it runs in the foreground. A test run in
    the background (`make test &`) ignores SIGINT, and a child inherits that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(args: list[str], trigger: str, delay: float = 0.5, signals: int = 1, limit_s: float = 900,
              ready: Callable[[], bool] | None = None) -> Stopped:
    """Run `augsbert ARGS` in a session of its own; at its first output line matching ``trigger``, wait until
    ``ready()`` (if given) and then ``delay`` seconds, and send SIGINT to its process group (``signals`` times, 0.3 s
    apart)."""
    env = subprocess_env()
    process = subprocess.Popen([sys.executable, "-m", "augsbert_ray.cli", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=sigint_as_on_a_terminal)
    watchdog = threading.Timer(limit_s, lambda: os.killpg(process.pid, signal.SIGKILL))
    watchdog.start()
    before: list[str] = []
    after: list[str] = []
    sent = None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            (after if sent else before).append(line.rstrip("\n"))
            if sent is None and re.search(trigger, line):
                while ready is not None and not ready() and process.poll() is None:
                    time.sleep(0.02)
                time.sleep(delay)
                for number in range(signals):
                    os.killpg(process.pid, signal.SIGINT)
                    sent = sent or time.monotonic()
                    if number + 1 < signals:
                        time.sleep(0.3)
        status = process.wait()
    finally:
        watchdog.cancel()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert sent is not None, "the trigger never came:\n" + "\n".join(before[-20:])
    return Stopped(before, after, status, time.monotonic() - sent)


def stsb_copy(folder: Path, data_dir: Path) -> Path:
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        shutil.copy(data_dir / "stsb" / f"sts-{split}.csv", folder / f"sts-{split}.csv")
    return folder


def tiny_run_args(tiny_model: Path, output_dir: Path, data: Path, name: str = "edge") -> list[str]:
    """`augsbert run` of BM25 alone on 300 gold pairs, read from ``data`` as files (not a named dataset), with the
    tiny BERT as every model; 100-pair labeling shards (about five)."""
    settings = [
        "data.dataset=null", *(item for split in ("train", "dev", "test")
                               for item in (f"data.{split}.path={data / f'sts-{split}.csv'}", f"data.{split}.format=stsb")),
        "data.train_limit=300", "data.eval_limit=300", f"cross_encoder.model={tiny_model}", f"bi_encoder.model={tiny_model}",
        f"evaluation.zero_shot_model={tiny_model}", "cross_encoder.epochs=1", f"output_dir={output_dir}", f"name={name}",
        "sampling.strategies=[bm25]", "sampling.top_k=1", "labeling.shard_rows=100",
    ]
    return ["run", JOB, *(item for setting in settings for item in ("--set", setting))]


# 1. One Ctrl-C stops a command, with one line; a second forces the exit. (A run stopped while it labels is
# test_pipeline.py's killed run.)

@pytest.mark.slow
def test_one_ctrl_c_stops_a_run_during_a_fit(tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    """Before: Ray Train's handler aborted the fit, and the run ended with status 1 and no word."""
    data = stsb_copy(tmp_path / "data", data_dir)
    stopped = interrupt(tiny_run_args(tiny_model, tmp_path / "runs", data), r"fit cross_encoder: step 1/", delay=0)
    (run_dir,) = (tmp_path / "runs").glob("edge-*")
    assert stopped.status == STOPPED, stopped.after
    assert stopped.seconds < 30
    assert stopped.own_lines_after() == [
        f"augsbert run: interrupted: at stage 2/8 (train cross-encoder); finished fits: none; resume with: augsbert run --resume {run_dir}"
    ]


@pytest.mark.slow
def test_one_ctrl_c_stops_label_on_an_actor_pool_and_a_rerun_labels_the_rest_quietly(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """Stopped by one Ctrl-C, `augsbert label` on two actors prints one line; run again, it labels the rest, and the
    console shows only its result lines. Before: Ray's log lines (its start, Ray Data's executor, the actors'
    warnings, a GCS error forwarded after the pool's end) came out on the console."""
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2\n" + "".join(f"a man plays {n},a woman sings {n}\n" for n in range(2000)), encoding="utf-8")
    output = tmp_path / "out"
    args = ["label", "--model", str(tiny_cross_encoder), "--input", str(pairs), "--output", str(output), "--actors", "2", "--shard-rows", "200"]
    stopped = interrupt(args, r"labeling \S+: \d+ shards", delay=2)
    log = output / "_label.log"
    assert stopped.status == STOPPED, [*stopped.before, *stopped.after, log.read_text()[-3000:] if log.exists() else "no log"]
    assert stopped.seconds < 30
    (line,) = stopped.own_lines_after()
    done_before = re.fullmatch(rf"augsbert label: interrupted: (\d+) of 10 shard\(s\) labeled in {re.escape(str(output))}; run the "
                               "same command again to label the rest", line)
    assert done_before, line

    # a fresh process, as a user runs it: in pytest's, Ray's log handlers write to what its capture held at `ray.init`
    done = augsbert(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert [line for line in printed if not CONSOLE.match(line)] == [
        f"pairs in 2000 = labeled 2000 + rejected 0 (truncated to max_seq_length: 0; shards: 10, {done_before[1]} already done)",
        f"labeled pairs: {output}  manifest: {output / '_manifest.json'}  rejects: {output / '_rejects.jsonl'}",
    ]
    kept = log.read_text(encoding="utf-8")
    assert "Started a local Ray" in kept and "ShardLabeler" in kept  # Ray's lines went there


def test_a_second_ctrl_c_forces_the_exit(tmp_path: Path) -> None:
    """The first Ctrl-C raises KeyboardInterrupt; while the command still winds down (here: a cleanup that hangs), a
    second one exits at once with status 130, its line on the console though the run's output goes to its log
    (before: that line went to the log)."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from augsbert_ray.cli.interrupt import stop_on_interrupt\n"
        "from augsbert_ray.runtime.console import chatter_to\n"
        "print('ready', flush=True)\n"
        "with stop_on_interrupt('run'), chatter_to(Path(sys.argv[1])):\n"
        "    try:\n"
        "        time.sleep(60)\n"
        "    except KeyboardInterrupt:\n"
        "        print('winding down', file=sys.__stderr__, flush=True); time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run.log")], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=sigint_as_on_a_terminal)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        time.sleep(0.5)  # into chatter_to
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(1)  # winding down
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=10) == STOPPED
        assert time.monotonic() - started < 5
        assert "augsbert run: interrupted again: exiting now" in process.stdout.read()
        assert "winding down" in (tmp_path / "run.log").read_text()  # the first was handled inside chatter_to
    finally:
        if process.poll() is None:
            process.kill()


def test_a_ctrl_c_dropped_by_a_finalizer_is_raised_again() -> None:
    """Python drops an exception raised in a finalizer (a weakref callback of numba's, while the labeler loaded its
    model): before, the KeyboardInterrupt of a Ctrl-C that landed there was printed to the run log and the run went on."""
    script = (
        "import sys, time\n"
        "from augsbert_ray.cli.interrupt import stop_on_interrupt\n"
        "with stop_on_interrupt('run'):\n"
        "    try:\n"
        "        print('ready', flush=True); time.sleep(60)\n"
        "    except KeyboardInterrupt:\n"
        "        pass  # dropped, as a finalizer drops it\n"
        "    try:\n"
        "        print('dropped', flush=True); time.sleep(30)\n"
        "    except KeyboardInterrupt:\n"
        "        print('raised again', flush=True); sys.exit(130)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, preexec_fn=sigint_as_on_a_terminal)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        os.killpg(process.pid, signal.SIGINT)
        assert process.stdout.readline() == "dropped\n"
        started = time.monotonic()
        assert process.wait(timeout=15) == STOPPED
        assert time.monotonic() - started < 10
        assert process.stdout.read() == "raised again\n"
    finally:
        if process.poll() is None:
            process.kill()


# 2. A moved data folder resumes, its finished fits reused (test_pipeline.py's killed run moves its data too).

def test_a_moved_data_folder_with_its_paths_edited_still_matches_the_run(data_dir: Path, tmp_path: Path) -> None:
    """The same, without Ray: the fingerprint holds the data files' contents by role, not their paths; a changed file
    is still refused."""
    from augsbert_ray.config import SpecError, dump_spec, load_spec
    from augsbert_ray.pipeline.fingerprint import run_fingerprint, write_fingerprint
    from augsbert_ray.pipeline.resume import resume_run, resume_spec

    data = stsb_copy(tmp_path / "data", data_dir)
    files = lambda folder: [item for split in ("train", "dev", "test")  # noqa: E731
                            for item in (f"data.{split}.path={folder / f'sts-{split}.csv'}", f"data.{split}.format=stsb")]
    run_dir = tmp_path / "run"
    (run_dir / "models" / "cross_encoder").mkdir(parents=True)
    spec = load_spec(None, ["data.dataset=null", *files(data)])
    (run_dir / "spec.yaml").write_text(dump_spec(spec), encoding="utf-8")
    write_fingerprint(run_dir, run_fingerprint(spec, None))
    (run_dir / "progress.json").write_text(json.dumps({"cross_encoder": {"wall_seconds": 1.0, "trained_on": 10}}), encoding="utf-8")
    moved = tmp_path / "moved"
    shutil.move(data, moved)
    (run_dir / "spec.yaml").write_text(dump_spec(load_spec(None, ["data.dataset=null", *files(moved)])), encoding="utf-8")
    assert list(resume_run(resume_spec(run_dir), run_dir, None, force=False).ledger.finished) == ["cross_encoder"]
    with (moved / "sts-dev.csv").open("a", encoding="utf-8") as handle:
        handle.write("main-captions\tMSRvid\t2012test\t9999\t5.000\tA man plays.\tA man plays.\n")
    with pytest.raises(SpecError, match=r"files\.data\.dev \('[0-9a-f]{16}' -> '[0-9a-f]{16}'\)"):
        resume_run(resume_spec(run_dir), run_dir, None, force=False)


# 3. A train split emptied by its overlap with dev and test says so.

def pair_csv(path: Path, labels: list[float], tag: str = "") -> Path:
    path.write_text("sentence1,sentence2,label\n" + "".join(f"a man plays {tag}{n},a woman sings {tag}{n},{label}\n"
                                                            for n, label in enumerate(labels)), encoding="utf-8")
    return path


def test_a_train_split_emptied_by_overlap_names_on_overlap(tmp_path: Path) -> None:
    """Before: "gold train split: 0 pairs, fewer than one training batch", with no word of the 40 pairs read."""
    from augsbert_ray.config import JobSpec, SpecError
    from augsbert_ray.data import check_gold_usable, load_gold

    same = pair_csv(tmp_path / "pairs.csv", [(n % 10) / 10 for n in range(40)])
    spec = JobSpec.model_validate({"data": {"dataset": None, **{split: {"path": str(same)} for split in ("train", "dev", "test")}}})
    with pytest.raises(SpecError) as caught:
        check_gold_usable(load_gold(spec.data, spec.seed), spec)
    assert str(caught.value) == (
        "gold train split: 0 pairs after data.on_overlap: drop removed 40 pairs also in dev/test (dev 40, test 40; is a dev "
        "or test file the train file?), fewer than one training batch (bi_encoder.batch_size=16); needs at least 16 pairs "
        "(a fit drops an incomplete batch)"
    )


# 4. A full disk is one line naming the path.

def test_a_full_disk_is_one_line_naming_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cause is found however deep it lies (here, as a Ray Train worker's error reaches the driver), and named
    with its path, else with the command's output and the room left there; status 1, no traceback."""
    from augsbert_ray.cli import errors
    from augsbert_ray.cli.errors import failure, writing_to

    def fit() -> None:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")  # pyarrow's copy of a checkpoint: no file name
        except OSError as exc:
            raise RuntimeError("training cross_encoder failed") from exc

    with pytest.raises(OSError) as caught, writing_to(tmp_path / "runs", "output_dir"):
        fit()  # the output's disk has room (the test's): another disk is full
    assert failure(caught.value, verbose=False) == (
        f"no space left on device, though {tmp_path / 'runs'} has {shutil.disk_usage(tmp_path).free / 1e9:,.1f} GB free: another "
        "disk is full (Ray's temp dir, $RAY_TMPDIR or /tmp; the model cache)", 1)
    monkeypatch.setattr(errors.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100, 100, 0))  # full
    with pytest.raises(OSError) as caught, writing_to(tmp_path / "runs", "output_dir"):
        fit()
    assert failure(caught.value, verbose=False) == (
        f"no space left on device writing {tmp_path / 'runs'} (0.0 MB free there); free some space, or write elsewhere (output_dir)", 1)
    with pytest.raises(OSError) as caught, writing_to(tmp_path, "--output"):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "part-0.parquet"))
    assert failure(caught.value, verbose=False)[0].startswith(f"no space left on device writing {tmp_path / 'part-0.parquet'} (")


@pytest.fixture
def full_disk(tmp_path: Path):
    """A 1 MB tmpfs (root only; skipped elsewhere)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.slow
def test_label_onto_a_full_disk_prints_one_line(full_disk: Path, tiny_cross_encoder: Path, tmp_path: Path) -> None:
    """Before: "OSError: [Errno 28] No space left on device", without the path, after some 300 lines of Ray actor
    tracebacks (the teacher's ONNX export, 4.5 MB, does not fit)."""
    pairs = pair_csv(tmp_path / "pairs.csv", [0.5] * 50)
    done = augsbert("label", "--model", str(tiny_cross_encoder), "--input", str(pairs), "--output", str(full_disk / "out"), "--actors", "2")
    assert done.returncode == 1, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip() and not CONSOLE.match(line)]
    assert len(lines) == 1 and lines[0].startswith(f"augsbert label: error: no space left on device writing {full_disk / 'out'} ("), lines


# 5. A name too long or with bad characters, and a path that loops: one line naming the field or flag.

@pytest.mark.parametrize(("name", "message"), [
    ("x" * 300, "name: Value error, is 300 bytes long; at most 236, as the run directory <name>-<stamp> must fit a file name (255 bytes)"),
    ("a:b", "name: Value error, holds ':': a run directory's name takes no control characters nor any of < > : \" | ? *"),
    ("tab\\there", "name: Value error, holds '\\t': a run directory's name takes no control characters"),
], ids=["300-bytes", "colon", "tab"])
def test_a_run_name_too_long_or_with_bad_characters_is_refused_by_the_spec(name: str, message: str) -> None:
    """Before: a 300-character name was "OSError: [Errno 36] File name too long", exit 1; a ':' or a tab made the run."""
    from augsbert_ray.config import SpecError, load_spec

    with pytest.raises(SpecError) as caught:
        load_spec(REPO / JOB, [f'name="{name}"'])
    assert f"\n  {message}" in str(caught.value)


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    """Two symlinks that point at each other."""
    first, second = tmp_path / "loop_a", tmp_path / "loop_b"
    first.symlink_to(second)
    second.symlink_to(first)
    return first


def test_a_symlink_loop_is_one_line_naming_the_flag_or_field(loop: Path, tiny_cross_encoder: Path, tmp_path: Path, capsys) -> None:
    """Before: `label --input LOOP` was "RuntimeError: Symlink loop" with its traceback."""
    from augsbert_ray.config import SpecError, load_spec

    assert main(["label", "--model", str(tiny_cross_encoder), "--input", str(loop), "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"augsbert label: error: --input {loop}: a symlink loop\n"
    assert main(["label", "--model", str(loop), "--input", str(loop), "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"augsbert label: error: model {loop}: {loop}: a symlink loop\n"
    with pytest.raises(SpecError, match=re.escape(f"data.train.path: Value error, {loop}: a symlink loop")):
        load_spec(None, ["data.dataset=null", f"data.train.path={loop}", f"data.test.path={loop}"])
    for flag, args in (("output_dir", ["run", JOB, "--set", f"output_dir={loop}/runs"]),
                       ("--resume", ["run", "--resume", str(loop)]),
                       ("--output", ["label", "--model", str(tiny_cross_encoder), "--input", str(pair_csv(tmp_path / "p.csv", [0.5])),
                                     "--output", str(loop)])):
        assert main(args) == 2, flag
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and f"{flag} {loop}" in error and "a symlink loop" in error, error


def test_an_overlong_path_is_one_line(tmp_path: Path, capsys) -> None:
    """A name over 255 bytes anywhere in a path the spec or a flag takes: before, Path.exists raised "File name too
    long" (an OSError traceback) for a data file or a model."""
    from augsbert_ray.config import SpecError, load_spec

    long = tmp_path / ("y" * 300) / "train.csv"
    with pytest.raises(SpecError, match=re.escape("data.train.path: Value error, a name of 300 bytes; a file name has at most 255")):
        load_spec(None, ["data.dataset=null", f"data.train.path={long}", f"data.test.path={long}"])
    assert main(["run", JOB, "--set", f"bi_encoder.model={tmp_path / ('m' * 300)}", "--set", f"output_dir={tmp_path}"]) == 2
    assert "\n  bi_encoder.model: Value error, a name of 300 bytes; a file name has at most 255 (got" in capsys.readouterr().err


# 6. A NUL byte inside a sentence is a counted reject; a regression train split of one label is refused.

def test_a_nul_byte_inside_a_sentence_is_a_counted_reject(tmp_path: Path) -> None:
    """Before: accepted, and stored as \\x00 (gold data, and `augsbert label` input)."""
    import numpy as np

    from augsbert_ray.config import SourceSpec
    from augsbert_ray.data import read_pairs
    from augsbert_ray.labeling.scorer import check_pairs

    path = tmp_path / "pairs.csv"
    path.write_bytes(b"sentence1,sentence2,label\na man plays,a woman sings,0.5\na m\x00an plays,a dog runs,0.4\n")
    result = read_pairs(SourceSpec(path=path), "regression")
    assert result.table.num_rows == 1 and result.rows_read == 2
    (reject,) = result.rejects
    assert (reject.line, reject.field, reject.reason) == (3, "sentence1", "a NUL character (\\x00) inside the text: a binary file, or one cut short?")
    table = pa.table({"sentence1": ["a man plays", "a m\x00an"], "sentence2": ["a woman sings", "a dog"]})
    valid, rejects = check_pairs(table, ("sentence1", "sentence2"), "in.csv", np.array([2, 3]))
    assert valid.tolist() == [True, False] and rejects[0].reason.startswith("a NUL character")


def test_a_regression_train_split_of_one_label_is_refused(tmp_path: Path) -> None:
    """Before: with bm25 (any strategy but kde) the run fitted every model, and learned nothing."""
    from augsbert_ray.config import JobSpec, SpecError
    from augsbert_ray.data import check_gold_usable, load_gold

    files = {split: pair_csv(tmp_path / f"{split}.csv", labels, tag=split)
             for split, labels in (("train", [0.6] * 40), ("dev", [n / 20 for n in range(20)]), ("test", [n / 20 for n in range(20)]))}
    spec = JobSpec.model_validate({"data": {"dataset": None, **{split: {"path": str(path)} for split, path in files.items()}},
                                   "sampling": {"strategies": ["bm25"]}})
    with pytest.raises(SpecError, match=re.escape("gold train split: all 40 labels are 0.6; regression on one label value learns nothing")):
        check_gold_usable(load_gold(spec.data, spec.seed), spec)


# 7. Reject summaries stay short; no stray colour reset; a refused address leaves no run directory; a fit's
# rendezvous listens on 127.0.0.1. (`label` keeping Ray's output off the console: in 1.)

def test_a_reject_summary_shows_the_commonest_reasons_and_a_count(tmp_path: Path) -> None:
    """Before: one entry per distinct bad value, in lines of up to 2,300 characters."""
    from augsbert_ray.data import Reject, TooManyRejectsError, check_reject_fraction

    rejects = [Reject("f.csv", n, "label", f"non-numeric score 'bad value number {n}'") for n in range(200)]
    rejects += [Reject("f.csv", 300 + n, "sentence1", "empty sentence") for n in range(5)]
    with pytest.raises(TooManyRejectsError) as caught:
        check_reject_fraction(1000, rejects, 0.01, None)
    message = str(caught.value)
    assert "(empty sentence: 5, non-numeric score 'bad value number 0': 1, non-numeric score 'bad value number 1': 1 and 198 " \
           "more reasons (198 rows))" in message
    assert len(message) < 400


def test_no_stray_color_reset_after_the_last_line() -> None:
    """Before: `make run` on a terminal ended with ESC[0m after the report (colorama's exit handler, which Ray's CLI
    logger registers when it is imported). `script` gives the command a terminal."""
    code = "import ray.autoscaler._private.cli_logger\nfrom augsbert_ray.cli import main\nraise SystemExit(main(['status', '--help']))"
    done = subprocess.run(["script", "-q", "-e", "-c", f"{sys.executable} -c {shlex.quote(code)}", "/dev/null"], cwd=REPO,
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "usage: augsbert status" in done.stdout and "\x1b[0m" not in done.stdout


@pytest.mark.slow
def test_an_address_that_does_not_answer_leaves_no_run_directory(tmp_path: Path) -> None:
    """Before: the run directory was made, holding only spec.yaml (and run.log), before Ray was joined."""
    done = augsbert("run", JOB, "--address", "127.0.0.1:1", "--set", f"output_dir={tmp_path / 'runs'}", timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith("augsbert run: error: cannot reach a Ray cluster at 127.0.0.1:1")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_a_fit_on_an_embedded_ray_listens_on_localhost_only(ray_session, tmp_path: Path) -> None:
    """Before: torch's TCPStore, the DDP rendezvous, listened on every interface ('::') during each fit."""
    from augsbert_ray.config import TrainingSpec
    from augsbert_ray.training.ray_fit import fit_on_ray

    def listening_loop(config: dict) -> None:
        """Report the addresses this worker listens on (torch's store among them), as the fit's final model.
        Nested: Ray pickles it by value, as the workers cannot import this test module."""
        import psutil
        import ray.train
        from ray.train import Checkpoint

        listening = sorted({c.laddr.ip for c in psutil.Process().net_connections("inet") if c.status == psutil.CONN_LISTEN})
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "listening.json").write_text(json.dumps(listening), encoding="utf-8")
            ray.train.report({"listening": len(listening)}, checkpoint=Checkpoint.from_directory(tmp))

    marker = tmp_path / "train.parquet"
    marker.write_bytes(b"")
    fit_on_ray(listening_loop, {"train_files": [(str(marker), "label")], "seed": 0}, TrainingSpec(cpus_per_worker=1, max_failures=0),
               tmp_path / "ray_train", "listening", tmp_path / "model")
    listening = json.loads((tmp_path / "model" / "listening.json").read_text(encoding="utf-8"))
    addresses = [ipaddress.ip_address(ip) for ip in listening]
    assert addresses and all((getattr(address, "ipv4_mapped", None) or address).is_loopback for address in addresses), listening
