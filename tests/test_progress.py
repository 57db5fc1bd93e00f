"""A fit shows one readable progress line (steps done / total, rate, ETA, loss) instead of raw log dicts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from augsbert_ray.config import BiEncoderSpec, JobSpec
from augsbert_ray.runtime import CONSOLE_LINE, format_seconds
from augsbert_ray.training.bi_encoder import bi_encoder_loss
from augsbert_ray.training.ray_fit import training_arguments, with_progress_line


def test_a_fit_prints_progress_lines_and_no_log_dicts(tiny_model: Path, tmp_path: Path, capsys) -> None:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    spec = BiEncoderSpec(batch_size=8)
    pairs = pa.table({"sentence1": [f"a cat number {i}" for i in range(120)], "sentence2": [f"a dog {i}" for i in range(120)],
                      "label": [i / 120 for i in range(120)]})
    model = SentenceTransformer(str(tiny_model))
    args = training_arguments(SentenceTransformerTrainingArguments, spec, 0, str(tmp_path), True, distributed=False)
    args.logging_steps = 5
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset(pairs), loss=bi_encoder_loss(model, spec))
    with_progress_line(trainer, "sbert", every_seconds=0)  # a line at every step
    trainer.train()

    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert not [line for line in lines if line.lstrip().startswith("{")]  # no raw {'loss': ...} dicts
    progress = [line for line in lines if line.startswith("fit sbert: ")]
    assert len(progress) == 15  # 120 pairs / 8 per batch
    # the first step pays for warming up: its line gives its time, and the rate starts after it
    assert re.fullmatch(r"fit sbert: step 1/15 \(7%\), first step \d+\.\d s", progress[0]), progress[0]
    pattern = r"fit sbert: step (\d+)/15 \((\d+)%\), \d+\.\d\d steps/s, ETA \d+m\d\ds(, loss \d+\.\d{4})?"
    steps = [int(re.fullmatch(pattern, line).group(1)) for line in progress[1:]]
    assert steps == list(range(2, 16))
    assert progress[-1].startswith("fit sbert: step 15/15 (100%)") and ", loss " in progress[-1] and "ETA 0m00s" in progress[-1]


def test_time_left_reads_in_minutes_or_hours() -> None:
    assert [format_seconds(s) for s in (0, 59.6, 61, 3600 * 2 + 61, float("inf"))] == ["0m00s", "1m00s", "1m01s", "2h01m", "unknown"]


def test_the_ray_line_reads_as_words_not_a_dict() -> None:
    """Before: joining a cluster printed `ray: {'object_store_memory': ..., 'node:10.0.0.1': 1.0, ...}`."""
    from augsbert_ray.runtime.ray_cluster import resources_line

    cluster = {"CPU": 48.0, "GPU": 2.0, "memory": 1e11, "object_store_memory": 3.05e10, "node:10.0.0.1": 1.0, "node:10.0.0.2": 1.0,
               "node:__internal_head__": 1.0, "accelerator_type:H100": 2.0}
    assert resources_line(cluster, "10.0.0.1:6379") == ("the Ray cluster at 10.0.0.1:6379: 2 nodes, 48 CPUs, 2 GPUs, 30.5 GB object "
                                                         "store; also {'accelerator_type:H100': 2.0}")
    assert resources_line({"CPU": 2.0, "object_store_memory": 1.2e9, "node:127.0.0.1": 1.0}, None) == \
        "an embedded local Ray on 127.0.0.1: 2 CPUs, no GPU, 1.2 GB object store"


FIT_IN_A_NEW_RAY = """
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from augsbert_ray.config import BiEncoderSpec, TrainingSpec
from augsbert_ray.runtime import chatter_to, init_ray, setup_logging
from augsbert_ray.training import fit_bi_encoder

model, work = sys.argv[1], Path(sys.argv[2])
os.chdir(work)  # relative paths, as a user in a notebook gives them
pairs = pa.table({"sentence1": [f"a cat number {i}" for i in range(64)], "sentence2": [f"a dog {i}" for i in range(64)],
                  "label": pa.array([i / 64 for i in range(64)], pa.float32())})
pq.write_table(pairs, "pairs.parquet")
setup_logging()
with chatter_to(work / "run.log"):  # as `augsbert run` does without -v
    init_ray(num_cpus=2)
    fit_bi_encoder(BiEncoderSpec(model=model, batch_size=8), model, [("pairs.parquet", "label")],
                   TrainingSpec(cpus_per_worker=1), 0, Path("ray_train"), "sbert", Path("model"))
"""

CHATTER = r"""
import logging, os, sys, warnings
from pathlib import Path

from augsbert_ray.runtime import chatter_to, log, setup_logging

setup_logging()
with chatter_to(Path(sys.argv[1])):
    print("library chatter on stdout", flush=True)
    warnings.warn("a library warning")
    os.write(2, b"C++ chatter on descriptor 2\n")
    logging.getLogger("ray").warning("ray chatter")
    log.info("stage 1/8: read gold data")
    print("\x1b[36m(RayTrainWorker pid=123)\x1b[0m fit sbert: step 5/10 (50%), 1.00 steps/s, ETA 0m05s", flush=True)
    print("\x1b[36m(run_trial pid=124)\x1b[0m fit sbert-s43: step 2/10 (20%), 0.50 steps/s, ETA 0m16s\x1b[32m [repeated 2x "
          "across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication)\x1b[0m", flush=True)
    log.warning("the teacher is not better than SBERT")
    print("\x1b[36m(RayTrainWorker pid=123)\x1b[0m \r      \r12:00:00 INFO augsbert: resuming from step 20", flush=True)
