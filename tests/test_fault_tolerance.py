"""Real processes, real kills: a Ray Train worker dies mid-fit and the fit resumes from its last checkpoint."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from augsbert_ray.config import BiEncoderSpec, DataSpec, TrainingSpec
from augsbert_ray.data import load_gold
from augsbert_ray.training import fit_bi_encoder


def registered_checkpoints(storage: Path) -> int:
    """Checkpoints the Ray Train controller has registered (a restarted worker gets the latest of these)."""
    for snapshot in storage.glob("*/checkpoint_manager_snapshot.json"):
        try:
            return len(json.loads(snapshot.read_text())["checkpoint_results"])
        except (OSError, ValueError, KeyError):
            return 0  # being written
    return 0


def kill_train_worker_after_checkpoints(storage: Path, killed: list[int], timeout: float = 300) -> None:
    """SIGKILL the worker once the controller has registered a training-state checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if registered_checkpoints(storage) >= 1:
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


def test_killed_train_worker_resumes_from_checkpoint(ray_session, tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    gold = load_gold(DataSpec(train_limit=400), seed=0, data_dir=data_dir)
    pq.write_table(gold.train, tmp_path / "train.parquet")
    spec = BiEncoderSpec(model=str(tiny_model), epochs=8, batch_size=8)  # 50 steps per epoch, 400 in all
    resources = TrainingSpec(num_workers=1, cpus_per_worker=1, max_failures=1, checkpoint_every=25)
    storage, killed = tmp_path / "ray_train", []
    killer = threading.Thread(target=kill_train_worker_after_checkpoints, args=(storage, killed))
    killer.start()
    metrics = fit_bi_encoder(
        spec, str(tiny_model), [(str(tmp_path / "train.parquet"), "label")], resources, 0, storage, "ft", tmp_path / "model"
    )
    killer.join()
    assert killed, "no Ray Train worker was killed"
    assert metrics["steps"] == 400  # finished
    assert 25 <= metrics["resumed_from_step"] < 400  # continued from a checkpoint, did not start over
    assert (tmp_path / "model" / "model.safetensors").is_file()
