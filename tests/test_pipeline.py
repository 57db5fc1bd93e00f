import contextlib
import io
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest
import yaml
from scipy.stats import spearmanr

from augsbert_ray.cli import main
from augsbert_ray.config import JobSpec
from augsbert_ray.labeling import Teacher
from augsbert_ray.pipeline.fingerprint import comparable_spec
from augsbert_ray.runtime import log
from test_edges import STOPPED, interrupt, stsb_copy

STRATEGIES = {"bm25": "augsbert_bm25", "random": "augsbert_rs", "kde": "augsbert_kde", "semantic": "augsbert_ss"}
MODELS = ("cross_encoder", "sbert", *STRATEGIES.values(), "zero_shot", "jaccard")
JOB = "jobs/stsb_indomain_bm25.yaml"


def tiny_run_settings(
    tiny_model: Path, output_dir: Path, name: str, strategies: tuple[str, ...] = tuple(STRATEGIES), extra: tuple[str, ...] = ()
) -> list[str]:
    """``strategies`` on 300 gold pairs with the tiny BERT as each model; each sentence's one best BM25 (and
    semantic) neighbour, which sizes the random pool too; 500-pair shards (the KDE pool has six); fits on one
    thread in the run's own process (Ray Train's local mode: no worker to start, the same model as on one worker);
    then the ``extra`` settings."""
    settings = [
        "data.train_limit=300", "training.num_workers=0", "training.cpus_per_worker=1", f"cross_encoder.model={tiny_model}", f"bi_encoder.model={tiny_model}",
        f"evaluation.zero_shot_model={tiny_model}", "cross_encoder.epochs=1", f"output_dir={output_dir}", f"name={name}",
        f"sampling.strategies=[{', '.join(strategies)}]", "sampling.top_k=1", "sampling.kde_pool=3000",
        "labeling.shard_rows=500", *extra,
    ]
    return [item for setting in settings for item in ("--set", setting)]


@pytest.fixture(scope="module")
def whole_run(ray_session, tiny_model: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One uninterrupted tiny run in this session's Ray: its directory, and what it printed and logged."""
    output_dir = tmp_path_factory.mktemp("whole_run")
    printed = io.StringIO()
    handler, level = logging.StreamHandler(printed), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)  # pytest's handlers on the root logger keep `augsbert run` from setting INFO there
    try:
        with contextlib.redirect_stdout(printed):
            assert main(["run", JOB, "--data-dir", str(data_dir), *tiny_run_settings(tiny_model, output_dir, "tiny")]) == 0
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    (run_dir,) = output_dir.glob("tiny-*")
    return run_dir, printed.getvalue()


