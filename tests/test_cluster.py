"""A real multi-node Ray cluster on this host (cluster/local/start.sh): job submission, a worker node's
raylet SIGKILLed mid-labeling, the driver SIGKILLed mid-labeling. Real processes, real kills, exact counts.

The cluster (head + two worker nodes, token auth on) is started once for the module; stop.sh always
runs at the end, and ends only the processes start.sh started. The cluster manifests in cluster/ are
checked against the field names of KubeRay's ray.io/v1 types and of the Ray cluster launcher.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "cluster"
BIN = Path(sys.executable).parent
SHARDS, SHARD_ROWS = 24, 600  # labeling input for the kill tests: 24 shards of 600 pairs


# --- cluster/ manifests: parse, and use the field names that ray.io/v1 and the launcher know ------------

# Field names of KubeRay's ray.io/v1 Go types (raycluster_types.go, rayjob_types.go; KubeRay 1.5+ for authOptions).
RAYCLUSTER_SPEC = {"headGroupSpec", "workerGroupSpecs", "rayVersion", "enableInTreeAutoscaling", "autoscalerOptions",
                   "headServiceAnnotations", "suspend", "managedBy", "gcsFaultToleranceOptions", "authOptions"}
HEAD_GROUP = {"template", "headService", "enableIngress", "rayStartParams", "serviceType"}
WORKER_GROUP = {"groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds", "rayStartParams",
                "template", "scaleStrategy", "numOfHosts", "suspend"}
RAYJOB_SPEC = {"activeDeadlineSeconds", "backoffLimit", "rayClusterSpec", "submitterPodTemplate", "metadata",
               "clusterSelector", "submitterConfig", "managedBy", "deletionPolicy", "entrypoint", "runtimeEnvYAML",
               "jobId", "submissionMode", "entrypointResources", "entrypointNumCpus", "entrypointNumGpus",
               "ttlSecondsAfterFinished", "shutdownAfterJobFinishes", "suspend"}
# Top-level keys of the Ray cluster launcher config (ray/autoscaler/ray-schema.json).
LAUNCHER = {"cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes", "docker", "provider", "auth",
            "available_node_types", "head_node_type", "file_mounts", "cluster_synced_files", "file_mounts_sync_continuously",
            "rsync_exclude", "rsync_filter", "initialization_commands", "setup_commands", "head_setup_commands",
            "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands", "no_restart"}
NODE_TYPE = {"node_config", "resources", "min_workers", "max_workers", "worker_setup_commands", "docker", "labels"}


def containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def env_names(container: dict) -> dict[str, dict]:
    return {item["name"]: item for item in container.get("env", [])}


TOKEN_SECRET = {"name": "augsbert-ray-token", "key": "auth_token"}  # the Secret cluster/README.md has you create


def check_token_env(container: dict) -> None:
    env = env_names(container)
    assert env["RAY_AUTH_MODE"]["value"] == "token", container["name"]
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == TOKEN_SECRET, container["name"]


def check_cluster_spec(spec: dict) -> None:
    assert set(spec) <= RAYCLUSTER_SPEC, set(spec) - RAYCLUSTER_SPEC
    head = spec["headGroupSpec"]
    assert set(head) <= HEAD_GROUP and head["rayStartParams"]["num-cpus"] == "0"
    check_token_env(containers(head)[0])
    groups = {group["groupName"]: group for group in spec["workerGroupSpecs"]}
    for group in groups.values():
        assert set(group) <= WORKER_GROUP, set(group) - WORKER_GROUP
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        check_token_env(containers(group)[0])
    gpu = [g for g in groups.values() if "nvidia.com/gpu" in containers(g)[0]["resources"]["limits"]]
    cpu = [g for g in groups.values() if "nvidia.com/gpu" not in containers(g)[0]["resources"]["limits"]]
    assert gpu and cpu, "needs a CPU and a GPU worker group"
    assert all(containers(g)[0]["resources"]["limits"]["nvidia.com/gpu"] >= 1 for g in gpu)


def test_kuberay_manifests_ship_no_token_and_read_the_users_secret() -> None:
    """A token shipped in a manifest would be the same on every cluster made from it: the user creates the Secret."""
    for manifest in sorted((CLUSTER / "kuberay").glob("*.yaml")):
        documents = list(yaml.safe_load_all(manifest.read_text()))
        assert [doc["kind"] for doc in documents if doc["kind"] not in ("RayCluster", "RayJob")] == [], manifest.name
        assert "REPLACE" not in manifest.read_text(), manifest.name
        assert f"kubectl create secret generic {TOKEN_SECRET['name']} --from-literal={TOKEN_SECRET['key']}=" in manifest.read_text()
    readme = (CLUSTER / "README.md").read_text()
    assert f"kubectl create secret generic {TOKEN_SECRET['name']} --from-literal={TOKEN_SECRET['key']}=" in readme


def test_kuberay_manifests_use_ray_io_v1_fields() -> None:
    documents = list(yaml.safe_load_all((CLUSTER / "kuberay" / "raycluster.yaml").read_text()))
    kinds = {doc["kind"]: doc for doc in documents}
    assert kinds["RayCluster"]["apiVersion"] == "ray.io/v1"
    assert kinds["RayCluster"]["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    check_cluster_spec(kinds["RayCluster"]["spec"])

    job = [doc for doc in yaml.safe_load_all((CLUSTER / "kuberay" / "rayjob.yaml").read_text()) if doc["kind"] == "RayJob"][0]
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert set(spec) <= RAYJOB_SPEC, set(spec) - RAYJOB_SPEC
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["entrypoint"].startswith("augsbert run jobs/")
    assert (REPO / shlex.split(spec["entrypoint"])[2]).is_file()  # the job spec it names exists
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["pip"] and runtime_env["env_vars"]["HF_HUB_OFFLINE"]
    check_cluster_spec(spec["rayClusterSpec"])
    check_token_env(spec["submitterPodTemplate"]["spec"]["containers"][0])


def test_launcher_config_uses_launcher_fields() -> None:
    config = yaml.safe_load((CLUSTER / "launcher" / "aws.yaml").read_text())
    assert set(config) <= LAUNCHER, set(config) - LAUNCHER
    assert config["provider"]["type"] == "aws"
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    assert types[config["head_node_type"]]["resources"]["CPU"] == 0
    for node_type in types.values():
        assert set(node_type) <= NODE_TYPE, set(node_type) - NODE_TYPE
    assert any(t["resources"].get("GPU", 0) >= 1 and t["max_workers"] >= t["min_workers"] for t in types.values())
    assert any("RAY_AUTH_MODE=token" in command for command in config["head_start_ray_commands"])


# --- the local multi-node cluster --------------------------------------------------------------------------


class Cluster:
    def __init__(self, state: Path) -> None:
        self.state = state
        values = dict(line.removeprefix("export ").split("=", 1) for line in (state / "cluster.env").read_text().splitlines())
        self.gcs, self.dashboard = values["AUGSBERT_RAY_ADDRESS"], values["AUGSBERT_DASHBOARD"]
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": values["RAY_AUTH_TOKEN_PATH"],
                    "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": f"{BIN}:{os.environ['PATH']}"}
        self.env.pop("RAY_ADDRESS", None)
        self.sessions = dict(line.split() for line in (state / "pids").read_text().splitlines())

    def node_processes(self, node: str) -> list[psutil.Process]:
        sid = int(self.sessions[node])
        found = []
        for process in psutil.process_iter():
            try:
                if os.getsid(process.pid) == sid:
                    found.append(process)
            except (ProcessLookupError, PermissionError, psutil.Error):
                pass
        return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "RAY": str(BIN / "ray"), "WORKER_CPUS": "2",
           # a dead raylet is declared dead after ~5 s instead of ~30 s
           "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "5"}
    try:
        subprocess.run([str(CLUSTER / "local" / "start.sh"), str(state)], env=env, check=True, timeout=420)
        yield Cluster(state)
    finally:
        subprocess.run([str(CLUSTER / "local" / "stop.sh"), str(state)], env=env, timeout=120)
        assert not (state / "pids").exists(), "stop.sh left the cluster running"


def tiny_overrides(tiny_model: Path, teacher: Path, output: Path, name: str) -> list[str]:
    """The smallest whole run: 150 gold pairs, BM25 only, one epoch everywhere, the tiny BERT, the given teacher
    (its bi-encoder fits are the run's Ray Train fits on the cluster)."""
    return [f"cross_encoder.trained={teacher}", f"bi_encoder.model={tiny_model}", f"evaluation.zero_shot_model={tiny_model}",
            "data.train_limit=150", "sampling.strategies=[bm25]", "sampling.top_k=2",
            "training.cpus_per_worker=1", f"output_dir={output}", f"name={name}"]


def job_status(cluster: Cluster, submission_id: str) -> str:
    result = subprocess.run([str(BIN / "augsbert"), "status", submission_id, "--address", cluster.dashboard],
                            env=cluster.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split(":")[1].split()[0]


@pytest.mark.cluster
def test_tiny_jobs_succeed_with_augsbert_submit_and_ray_job_submit(
    cluster: Cluster, tiny_model: Path, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path
) -> None:
    sets = [arg for item in tiny_overrides(tiny_model, tiny_cross_encoder, tmp_path, "via-augsbert") for arg in ("--set", item)]
    ours = subprocess.Popen(
        [str(BIN / "augsbert"), "submit", "jobs/stsb_indomain_bm25.yaml", "--address", cluster.dashboard,
         "--data-dir", str(data_dir), *sets], cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Through Ray's own CLI, as a KubeRay RayJob would submit it: a labeling job (one whole pipeline is enough), with
    # no --address: the driver joins the RAY_ADDRESS Ray gives it.
    lines = (data_dir / "stsb" / "sts-dev.csv").read_text(encoding="utf-8").splitlines()[:300]
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"sentence1": [line.split("\t")[5] for line in lines],
                             "sentence2": [line.split("\t")[6] for line in lines], "pair_id": np.arange(len(lines))}), pairs)
    entrypoint = ["python", "-m", "augsbert_ray.cli", "label", "--model", str(tiny_cross_encoder), "--input", str(pairs),
                  "--output", str(tmp_path / "via-ray")]
    runtime_env = {"env_vars": {"HF_HUB_OFFLINE": "1"}, "excludes": [".venv", "runs", ".git"]}
    submitted = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", cluster.dashboard, "--no-wait", "--working-dir", str(REPO),
         "--runtime-env-json", json.dumps(runtime_env), "--", *entrypoint],
        cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    ray_id = next(word.strip("'") for word in submitted.stdout.split() + submitted.stderr.split() if word.strip("'").startswith("raysubmit_"))

    output, _ = ours.communicate(timeout=900)
    assert ours.returncode == 0, output[-3000:]
    our_id = next(line.split()[-1] for line in output.splitlines() if line.startswith("submission id: "))
    assert f"{our_id}: SUCCEEDED" in output and job_status(cluster, our_id) == "SUCCEEDED"
    deadline = time.monotonic() + 600
    while (state := job_status(cluster, ray_id)) not in ("SUCCEEDED", "FAILED", "STOPPED") and time.monotonic() < deadline:
        time.sleep(3)
    assert state == "SUCCEEDED", subprocess.run([str(BIN / "augsbert"), "logs", ray_id, "--address", cluster.dashboard],
                                                env=cluster.env, capture_output=True, text=True).stdout[-3000:]
    (run_dir,) = tmp_path.glob("via-augsbert-*")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["counts"]["gold_train"] == 150
    assert metrics["counts"]["labeled"]["bm25"] == metrics["counts"]["candidates"]["bm25"] > 0
    assert (run_dir / "models" / "augsbert_bm25" / "model.safetensors").is_file()
    assert re.search(r"labeling \d+ bm25 candidates with \S+\n", (run_dir / "run.log").read_text())  # on the actor pool
    labeled = pq.read_table([str(p) for p in sorted((tmp_path / "via-ray").glob("part-*.parquet"))])
    assert sorted(labeled.column("pair_id").to_pylist()) == list(range(300)) and labeled.column("score").null_count == 0
    ray_logs = subprocess.run([str(BIN / "augsbert"), "logs", ray_id, "--address", cluster.dashboard],
                              env=cluster.env, capture_output=True, text=True, timeout=120).stdout
    assert "augsbert: ray: the Ray cluster at " in ray_logs, ray_logs[-3000:]  # it joined the cluster (in the driver, without Ray, before)
    logs = subprocess.run([str(BIN / "augsbert"), "logs", our_id, "--address", cluster.dashboard],
                          env=cluster.env, capture_output=True, text=True, timeout=120)
    assert "run directory:" in logs.stdout