print("after: on the console", flush=True)
"""


def test_chatter_goes_to_the_log_and_the_console_keeps_the_runs_own_lines(tmp_path: Path) -> None:
    """Without -v, `augsbert run` sends everything written to stdout and stderr (Python, C++ or Ray's forwarding of
    worker output) to run.log; the console keeps the augsbert logger's lines and the fits' progress lines."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run([sys.executable, "-c", CHATTER, str(tmp_path / "run.log")], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    console = [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in (result.stdout + result.stderr).splitlines()]
    assert sorted(console) == sorted([
        f"INFO augsbert: Ray's and the libraries' output goes to {tmp_path / 'run.log'} (-v shows it here)",
        "INFO augsbert: stage 1/8: read gold data",
        "fit sbert: step 5/10 (50%), 1.00 steps/s, ETA 0m05s",
        "fit sbert-s43: step 2/10 (20%), 0.50 steps/s, ETA 0m16s",  # without Ray's note on the lines it deduplicated
        "WARNING augsbert: the teacher is not better than SBERT",
        "INFO augsbert: resuming from step 20",
        "after: on the console",
    ])
    log = (tmp_path / "run.log").read_text()
    for chatter in ("library chatter on stdout", "UserWarning: a library warning", "C++ chatter on descriptor 2",
                    "ray chatter", "augsbert: stage 1/8", "(RayTrainWorker pid=123)"):
        assert chatter in log
    assert "after: on the console" not in log


def test_each_run_logs_to_its_own_run_log(tmp_path: Path, capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run`` (and ``tune``) with verbose=False, as `augsbert run` and `tune` call them, divert each run's chatter
    to that run's run.log, and the console gets it back after the run."""
    from augsbert_ray.pipeline import jobs
    from augsbert_ray.pipeline.result import RunResult

    def start_run(spec: JobSpec, resume: Path | None, data_dir: str, force: bool, run_dir: Path) -> SimpleNamespace:
        os.write(1, f"chatter of {spec.name} from {data_dir}\n".encode())
        return SimpleNamespace(spec=spec, run_dir=run_dir)

    def run_steps(ctx: SimpleNamespace, steps: object) -> dict[str, RunResult]:
        return {"result": RunResult(ctx.run_dir, "regression", {})}

    monkeypatch.setattr(jobs, "start_run", start_run)
    monkeypatch.setattr(jobs, "run_steps", run_steps)
    run_dirs = [jobs.run(JobSpec.model_validate({"output_dir": str(tmp_path), "name": name}), data_dir="data", verbose=False).run_dir
                for name in ("first", "second")]
    os.write(1, b"after the runs\n")
    assert [(run_dir / "run.log").read_text().count("chatter of") for run_dir in run_dirs] == [1, 1]
    assert "chatter of second from data" in (run_dirs[1] / "run.log").read_text()
    console = capfd.readouterr().out
    assert "chatter" not in console and "after the runs" in console


def fit_in_a_new_ray(tiny_model: Path, work: Path) -> subprocess.CompletedProcess:
    """`FIT_IN_A_NEW_RAY` in a process of its own, with its own embedded Ray (dashboard on, as `augsbert run` starts
    it). tests/test_fault_tolerance.py runs it beside this session's Ray, as the other Ray on the host whose
    dashboard must not disturb a fit, and checks its console with check_a_fit_on_ray_prints_each_progress_line_once."""
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as ray_tmpdir:  # AF_UNIX socket paths stay short
        env = {**os.environ, "RAY_TMPDIR": ray_tmpdir, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        env.pop("RAY_ADDRESS", None)
        return subprocess.run([sys.executable, "-c", FIT_IN_A_NEW_RAY, str(tiny_model), str(work)], env=env,
                              capture_output=True, text=True, timeout=600)


def check_a_fit_on_ray_prints_each_progress_line_once(result: subprocess.CompletedProcess, work: Path) -> None:
    """Ray Train copies a worker's print() into its logger, and Hugging Face datasets' hashing printed a bytecode
    listing: the console of a fit in an embedded Ray (as `augsbert run` starts it) shows neither."""
    assert result.returncode == 0, result.stderr[-3000:]
    console = (result.stdout + result.stderr).splitlines()
    final = [line for line in console if "fit sbert: step 8/8 (100%)" in line]
    assert len(final) == 1 and final[0].startswith("fit sbert: "), final  # once, without Ray's worker prefix
    assert not [line for line in console if "RETURN_VALUE" in line or "LOAD_GLOBAL" in line]
    # Ray's own lines went to the log, which has the progress line too
    assert not [line for line in console if not CONSOLE_LINE.match(line)], console
    log = (work / "run.log").read_text()
    assert "Started a local Ray instance" in log and "fit sbert: step 8/8 (100%)" in log
    assert (work / "model" / "model.safetensors").is_file()  # given relative paths, from the fit's directory