@pytest.mark.slow
def test_whole_run_on_a_tiny_model(whole_run: tuple[Path, str], tiny_model: Path, data_dir: Path) -> None:
    run_dir, printed = whole_run
    tmp_path = run_dir.parent
    for name in ("spec.yaml", "metrics.json", "report.md", "score_density.png", "rejects.jsonl"):
        assert (run_dir / name).is_file(), name
    for name in ("cross_encoder", "sbert", *STRATEGIES.values()):
        assert (run_dir / "models" / name / "model.safetensors").is_file(), name
    assert yaml.safe_load((run_dir / "spec.yaml").read_text())["data"]["train_limit"] == 300

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["test"]) == set(MODELS) and set(metrics["dev"]) == set(MODELS)
    test_gold = pq.read_table(run_dir / "gold" / "test.parquet").to_pydict()
    words = [[set(re.findall(r"\w+", text.lower())) for text in test_gold[column]] for column in ("sentence1", "sentence2")]
    jaccard = [len(a & b) / len(a | b) if a | b else 0.0 for a, b in zip(*words)]
    assert metrics["test"]["jaccard"] == pytest.approx(100 * spearmanr(jaccard, test_gold["label"]).statistic, abs=1e-9)
    assert len(set(metrics["test"].values())) == len(MODELS)  # every model scored on its own
    counts = metrics["counts"]
    assert counts["rows_read"] == counts["accepted"] + counts["rejected"] == 8628
    assert counts["gold_train"] == 300
    for strategy, model in STRATEGIES.items():
        labeled = pq.read_table(run_dir / "silver" / ("kde_pool" if strategy == "kde" else strategy))
        assert counts["candidates"][strategy] == counts["labeled"][strategy] == labeled.num_rows > 0
        assert set(labeled.column("strategy").to_pylist()) == {strategy}
        assert labeled.column("score").null_count == 0
        diagnostics = metrics["sampling"][strategy]
        assert diagnostics["candidates"] == counts["candidates"][strategy]
        assert diagnostics["kept"] == counts["kept"][strategy] == counts["trained_on"][model] - 300
        kept = pq.read_table(run_dir / "silver" / strategy, columns=["score"],
                             filters=[("accepted", "=", True)] if strategy == "kde" else None).column("score").to_numpy()
        assert diagnostics["high_similarity_share"] == pytest.approx(np.mean(kept >= 0.6), abs=1 / len(kept))
        assert math.isfinite(diagnostics["kl_gold_silver"]) and diagnostics["kl_gold_silver"] > 0
    for strategy in STRATEGIES:  # one CPU actor on the run's own Ray: the driver labels, no actor pool starts
        assert re.search(rf"labeling \d+ {strategy} candidates with \S+ in this process", printed), strategy
    kde = pq.read_table(run_dir / "silver" / "kde")
    assert kde.num_rows == counts["labeled"]["kde"] == 3000  # selection marks rows, never drops them
    assert sum(kde.column("accepted").to_pylist()) == counts["kept"]["kde"] < 3000
    assert counts["kept"]["bm25"] == counts["labeled"]["bm25"]  # no selection for BM25
    assert counts["candidates"]["random"] == counts["candidates"]["bm25"]  # RS matches BM25's size by default
    trained = counts["trained_on"]
    assert trained["sbert"] == 300 and trained["cross_encoder"] == 600
    assert set(metrics["wall_seconds"]) >= {"read gold data", "train cross-encoder", "sample and label candidates", "total"}
    assert "AugSBERT-KDE" in (run_dir / "report.md").read_text() and "KL(gold, silver)" in (run_dir / "report.md").read_text()
    report = (run_dir / "report.md").read_text()
    for title in ("Cross-encoder", "SBERT (gold only)", "AugSBERT-BM25", "AugSBERT-RS", "Zero-shot", "Jaccard"):
        assert title in report
    assert f"run directory: {run_dir}" in printed
    progress = json.loads((run_dir / "progress.json").read_text())
    assert {name: record["trained_on"] for name, record in progress.items()} == trained

    # A later run whose ensemble teacher takes this run's cross-encoder (cross_encoder.trained) fits only the
    # teacher's bi-encoder, labels the same candidates, and records the whole teacher.
    teacher = (f"cross_encoder.trained={run_dir / 'models' / 'cross_encoder'}", "teacher.kind=ensemble",
               f"teacher.bi_encoder.model={tiny_model}", "teacher.bi_encoder.epochs=1")
    assert main(["run", JOB, "--data-dir", str(data_dir), *tiny_run_settings(tiny_model, tmp_path, "ensemble", ("bm25",), teacher)]) == 0
    (taught_dir,) = tmp_path.glob("ensemble-*")
    assert not (taught_dir / "ray_train" / "cross_encoder").exists()
    taught = json.loads((taught_dir / "metrics.json").read_text())
    assert taught["counts"]["trained_on"]["cross_encoder"] == 600  # from the teacher's run
    assert taught["counts"]["trained_on"]["teacher_bi_encoder"] == 300
    assert taught["test"]["cross_encoder"] == metrics["test"]["cross_encoder"]
    assert {"teacher_bi_encoder", "teacher", "sbert", "augsbert_bm25"} <= set(taught["test"])
    ensemble = Teacher.load(taught_dir / "models" / "teacher.json")
    assert [member.kind for member in ensemble.members] == ["cross_encoder", "bi_encoder"]
    assert taught["teacher"]["kind"] == "ensemble" and taught["teacher"]["labeler"] == ensemble.labeler
    assert taught["teacher"]["student_dev"] == pytest.approx(taught["dev"]["sbert"], abs=1e-3)
    assert taught["teacher"]["teacher_dev"] == pytest.approx(taught["dev"]["teacher"], abs=1e-3)
    assert "Teacher gate (before labeling): ensemble teacher dev" in (taught_dir / "report.md").read_text()

    def bm25_silver(directory: Path) -> dict:
        return pq.read_table(directory / "silver" / "bm25", columns=["sentence1", "sentence2", "labeler"]).to_pydict()

    silver = bm25_silver(taught_dir)
    assert set(silver["labeler"]) == {ensemble.labeler}
    pairs = [set(zip(table["sentence1"], table["sentence2"])) for table in (silver, bm25_silver(run_dir))]
    assert pairs[0] == pairs[1]


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL a command and every process under it: the driver, its embedded Ray's services, actors and workers."""
    tree = [psutil.Process(process.pid)]
    tree += tree[0].children(recursive=True)
    for member in tree:
        with contextlib.suppress(psutil.Error):
            member.kill()
    process.wait()
    psutil.wait_procs(tree, timeout=30)