STATE_API_PROBE = """
import sys, ray
from augsbert_ray.runtime import init_ray

def state_api_address() -> str:  # where Ray Train's placement-group cleaner asks whether a fit's controller lives
    from ray.dashboard.utils import get_address_for_submission_client
    return get_address_for_submission_client(None)

init_ray(sys.argv[1])
print("state api:", ray.get(ray.remote(num_cpus=0)(state_api_address).remote()))
"""


@pytest.mark.cluster
def test_workers_ask_their_own_clusters_state_api_beside_another_ray(cluster: Cluster, ray_session, tmp_path: Path) -> None:
    """This session's Ray (dashboard on) shares the host. Unpinned, a worker's auto-detection finds two Rays and
    every State API query of Ray Train's placement-group cleaner fails; joined through init_ray, it asks its own."""
    probe = tmp_path / "probe.py"
    probe.write_text(STATE_API_PROBE)
    joined = subprocess.run([sys.executable, str(probe), cluster.gcs], cwd=REPO, env=cluster.env,
                            capture_output=True, text=True, timeout=300)
    assert f"state api: {cluster.dashboard}\n" in joined.stdout, joined.stderr[-3000:]
    # A submitted job's driver joins with --address auto and finds the cluster through the job's RAY_ADDRESS.
    runtime_env = {"env_vars": {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}}
    submitted = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", cluster.dashboard, "--runtime-env-json", json.dumps(runtime_env),
         "--", "python", str(probe), "auto"], cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=300)
    assert f"state api: {cluster.dashboard}\n" in submitted.stdout, (submitted.stdout + submitted.stderr)[-3000:]


