"""Real processes, real kills: a Ray Train worker, or the driver, dies mid-fit and the fit resumes from its last
checkpoint to the weights of a fit that nothing interrupted."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from augsbert_ray.config import BiEncoderSpec, DataSpec, TrainingSpec
from augsbert_ray.data import load_gold
from augsbert_ray.layout import RunLayout
from augsbert_ray.pipeline.context import remove_unfinished_fit
from augsbert_ray.training import fit_bi_encoder
from augsbert_ray.training.ray_fit import sigint_kept


def registered_checkpoints(storage: Path) -> int:
    """Checkpoints the Ray Train controller has registered (a restarted worker gets the latest of these)."""
    for snapshot in storage.glob("*/checkpoint_manager_snapshot.json"):
        try:
            return len(json.loads(snapshot.read_text())["checkpoint_results"])
        except (OSError, ValueError, KeyError):
            return 0  # being written
    return 0


def wait_for_a_checkpoint(storage: Path, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if registered_checkpoints(storage) >= 1:
            return True
        time.sleep(0.05)
    return False


def kill_train_worker_after_checkpoints(storage: Path, killed: list[int], timeout: float = 300) -> None:
    """SIGKILL the worker once the controller has registered a training-state checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if wait_for_a_checkpoint(storage, deadline - time.monotonic()):
            for process in psutil.Process().children(recursive=True):
                try:
                    if "RayTrainWorker" in " ".join(process.cmdline()):
                        os.kill(process.pid, signal.SIGKILL)
                        killed.append(process.pid)
                except psutil.Error:
                    pass
            if killed:
                return
        time.sleep(0.05)


# The fit every test here makes: 400 gold pairs, 4 epochs of 50 steps, a training state every 25 steps.
TRAIN_PAIRS = 400
FIT_SPEC = {"epochs": 4, "batch_size": 8}
FIT_STEPS = TRAIN_PAIRS // FIT_SPEC["batch_size"] * FIT_SPEC["epochs"]


def write_train_pairs(data_dir: Path, path: Path) -> Path:
    pq.write_table(load_gold(DataSpec(train_limit=TRAIN_PAIRS), seed=0, data_dir=data_dir).train, path)
    return path


def weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def assert_same_weights(model_dir: Path, reference_dir: Path) -> None:
    import torch

    fitted, reference = weights(model_dir), weights(reference_dir)
    assert fitted.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.allclose(fitted[name], tensor, rtol=0, atol=1e-6), name


