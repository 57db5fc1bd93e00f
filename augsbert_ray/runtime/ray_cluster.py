"""Internal: an embedded Ray started, or a cluster joined (init_ray), and its GCS reached."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import ray
from ray._private import ray_constants

from augsbert_ray.config import SpecError, ray_address
from augsbert_ray.runtime.auth import check_token_file
from augsbert_ray.runtime.console import log


# Passed to every Ray worker: tokenizers' own thread pool fights torch's inside actors.
# Ray Train workers send print() to Train's logger and, where a library wrapped sys.stdout, to stdout too: every
# progress line would reach the console twice.
# RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO: a task, actor or Ray Train worker that reserved no GPU sees none (Ray 2.60
# leaves CUDA_VISIBLE_DEVICES alone there, ray-project/ray#54868, so torch would train, label or score on the
# node's GPUs unreserved, a fit with use_gpu false would set up DDP for GPUs it does not use, and a seed-search
# trial would spread its batch over every GPU of its node).
WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAY_TRAIN_ENABLE_PRINT_PATCH": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}
# Unless -v: no per-model "Loading weights"/"Writing model shards" bars and no library deprecation notes from every
# worker (Ray's session logs keep whatever workers still print).
QUIET_WORKER_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
# An embedded Ray is one machine: no node is drained, so Ray Train's preemption watcher (an actor per fit) has
# nothing to watch; and its controller, which notices a finished fit at its next poll of the workers, polls every
# 0.5 s instead of 2 s (docs/BENCHMARKS.md, "A tiny run of every strategy").
LOCAL_TRAIN_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}
# Seconds to wait for a cluster's GCS to answer before giving up on its address.
CONNECT_TIMEOUT_ENV = "AUGSBERT_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_S = 60.0
PRINT_LOGS = "ray_print_logs"  # the handler by which Ray's driver prints what its workers print (ray._private.worker)
_muted: list[tuple[str, object]] = []  # handlers mute_ray_output took away
LATE_OUTPUT_S = 1.0  # how long a failed command waits for Ray's last lines from its workers, for the log


def check_dashboard_packages() -> None:
    """Ray's dashboard needs the packages of ray[default]; without them ray.init fails with a traceback and a
    generic message. Ray itself tells them apart by this import."""
    try:
        importlib.import_module("ray.dashboard.optional_deps")
    except ImportError as exc:
        raise SpecError(f"the embedded Ray's dashboard, whose State API Ray Train's fits need, lacks a package ({exc}): "
                        f"pip install 'ray[default]=={ray.__version__}'") from None


def cluster_address(given: str | None) -> str | None:
    """The Ray cluster a command joins: ``given`` (--address), else $RAY_ADDRESS, which ray.init would join anyway and
    which `ray job submit` sets in a job's driver, else None: an embedded local Ray. Resolved once, as the defaults
    that follow where a run runs (training.max_failures, labeling in the driver, the bf16 check) must see it.

    Args:
        given: The address a user gave, or None.

    Returns:
        The address to join, or None for an embedded local Ray.

    Example:
        >>> import os
        >>> cluster_address("auto"), cluster_address(None) == os.environ.get("RAY_ADDRESS")
        ('auto', True)
    """
    if given or not os.environ.get("RAY_ADDRESS"):
        return given
    try:
        return ray_address(os.environ["RAY_ADDRESS"])
    except ValueError as exc:
        raise SpecError(f"$RAY_ADDRESS: {exc}; or unset it to run on an embedded local Ray") from None


def init_ray(address: str | None = None, num_cpus: int | None = None, dashboard: bool = True) -> None:
    """Join a cluster when ``address`` is given, else start an embedded local Ray whose ports listen on
    127.0.0.1 only. Reuses a running one. The token file Ray reads must be private; a new local Ray gets one.

    Args:
        address: 'auto' or a Ray address to join; None starts an embedded local Ray.
        num_cpus: CPUs of the embedded local Ray (default: all).
        dashboard: whether an embedded local Ray starts its dashboard, whose State API Ray Train's fits need; a Ray
            that only labels does without its ten processes (about 300 MB).

    Example:
        ::

            init_ray(num_cpus=2)  # as `augsbert run` starts its embedded Ray
    """
    if ray.is_initialized():
        return
    if not address and os.environ.get("RAY_ADDRESS"):
        raise SpecError(f"$RAY_ADDRESS is {os.environ['RAY_ADDRESS']}, which ray.init would join instead of starting an "
                        "embedded local Ray: set ray.address to it (the CLI does), or unset it")
    check_token_file(create=not address)
    env_vars = {**WORKER_ENV, **({} if log.isEnabledFor(logging.DEBUG) else QUIET_WORKER_ENV)}
    if "HF_HUB_OFFLINE" in os.environ:
        env_vars["HF_HUB_OFFLINE"] = os.environ["HF_HUB_OFFLINE"]
    if address:
        # A Ray job's driver (`augsbert submit`, `ray job submit`) already carries the job's env_vars,
        # and Ray refuses a ray.init runtime env that names them again.
        job_env = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")).get("runtime_env", {}).get("env_vars") or {}
        # a Ray on this host's loopback (an embedded one): Ray would resolve the address to the host's, where it
        # does not listen, and a driver joining it must register as 127.0.0.1 too
        loopback = address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost")
        gcs = address if loopback else cluster_gcs_address(address)
        if gcs and "RAY_ADDRESS" not in job_env:
            env_vars["RAY_ADDRESS"] = gcs  # workers find the State API through this cluster's GCS
        env_vars = {name: value for name, value in env_vars.items() if name not in job_env}
        if gcs:
            check_gcs(address, gcs, connect_timeout())
        try:
            with _loopback_node() if loopback else contextlib.nullcontext():
                ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=True)
        except ConnectionError as exc:  # 'auto' with no cluster, or a Ray Client (ray://) address that did not answer
            raise SpecError(f"cannot join a Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
    elif not dashboard:
        with _loopback_node():
            ray.init(num_cpus=num_cpus, include_dashboard=False, runtime_env={"env_vars": env_vars})
    else:
        # Ray Train's PlacementGroupCleaner asks the State API, served by the dashboard, whether a fit's
        # controller is alive. Without a dashboard it logs a warning every second of every fit. Unpinned,
        # it auto-detects a cluster: with another Ray on the host it can ask the wrong one, judge the
        # controller dead and remove a running fit's placement group, or find several and fail each query.
        check_dashboard_packages()
        port = free_local_port()
        env_vars.update(LOCAL_TRAIN_ENV, RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{port}")
        with _loopback_node():
            ray.init(num_cpus=num_cpus, include_dashboard=True, dashboard_port=port, runtime_env={"env_vars": env_vars})
    joined = ray.get_runtime_context().gcs_address if address == "auto" else address
    log.info("ray: %s", resources_line(ray.cluster_resources(), joined))


def resources_line(resources: dict[str, float], address: str | None) -> str:
    """What a run has at hand, in words: the nodes, CPUs, GPUs and object store, and a cluster's other resources
    (custom ones, accelerator types), e.g. ``an embedded local Ray on 127.0.0.1: 2 CPUs, no GPU, 1.2 GB object store``."""
    gpus = int(resources.get("GPU", 0))
    line = (f"{resources.get('CPU', 0):g} CPUs, {f'{gpus} GPU' + ('s' if gpus > 1 else '') if gpus else 'no GPU'}, "
            f"{resources.get('object_store_memory', 0) / 1e9:.1f} GB object store")
    if not address:
        return f"an embedded local Ray on 127.0.0.1: {line}"
    nodes = sum(1 for name in resources if name.startswith("node:") and name != "node:__internal_head__")
    others = {name: value for name, value in resources.items()
              if name not in ("CPU", "GPU", "memory", "object_store_memory") and not name.startswith("node:")}
    return f"the Ray cluster at {address}: {nodes} node{'s' if nodes != 1 else ''}, {line}" + (f"; also {others}" if others else "")


@contextmanager
def ray_output_kept_off_console() -> Iterator[None]:
    """Inside chatter_to: when the block ends, Ray's late output goes to the current stdout and stderr (the log) and
    then nowhere. A failed worker's traceback still on its way, the lines Ray deduplicated and prints when it shuts
    down at exit, and a GCS error forwarded after the last actor was killed ("Failed to kill actor ...") came on the
    console after the command's last line. A later call in this process takes Ray's output again.
    (Shutting Ray down here instead ended the process with status 1 where a Ray Data thread still ran.)"""
    unmute_ray_output()
    try:
        yield
    except BaseException as exc:
        if ray.is_initialized():
            if not isinstance(exc, KeyboardInterrupt):
                time.sleep(LATE_OUTPUT_S)  # a worker's traceback reaches the driver a moment after its error
            mute_ray_output()
            wait_for_ray_data()
        raise
    if ray.is_initialized():
        mute_ray_output()


def wait_for_ray_data(timeout_s: float = 20.0) -> None:
    """Wait for Ray Data's executor threads to stop. A dataset whose reader stopped (Ctrl-C, an error) shuts its
    executor down in a thread of its own, which takes a few seconds; Ray's shutdown at exit meanwhile ended the
    process with status 1 ("The core worker has already been shutdown ... The process will exit")."""
    deadline = time.monotonic() + timeout_s
    for thread in threading.enumerate():
        if thread.name.startswith("StreamingExecutor-") and thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def mute_ray_output() -> None:
    """Print what Ray holds back for the console now, and nothing it forwards from workers from here on (Ray 2.60's
    ray._private.worker; no public API does this)."""
    from ray._private import ray_logging
    from ray._private import worker as ray_worker

    with contextlib.suppress(Exception):  # internals that may move: then Ray's output stays as it was
        ignore_prefix = ray_worker._should_ignore_worker_log_prefix(ray_worker.global_worker)
        for deduplicator, stream in ((ray_logging.stdout_deduplicator, sys.stdout), (ray_logging.stderr_deduplicator, sys.stderr)):
            for leftover in deduplicator.flush():
                ray_worker.print_worker_logs(leftover, stream, ignore_prefix)
        dispatcher = ray_worker.global_worker_stdstream_dispatcher
        _muted.extend(pair for pair in dispatcher.handlers if pair[0] == PRINT_LOGS)
        dispatcher.remove_handler(PRINT_LOGS)


def unmute_ray_output() -> None:
    """Undo ``mute_ray_output``, where the Ray it muted still runs."""
    from ray._private import worker as ray_worker

    with contextlib.suppress(Exception):
        dispatcher = ray_worker.global_worker_stdstream_dispatcher
        if ray.is_initialized() and not any(name == PRINT_LOGS for name, _ in dispatcher.handlers):
            for name, handler in _muted:
                dispatcher.add_handler(name, handler)
    _muted.clear()


def connect_timeout() -> float:
    """$AUGSBERT_CONNECT_TIMEOUT in seconds, default 60."""
    text = os.environ.get(CONNECT_TIMEOUT_ENV, str(DEFAULT_CONNECT_TIMEOUT_S))
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise SpecError(f"${CONNECT_TIMEOUT_ENV} must be a positive number of seconds, got {text!r}")
    return seconds


def check_gcs(address: str, gcs: str, timeout_s: float) -> None:
    """Ask the GCS at ``gcs`` for its cluster id, within ``timeout_s``: a SpecError naming ``address`` where no
    answer comes. Where no GCS answers, ray.init retries for many minutes (more than 7 on 127.0.0.1:1); this fails
    at once where the port is closed, and after ``timeout_s`` where nothing answers."""
    import grpc
    from ray._private.gcs_utils import create_gcs_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = create_gcs_channel(gcs)  # with Ray's TLS and auth token settings, as ray.init would connect
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        timed_out = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        reason = f"no answer within {timeout_s:g} s (${CONNECT_TIMEOUT_ENV} sets the wait)" if timed_out else exc.details()
        where = address if gcs == address else f"{address} (GCS {gcs})"
        raise SpecError(f"cannot reach a Ray cluster at {where}: {reason}") from None
    finally:
        channel.close()


@contextmanager
def _loopback_node() -> Iterator[None]:
    """A Ray started inside registers its node as 127.0.0.1, and then every Ray server binds there.

    Ray 2.60 replaces a loopback ``_node_ip_address`` with the host's address (services.resolve_ip_for_localhost),
    and its GCS, raylet and worker servers then listen on all interfaces. It keeps 127.0.0.1 only while clustering
    is off (what RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 sets, read once when ray is imported), so turn it off while
    the node starts. Once started, every process of the node takes the address from the node.
    """
    enabled = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = enabled


def cluster_gcs_address(address: str) -> str | None:
    """The GCS host:port that ``address`` ('auto', $RAY_ADDRESS or host:port) joins; None for a Ray Client
    (ray://) address, whose workers run on the cluster's hosts, or when nothing can be resolved here."""
    from ray._private.services import canonicalize_bootstrap_address

    if "://" in address:
        return None
    try:
        return canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError):
        return None  # a Ray Client $RAY_ADDRESS, or nothing to join: ray.init says which


def free_local_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