# --- kills mid-labeling --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs_file(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SHARDS x SHARD_ROWS STSb sentence pairs with a unique pair_id; one Parquet row group per shard."""
    lines = (data_dir / "stsb" / "sts-train.csv").read_text(encoding="utf-8").splitlines()
    sentences = sorted({part for line in lines for part in line.split("\t")[5:7] if part.strip()})
    count = SHARDS * SHARD_ROWS
    rng = np.random.default_rng(0)
    first, second = rng.integers(0, len(sentences), count), rng.integers(0, len(sentences), count)
    table = pa.table({"sentence1": [sentences[i] for i in first], "sentence2": [sentences[j] for j in second],
                      "pair_id": np.arange(count)})
    path = tmp_path_factory.mktemp("pairs") / "pairs.parquet"
    pq.write_table(table, path, row_group_size=SHARD_ROWS)
    return path


def label_command(cluster: Cluster, model: Path, pairs: Path, output: Path) -> list[str]:
    return [str(BIN / "augsbert"), "label", "--model", str(model), "--input", str(pairs), "--output", str(output),
            "--shard-rows", str(SHARD_ROWS), "--actors", "2:2", "--batch-size", "32", "--address", cluster.gcs]


def shards(output: Path) -> dict[str, int]:
    """Finished shard files and their mtimes (ns)."""
    found = {}
    for path in output.glob("part-*.parquet"):
        try:
            found[path.name] = path.stat().st_mtime_ns
        except FileNotFoundError:
            pass
    return found