@pytest.fixture(scope="module")
def uninterrupted_fit(ray_session, tiny_model: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model the kill tests' fit makes when nothing is killed."""
    work = tmp_path_factory.mktemp("uninterrupted_fit")
    train = write_train_pairs(data_dir, work / "train.parquet")
    metrics = fit_bi_encoder(BiEncoderSpec(model=str(tiny_model), **FIT_SPEC), str(tiny_model), [(str(train), "label")],
                             TrainingSpec(num_workers=1, cpus_per_worker=1, checkpoint_every=25), 0, work / "ray_train", "ft",
                             work / "model")
    assert metrics["steps"] == FIT_STEPS and metrics["resumed_from_step"] == 0
    return work / "model"


@pytest.mark.slow
def test_killed_train_worker_resumes_from_checkpoint(uninterrupted_fit: Path, tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    """A worker SIGKILLed mid-fit is restarted by Ray Train (max_failures), goes on from the last training state,
    and ends with the uninterrupted fit's weights."""
    train = write_train_pairs(data_dir, tmp_path / "train.parquet")
    resources = TrainingSpec(num_workers=1, cpus_per_worker=1, max_failures=1, checkpoint_every=25)
    storage, killed = tmp_path / "ray_train", []
    killer = threading.Thread(target=kill_train_worker_after_checkpoints, args=(storage, killed))
    killer.start()
    metrics = fit_bi_encoder(
        BiEncoderSpec(model=str(tiny_model), **FIT_SPEC), str(tiny_model), [(str(train), "label")], resources, 0, storage, "ft",
        tmp_path / "model",
    )
    killer.join()
    assert killed, "no Ray Train worker was killed"
    assert metrics["steps"] == FIT_STEPS  # finished
    assert 25 <= metrics["resumed_from_step"] < FIT_STEPS  # continued from a checkpoint, did not start over
    assert_same_weights(tmp_path / "model", uninterrupted_fit)


# A driver that fits like the pipeline does, in its own process, on the test session's Ray.
DRIVER = """
import json
import sys
from pathlib import Path
from augsbert_ray.config import BiEncoderSpec, TrainingSpec
from augsbert_ray.runtime import init_ray
from augsbert_ray.training import fit_bi_encoder
model, train, storage, out = sys.argv[2:6]
init_ray(sys.argv[1])  # the session's Ray listens on 127.0.0.1: a driver joining it must register there too
fit_bi_encoder(BiEncoderSpec(model=model, **json.loads(sys.argv[6])), model, [(train, "label")],
               TrainingSpec(num_workers=1, cpus_per_worker=1, checkpoint_every=25), 0, Path(storage), "ft", Path(out))
"""


@pytest.mark.slow
def test_killed_driver_resumes_from_checkpoint_in_a_new_driver(
    ray_session, uninterrupted_fit: Path, tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    """What `augsbert run --resume` relies on: a fit under the same storage and name goes on from the killed
    driver's last training state to the uninterrupted fit's weights; once that fit has finished (its driver stopped
    before recording it), a further one reports its final model again (before: it trained again from the start)."""
    train = write_train_pairs(data_dir, tmp_path / "train.parquet")
    storage, model_dir = tmp_path / "ray_train", tmp_path / "model"
    address = ray_session.get_runtime_context().gcs_address
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, address, str(tiny_model), str(train), str(storage), str(model_dir),
                               json.dumps(FIT_SPEC)])
    try:
        assert wait_for_a_checkpoint(storage), "the first driver registered no checkpoint"
    finally:
        driver.kill()
        driver.wait()
    assert not model_dir.exists()  # it did not finish

    def fit_again() -> dict:
        return fit_bi_encoder(
            BiEncoderSpec(model=str(tiny_model), **FIT_SPEC), str(tiny_model), [(str(train), "label")],
            TrainingSpec(num_workers=1, cpus_per_worker=1, checkpoint_every=25), 0, storage, "ft", model_dir,
        )

    metrics = fit_again()
    assert metrics["steps"] == FIT_STEPS and 25 <= metrics["resumed_from_step"] < FIT_STEPS
    assert_same_weights(model_dir, uninterrupted_fit)
    assert registered_checkpoints(storage) == 1  # CheckpointConfig(num_to_keep=1): the final model
    on_disk = len(list((storage / "ft").glob("checkpoint_*")))  # and any the killed driver wrote but never registered
    first = metrics
    metrics = fit_again()  # the latest checkpoint is the final model
    assert metrics == {**first, "reused": True}
    assert_same_weights(model_dir, uninterrupted_fit)
    assert sorted(path.name for path in model_dir.iterdir()) == sorted(path.name for path in uninterrupted_fit.iterdir())
    assert len(list((storage / "ft").glob("checkpoint_*"))) <= on_disk + 1  # the final model, reported again


@pytest.mark.slow
def test_a_fit_survives_another_ray_with_a_dashboard_on_the_host(ray_session, tiny_model: Path, tmp_path: Path) -> None:
    """Ray Train's placement-group cleaner asks the State API whether the fit's controller lives. Unpinned, it
    could ask a second Ray's dashboard, find no such controller and remove the running fit's placement group.
    The second Ray is a fit in an embedded Ray of its own, started during this session's fit; it serves
    tests/test_progress.py too: its console shows each progress line once, and none of Ray's lines."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from test_progress import check_a_fit_on_ray_prints_each_progress_line_once, fit_in_a_new_ray

    started, stop, other = tmp_path / "started", tmp_path / "stop", {}
    (tmp_path / "other").mkdir()

    def run_until_stopped(config: dict) -> None:  # nested, so Ray pickles it by value
        Path(config["started"]).touch()
        deadline = time.monotonic() + 900
        while not Path(config["stop"]).exists() and time.monotonic() < deadline:
            time.sleep(0.2)

    def start_another_ray_during_the_fit() -> None:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            other["run"] = fit_in_a_new_ray(tiny_model, tmp_path / "other")
        finally:
            stop.touch()

    thread = threading.Thread(target=start_another_ray_during_the_fit)
    thread.start()
    trainer = TorchTrainer(
        run_until_stopped, train_loop_config={"started": str(started), "stop": str(stop)},
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=str(tmp_path / "ray_train"), name="long_fit"),
    )
    # as fit_on_ray does: Ray Train's own SIGINT handler would keep the fit's controller alive in this session
    with sigint_kept(trainer):
        result = trainer.fit()
    thread.join()
    check_a_fit_on_ray_prints_each_progress_line_once(other["run"], tmp_path / "other")  # it came and went during the fit
    assert result.error is None


def test_an_unfinished_fit_keeps_its_training_state_only_when_checkpointed(tmp_path: Path) -> None:
    for keep in (True, False):
        run_dir = tmp_path / str(keep)
        for leftover in ("ray_train/augsbert_kde/checkpoint_1", "models/augsbert_kde", "ray_tune/sbert-s42", "ray_train/sbert"):
            (run_dir / leftover).mkdir(parents=True)
        remove_unfinished_fit(RunLayout(run_dir), "augsbert_kde", keep_training_state=keep)
        assert (run_dir / "ray_train/augsbert_kde/checkpoint_1").is_dir() == keep
        assert not (run_dir / "models/augsbert_kde").exists()
        assert (run_dir / "ray_tune/sbert-s42").is_dir() and (run_dir / "ray_train/sbert").is_dir()  # other fits'