def start_augsbert(args: list[str], log: Path, ray_tmpdir: str) -> subprocess.Popen:
    """`augsbert ARGS` in its own process with its own embedded Ray, as a user starts it."""
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": ray_tmpdir}
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "augsbert_ray.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def wait_until(condition, process: subprocess.Popen, log: Path, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"augsbert exited {process.returncode} first:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-3000:]}"
        time.sleep(0.02)


def registered_checkpoints(run_dir: Path, name: str) -> int:
    try:
        return len(json.loads((run_dir / "ray_train" / name / "checkpoint_manager_snapshot.json").read_text())["checkpoint_results"])
    except (OSError, ValueError, KeyError):
        return 0  # not yet written, or being written


def only_strategies(metrics: dict, keep: set[str]) -> dict:
    """``metrics`` with its per-strategy and per-model entries cut to the names in ``keep``."""
    per_name = set(STRATEGIES) | set(MODELS)
    return {key: only_strategies(value, keep) if isinstance(value, dict) else value
            for key, value in metrics.items() if key not in per_name or key in keep}


@pytest.mark.slow
def test_a_run_stopped_while_labeling_and_killed_while_fitting_resumes_to_the_uninterrupted_result(
    whole_run: tuple[Path, str], tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    """`augsbert run` (its gold read from files) is stopped by one Ctrl-C while it labels; its data folder is
    moved and spec.yaml's paths edited, and its fits moved onto a Ray Train worker; `augsbert run --resume` is
    SIGKILLed with its whole process tree (driver and embedded Ray) while it fits a bi-encoder; a further resume
    finishes it. Its metrics equal the uninterrupted
    run's, no shard is labeled twice, the finished fits are reused though the data moved, and the killed fit goes on
    from its last training state. It runs KDE alone (a run of some strategies draws the pools and makes the models
    that a run of all of them makes).

    Before: after a fit, Ray Train's SIGINT handler stayed installed, and Ctrl-C while labeling printed nothing and
    the run went on to the end; the data files' paths were part of the fingerprint ("what the run computes from
    changed"), and --force-resume fitted everything again."""
    reference = json.loads((whole_run[0] / "metrics.json").read_text())
    data = stsb_copy(tmp_path / "data", data_dir)
    # the uninterrupted run's teacher, as the cross-encoder fit is not what is killed; training states every
    # 5 steps of the KDE fit's 20, so that the kill lands before its last one as a rule (a resume setting: what the
    # run computes does not change)
    extra = ("data.dataset=null", *(f"data.{split}.{key}={value}" for split in ("train", "dev", "test")
                                    for key, value in (("path", data / f"sts-{split}.csv"), ("format", "stsb"))),
             f"cross_encoder.trained={whole_run[0] / 'models' / 'cross_encoder'}", "training.checkpoint_every=5")
    settings = tiny_run_settings(tiny_model, tmp_path, "killed", ("kde",), extra)
    stopped = interrupt(["run", JOB, *settings], r"labeling \S+: \d+ shards", delay=0,
                        ready=lambda: any(tmp_path.glob("killed-*/silver/kde_pool/part-*.parquet")))
    (run_dir,) = tmp_path.glob("killed-*")
    assert stopped.status == STOPPED, stopped.after
    assert stopped.seconds < 30
    (line,) = stopped.own_lines_after()
    assert re.fullmatch(r"augsbert run: interrupted: at stage 5/8 \(sample and label candidates: [1-5] of 6 shard\(s\) labeled in "
                        rf"{re.escape(str(run_dir))}/silver/kde_pool\); finished fits: cross_encoder, sbert; resume with: "
                        rf"augsbert run --resume {re.escape(str(run_dir))}", line), line
    labeled_before = {path: path.stat().st_mtime_ns for path in (run_dir / "silver").glob("*/part-*.parquet")}

    moved = tmp_path / "moved"
    shutil.move(data, moved)
    spec = yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8"))
    for split in ("train", "dev", "test"):
        spec["data"][split]["path"] = str(moved / f"sts-{split}.csv")
    spec["training"]["num_workers"] = 1  # a resource: a worker keeps the training states a resume goes on from
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    ray_tmpdir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # AF_UNIX socket paths must stay short
    second = start_augsbert(["run", "--resume", str(run_dir)], tmp_path / "second.log", ray_tmpdir)
    wait_until(lambda: registered_checkpoints(run_dir, "augsbert_kde") >= 1, second, tmp_path / "second.log")
    kill_tree(second)
    assert "augsbert_kde" not in json.loads((run_dir / "progress.json").read_text()), "the kill did not land while fitting"

    third = start_augsbert(["run", "--resume", str(run_dir)], tmp_path / "third.log", ray_tmpdir)
    assert third.wait(timeout=900) == 0, (tmp_path / "third.log").read_text()[-3000:]
    assert re.search(r"resuming from step (5|10|15|20)\b", (tmp_path / "third.log").read_text())

    resumed = json.loads((run_dir / "metrics.json").read_text())
    models = {"cross_encoder", "sbert", "augsbert_kde", "zero_shot", "jaccard"}
    assert set(resumed["test"]) == set(resumed["dev"]) == models
    assert resumed["counts"] == only_strategies(reference["counts"], {"kde", *models})
    for split in ("dev", "test"):
        assert resumed[split] == pytest.approx(only_strategies(reference[split], models), abs=1e-6), split
    assert set(resumed["reused_fits"]) == {"cross_encoder", "sbert"}  # the third attempt fitted AugSBERT-KDE
    assert {path: path.stat().st_mtime_ns for path in labeled_before} == labeled_before  # no shard labeled again
    snapshot = json.loads((run_dir / "ray_train" / "augsbert_kde" / "checkpoint_manager_snapshot.json").read_text())
    assert len(snapshot["checkpoint_results"]) == 1  # of the training states and the final model, only the model is kept
    assert main(["run", "--resume", str(run_dir)]) == 2  # finished now
    shutil.rmtree(ray_tmpdir, ignore_errors=True)


def test_a_resumed_run_may_change_resources_but_not_what_it_computes() -> None:
    first = JobSpec()
    more_resources = JobSpec.model_validate({"labeling": {"cpus_per_actor": 2, "max_actors": 4}, "evaluation": {"cpus": 2}})
    assert comparable_spec(more_resources) == comparable_spec(first)
    assert comparable_spec(JobSpec.model_validate({"training": {"num_workers": 0}})) == comparable_spec(first)  # the same fits
    for changed in ({"labeling": {"precision": "bf16"}}, {"labeling": {"shard_rows": 10}}, {"training": {"num_workers": 2}}):
        assert comparable_spec(JobSpec.model_validate(changed)) != comparable_spec(first), changed


@pytest.mark.parametrize("scenario", ["IN_DOMAIN", "DOMAIN_TRANSFER", "TUNING"])
def test_each_step_takes_only_what_earlier_steps_make(scenario: str) -> None:
    """The step runner passes earlier values by parameter name: a name no earlier step makes fails only when a
    whole run reaches that step (a transfer's teacher once asked for `gold`, which only in-domain makes)."""
    import inspect

    from augsbert_ray.pipeline import scenarios
    from augsbert_ray.pipeline.steps import WALL_SECONDS

    made: set[str] = {WALL_SECONDS}
    for step in getattr(scenarios, scenario):
        wanted = list(inspect.signature(step.run).parameters)[1:]
        assert set(wanted) <= made, f"{scenario}: {step.names} takes {sorted(set(wanted) - made)}, made by no earlier step"
        made |= set(step.names)