def wait_for_shards(output: Path, process: subprocess.Popen, at_least: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(shards(output)) < at_least:
        assert process.poll() is None, f"labeling ended (rc {process.returncode}) before {at_least} shards were written"
        assert time.monotonic() < deadline, f"fewer than {at_least} shards after {timeout} s"
        time.sleep(0.05)


def check_exactly_once(output: Path, pairs: Path) -> None:
    """Every input pair exactly once, with a score; the manifest agrees."""
    expected = pq.read_table(pairs)
    labeled = pq.read_table([str(p) for p in sorted(output.glob("part-*.parquet"))])
    ids = labeled.column("pair_id").to_numpy()
    assert labeled.num_rows == expected.num_rows == SHARDS * SHARD_ROWS
    assert len(np.unique(ids)) == len(ids), "a pair was written twice"
    assert np.array_equal(np.sort(ids), expected.column("pair_id").to_numpy())
    assert labeled.column("score").null_count == 0
    manifest = json.loads((output / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["totals"]["labeled"] == SHARDS * SHARD_ROWS
    assert len(shards(output)) == SHARDS and not list(output.glob(".part-*"))


def labeling_actors(cluster: Cluster, node: str) -> list[psutil.Process]:
    return [p for p in cluster.node_processes(node) if "ShardLabeler" in " ".join(_cmdline(p))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


@pytest.mark.cluster
def test_a_labeling_job_whose_driver_and_then_a_worker_node_are_killed_labels_every_pair_once(
    cluster: Cluster, tiny_cross_encoder: Path, pairs_file: Path, tmp_path: Path
) -> None:
    """One labeling job, two real kills: its driver SIGKILLed mid-labeling; then, while the rerun resumes the job,
    the raylet of a worker node that runs one of its actors. The rerun relabels no finished shard, finishes on the
    node left (exit 0), and every pair is written exactly once. Last in the module: the cluster is a node short after."""
    output = tmp_path / "silver"
    command = label_command(cluster, tiny_cross_encoder, pairs_file, output)
    driver = subprocess.Popen(command, cwd=REPO, env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_shards(output, driver, at_least=3)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
    # The job's actors die with their driver; an in-flight shard may still land. Snapshot once nothing moves.
    deadline = time.monotonic() + 120
    while any(labeling_actors(cluster, node) for node in ("worker-a", "worker-b")) and time.monotonic() < deadline:
        time.sleep(0.5)
    before = shards(output)
    assert 3 <= len(before) < SHARDS, f"kill came too late to test a resume: {len(before)} of {SHARDS} shards done"

    rerun = subprocess.Popen(command, cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(rerun.stdout), daemon=True)
    reader.start()
    wait_for_shards(output, rerun, at_least=len(before) + 1)
    # The node to kill: one whose labeling actor is running now (the driver is on the head).
    node = next((n for n in ("worker-a", "worker-b") if labeling_actors(cluster, n)), None)
    assert node is not None, "no labeling actor on a worker node"
    raylet = next(p for p in cluster.node_processes(node) if "/raylet/raylet" in " ".join(_cmdline(p)[:1]))
    done_at_kill = len(shards(output))
    os.kill(raylet.pid, signal.SIGKILL)
    assert done_at_kill < SHARDS, "the kill came after the last shard"

    rerun.wait(timeout=600)
    reader.join(timeout=10)
    assert rerun.returncode == 0, "".join(log)[-3000:]
    assert f"shards: {SHARDS}, {len(before)} already done" in "".join(log)
    assert not psutil.pid_exists(raylet.pid) or psutil.Process(raylet.pid).status() == psutil.STATUS_ZOMBIE
    after = shards(output)
    assert {name: after[name] for name in before} == before, "a finished shard was rewritten"
    check_exactly_once(output, pairs_file)
