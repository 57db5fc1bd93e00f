"""Run a job spec on a Ray cluster through the Ray Jobs API (`augsbert submit/status/logs`).

The job's driver runs on the cluster (the head node by default) as `python -m augsbert_ray.cli run
JOB --address auto`, inside a runtime env whose working_dir is this project (code and job specs,
without .venv, runs and .git). Token authentication: the client sends the token from
RAY_AUTH_TOKEN, else from the file RAY_AUTH_TOKEN_PATH; with RAY_AUTH_MODE=token and neither set,
Ray reads its default file (~/.ray/auth_token). A token file must be private (augsbert_ray.auth), and a
token goes over plain http:// only to this host, unless --insecure.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from augsbert_ray.auth import check_token_file, read_token
from augsbert_ray.config import SpecError, load_spec
from augsbert_ray.data.paths import DATA_DIR_ENV, DataNotFoundError, resolve_data_dir

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# Never shipped to the cluster: environments, outputs, VCS data, caches.
EXCLUDES = [".venv", "venv", "runs", ".git", "__pycache__", ".pytest_cache", "*.egg-info", "build", "tmp"]
# Passed to the driver and, through init_ray, to every Ray worker of the job.
PASSED_ENV = ("HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "TRANSFORMERS_OFFLINE")


def dashboard_address(address: str | None) -> str:
    """--address, else $RAY_API_SERVER_ADDRESS, else an http $RAY_ADDRESS, else the local default."""
    for candidate in (address, os.environ.get("RAY_API_SERVER_ADDRESS"), os.environ.get("RAY_ADDRESS")):
        if candidate and candidate.startswith(("http://", "https://")):
            return candidate.rstrip("/")
        if candidate and candidate is address:
            raise SpecError(f"--address must be the dashboard URL, e.g. {DEFAULT_ADDRESS}; got {address!r}")
    return DEFAULT_ADDRESS


def auth_headers() -> dict[str, str]:
    """An explicit bearer token when RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH names one."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not token and path:
        try:
            token = read_token(Path(path).expanduser())
        except OSError as exc:
            raise SpecError(f"RAY_AUTH_TOKEN_PATH={path}: cannot read the token ({exc.strerror})") from None
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (an IPv4-mapped loopback too)."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or (isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def check_transport(url: str, sends_token: bool, insecure: bool) -> None:
    """Refuse to send a bearer token over plain http:// to another host (anyone on the path reads it),
    unless ``insecure``."""
    parts = urlsplit(url)
    if sends_token and not insecure and parts.scheme == "http" and not is_loopback(parts.hostname or ""):
        raise SpecError(
            f"--address {url}: refusing to send the Ray auth token over plain http to {parts.hostname}; use https, "
            "a tunnel to 127.0.0.1 (ssh -L, kubectl port-forward, ray dashboard), or --insecure"
        )


def client(address: str | None, insecure: bool = False):
    """A Jobs API client for the dashboard at ``address``; see ``dashboard_address`` and ``check_transport``."""
    from ray.job_submission import JobSubmissionClient

    url = dashboard_address(address)
    check_token_file()
    headers = auth_headers()
    # With RAY_AUTH_MODE=token and no header of ours, Ray's client sends the token it finds itself.
    check_transport(url, bool(headers) or os.environ.get("RAY_AUTH_MODE", "").lower() == "token", insecure)
    try:
        return JobSubmissionClient(url, headers=headers)
    except ConnectionError as exc:
        raise SpecError(f"cannot reach the Ray dashboard at {url}: {str(exc).splitlines()[0]}") from None


def runtime_env(working_dir: Path, data_dir: str | None = None, pip: list[str] | None = None) -> dict[str, Any]:
    """working_dir (the project, minus EXCLUDES), env_vars (data dir as an absolute path, offline flags), pip."""
    env_vars = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env_vars.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        env_vars[DATA_DIR_ENV] = str(resolve_data_dir(data_dir))
    except DataNotFoundError:
        if data_dir is not None or os.environ.get(DATA_DIR_ENV):
            raise
    env: dict[str, Any] = {"working_dir": str(working_dir), "excludes": list(EXCLUDES), "env_vars": env_vars}
    if pip:
        env["pip"] = list(pip)
    return env


def entrypoint(job: Path, working_dir: Path, overrides: list[str]) -> str:
    """The driver's command line, with the job spec as a path inside the shipped working_dir."""
    try:
        relative = job.resolve().relative_to(working_dir.resolve())
    except ValueError:
        raise SpecError(f"job spec {job} is not inside the working dir {working_dir}; it must be shipped with it") from None
    args = ["python", "-m", "augsbert_ray.cli", "run", relative.as_posix()]
    for override in overrides:
        args += ["--set", override]
    return shlex.join([*args, "--address", "auto"])


def submit(
    job: str, address: str | None, overrides: list[str], working_dir: str | None = None, data_dir: str | None = None,
    pip: list[str] | None = None, submission_id: str | None = None, insecure: bool = False,
) -> tuple[Any, str]:
    """Check the spec here, then submit it; returns (client, submission id)."""
    load_spec(job, overrides)  # a bad spec fails here, not minutes later on the cluster
    root = Path(working_dir or Path.cwd())
    if not root.is_dir():
        raise SpecError(f"--working-dir {root}: not a directory")
    command = entrypoint(Path(job), root, overrides)
    jobs = client(address, insecure)
    submitted = jobs.submit_job(
        entrypoint=command, runtime_env=runtime_env(root, data_dir, pip), submission_id=submission_id,
        metadata={"augsbert_job": Path(job).name},
    )
    return jobs, submitted


def status(jobs, submission_id: str) -> tuple[str, str]:
    info = jobs.get_job_info(submission_id)
    return str(info.status.value if hasattr(info.status, "value") else info.status), info.message or ""


def follow_logs(jobs, submission_id: str, out=sys.stdout) -> None:
    """Stream the job's logs until it ends."""

    async def tail() -> None:
        async for lines in jobs.tail_job_logs(submission_id):
            out.write(lines)
            out.flush()

    asyncio.run(tail())


def get(address: str | None, submission_id: str, insecure: bool = False):
    """A client, after checking that the job exists (one clear error otherwise)."""
    jobs = client(address, insecure)
    try:
        jobs.get_job_info(submission_id)
    except RuntimeError as exc:
        raise SpecError(f"no job {submission_id!r} at {dashboard_address(address)}: {str(exc).splitlines()[0]}") from None
    return jobs
