from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.cli import main


@pytest.mark.parametrize("command", [[], ["run"], ["label"], ["evaluate"], ["models"]])
def test_help(command: list[str], capsys) -> None:
    """`python -m augsbert_ray.cli --help` in a process of its own: the entry point, which builds every subcommand's
    parser; each subcommand's help in this process (a process costs 10 s of imports on a busy machine)."""
    if not command:
        out = subprocess.run([sys.executable, "-m", "augsbert_ray.cli", "--help"], capture_output=True, text=True, check=True).stdout
    else:
        with pytest.raises(SystemExit) as stop:
            main([*command, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
    assert "usage: augsbert" in out


def test_version_names_the_package_and_its_libraries(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"augsbert-ray {version('augsbert-ray')} (ray {version('ray')}, ") and f"torch {version('torch')}" in line


def test_run_reports_spec_errors(tmp_path: Path, capsys) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("sampling:\n  strategy: bm25\n")
    assert main(["run", str(job)]) == 2
    assert "sampling.strategy: unknown key" in capsys.readouterr().err


def test_run_needs_a_job_or_a_run_to_resume(tmp_path: Path, capsys) -> None:
    assert main(["run"]) == 2
    assert "give a job spec" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert f"--resume {tmp_path}: not a run directory (no spec.yaml)" in capsys.readouterr().err
    (tmp_path / "spec.yaml").write_text("seed: 1\n")
    assert main(["run", "--resume", str(tmp_path), "--set", "seed=2"]) == 2
    assert "--set only training.checkpoint_every, training.max_failures, labeling.min_actors" in capsys.readouterr().err
    assert main(["tune", "--resume", str(tmp_path), "--cross-encoder", str(tmp_path)]) == 2
    assert "--cross-encoder starts a new run" in capsys.readouterr().err


def test_label_command(label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"q": ["a cat", "a dog", "rain"], "d": ["a kitten", "a car", "sun"], "id": [1, 2, 3]}), pairs)
    out = tmp_path / "out"
    args = ["label", "--model", str(tiny_cross_encoder), "--input", str(pairs), "--output", str(out), "--text-columns", "q,d"]
    assert main(args) == 0
    silver = pq.read_table(out)
    assert sorted(silver.column("id").to_pylist()) == [1, 2, 3]
    assert set(silver.column_names) >= {"q", "d", "id", "score", "labeler", "strategy"}


def test_label_command_errors(tmp_path: Path, capsys) -> None:
    assert main(["label", "--model", "./missing-model", "--input", "x.parquet", "--output", str(tmp_path)]) == 2
    assert "model path not found" in capsys.readouterr().err


def test_evaluate_command(tiny_model: Path, tmp_path: Path, capsys) -> None:
    data = tmp_path / "pairs.jsonl"
    rows = [("a cat sits", "a cat sat", 1), ("a dog runs", "stocks fell", 0), ("the sun", "the sun rises", 1), ("rain", "tax law", 0)]
    data.write_text("\n".join(json.dumps({"sentence1": a, "sentence2": b, "label": y}) for a, b, y in rows))
    assert main(["evaluate", str(tiny_model), "--data", str(data), "--task", "classification"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kind"] == "bi_encoder" and "test_auc05" in result
    assert result["threshold_picked_on"] == f"{data} itself (no --dev)"
    # dev is the test file itself: F1 at the threshold best on it is the best F1 of any threshold
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model))
    first, second = (model.encode([row[column] for row in rows], normalize_embeddings=True) for column in (0, 1))
    cosine, truth = (first * second).sum(axis=1), [bool(row[2]) for row in rows]

    def f1_at(threshold: float) -> float:
        predicted = [score >= threshold for score in cosine]
        hits = sum(p and t for p, t in zip(predicted, truth))
        return 200 * hits / (sum(predicted) + sum(truth))

    assert result["test"] == pytest.approx(max(f1_at(threshold) for threshold in cosine), abs=1e-6)

    # without --task, 0/1 labels are scored as regression, as the help says; a line says so (before: silently)
    assert main(["evaluate", str(tiny_model), "--data", str(data)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["task"] == "regression"
    assert (f"augsbert evaluate: warning: the labels of {data} are all 0 or 1, scored as regression (Spearman); "
            "--task classification gives F1 and AUC(0.05)\n") in captured.err


def test_submit_passes_an_absolute_data_dir_as_a_path_on_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: --data-dir /shared/data was refused unless that path existed on the submitting laptop too."""
    from augsbert_ray.data import DataNotFoundError
    from augsbert_ray.submission import runtime_env

    monkeypatch.setenv("AUGSBERT_MODEL_CACHE", "/shared/models")
    env_vars = runtime_env(tmp_path, "/shared/data")["env_vars"]
    assert (env_vars["AUGSBERT_DATA_DIR"], env_vars["AUGSBERT_MODEL_CACHE"]) == ("/shared/data", "/shared/models")
    with pytest.raises(DataNotFoundError, match="no/such/data"):  # a relative path means a directory here
        runtime_env(tmp_path, "no/such/data")


def test_a_task_or_actor_that_reserved_no_gpu_sees_none(ray_session) -> None:
    """Ray 2.60 leaves CUDA_VISIBLE_DEVICES as it is where no GPU was reserved (ray-project/ray#54868): on a GPU
    node, a CPU fit, labeling actor, evaluation task or seed-search trial saw and used every GPU of the node."""
    ray = ray_session

    @ray.remote(num_cpus=0)
    def visible() -> str | None:
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    @ray.remote(num_cpus=0)
    class Actor:
        def visible(self) -> str | None:
            return os.environ.get("CUDA_VISIBLE_DEVICES")

    actor = Actor.remote()
    assert (ray.get(visible.remote()), ray.get(actor.visible.remote())) == ("", "")
    ray.kill(actor)


def test_an_autoscaling_clusters_largest_size_counts(ray_session, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU node group scaled to zero still offers its GPUs: the labeling pool waits for the autoscaler. The
    autoscaler's config is stood in for by the answer Ray's state API gives with one (this Ray has none)."""
    from ray._private.state import state

    from augsbert_ray.config import SpecError
    from augsbert_ray.runtime import check_requests, most_resources

    request = [("labeling.gpus_per_actor 1", 1.0, "GPU")]
    assert "GPU" not in most_resources()
    with pytest.raises(SpecError, match="labeling.gpus_per_actor 1, but the Ray cluster has 0 GPUs"):
        check_requests(request)
    monkeypatch.setattr(state, "get_max_resources_from_cluster_config", lambda: {"CPU": 8, "GPU": 4})
    assert most_resources()["GPU"] == 4 and most_resources()["CPU"] == 8
    check_requests(request)
