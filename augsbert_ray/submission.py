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
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from augsbert_ray.config import SpecError, load_spec
from augsbert_ray.data.paths import DATA_DIR_ENV, DataNotFoundError, resolve_data_dir
from augsbert_ray.runtime import check_token_file, read_token

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# Never shipped to the cluster: environments, outputs, VCS data, caches.
EXCLUDES = [".venv", "venv", "runs", ".git", "__pycache__", ".pytest_cache", "*.egg-info", "build", "tmp"]
# Passed to the driver and, through init_ray, to every Ray worker of the job.
PASSED_ENV = ("AUGSBERT_MODEL_CACHE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "TRANSFORMERS_OFFLINE")


def dashboard_address(address: str | None) -> str:
    """--address, else $RAY_API_SERVER_ADDRESS, else an http $RAY_ADDRESS, else the local default."""
    if address is not None:
        if address and not address.startswith(("http://", "https://")):
            raise SpecError(f"--address must be the dashboard URL, e.g. {DEFAULT_ADDRESS}; got {address!r}")
        return checked_url("--address ", address)
    for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        value = os.environ.get(name, "")
        if value.startswith(("http://", "https://")):  # RAY_ADDRESS may also name a GCS (auto, host:6379)
            return checked_url(f"{name}=", value)
    return DEFAULT_ADDRESS


def checked_url(name: str, value: str) -> str:
    """``value`` without trailing slashes, where it is an http(s) URL with a host and a valid port; a SpecError
    starting with ``name`` (``--address `` or ``VAR=``) otherwise, where requests would fail less clearly."""
    try:
        parts = urlsplit(value)
    except ValueError as exc:  # an unclosed [ of an IPv6 host
        reason = str(exc)
    else:
        try:
            port = parts.port
        except ValueError:
            port = 0
        if not value:
            reason = f"empty; give the dashboard's URL, e.g. {DEFAULT_ADDRESS}"
        elif not parts.hostname:
            reason = "no host"
        elif port == 0:  # not a number, out of range, or 0
            reason = f"port {parts.netloc.rpartition(':')[2]!r} is not a number from 1 to 65535"
        else:
            return value.rstrip("/")
    raise SpecError(f"{name}{value or repr(value)}: not a valid URL ({reason})")


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


def request_reason(exc: BaseException) -> tuple[int | None, str]:
    """The status code and the line that says why, from Ray's ``Request failed with status code N: BODY.``; where
    BODY is the server's traceback, its last unindented line (the exception), else BODY's first line."""
    text = str(exc).strip()
    match = re.match(r"Request failed with status code (\d+): ", text)
    code = int(match[1]) if match else None
    body = text[match.end():].removesuffix(".") if match else text  # Ray appends the "."
    lines = [line for line in body.splitlines() if line.strip() not in ("", ".")]
    if "Traceback (most recent call last)" in body:
        lines = [line for line in lines if not line.startswith((" ", "Traceback", "During handling", "The above"))][-1:]
    return code, (lines[0].strip() if lines else "(no message)")


@contextmanager
def dashboard_errors(url: str, timeout_s: float) -> Iterator[None]:
    """A request to the dashboard that fails to connect, gets no answer or is refused for its token: one line."""
    import requests
    from ray.exceptions import AuthenticationError

    try:
        yield
    except requests.Timeout:  # before ConnectionError: a ConnectTimeout is both
        raise SpecError(
            f"cannot reach the Ray dashboard at {url}: no answer within {timeout_s:g} s ($AUGSBERT_CONNECT_TIMEOUT sets the wait)"
        ) from None
    except requests.ConnectionError as exc:
        errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
        raise SpecError(f"cannot reach the Ray dashboard at {url}: {errno[1] if errno else 'connection failed'}") from None
    except AuthenticationError as exc:
        # Ray's message (HTTP 401: no token sent; 403: a wrong one) names neither the address nor our variables
        problem = "wants a Ray auth token and none was sent" if str(exc).startswith("Authentication required") else (
            "refused the Ray auth token")
        raise SpecError(
            f"--address {url}: the dashboard {problem}; set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH to the cluster's token"
        ) from None
    except requests.RequestException as exc:
        raise SpecError(f"--address {url}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def check_version_answer(url: str, response: Any) -> None:
    """The answer to GET /api/version, as only a Ray dashboard gives it (JSON with ray_version), where Ray's own
    check raises RuntimeError, HTTPError or a JSON error that do not say the address is wrong."""
    reason = f"GET /api/version answered HTTP {response.status_code}"
    if response.status_code == 200:
        try:
            answer = response.json()
        except ValueError:
            answer = None
            reason = f"GET /api/version answered {response.headers.get('Content-Type') or 'something'}, not JSON"
        if isinstance(answer, dict) and isinstance(answer.get("ray_version"), str):
            return
        if answer is not None:
            reason = "GET /api/version answered JSON without ray_version"
    raise SpecError(f"--address {url}: not a Ray dashboard's Jobs API ({reason})")


def client(address: str | None, insecure: bool = False):
    """A Jobs API client for the dashboard at ``address``; see ``dashboard_address`` and ``check_transport``. Every
    request waits at most $AUGSBERT_CONNECT_TIMEOUT s for an answer, and its failures are one-line SpecErrors."""
    from ray.job_submission import JobSubmissionClient

    from augsbert_ray.runtime import connect_timeout

    url = dashboard_address(address)
    timeout_s = connect_timeout()
    check_token_file()
    headers = auth_headers()
    # With RAY_AUTH_MODE=token and no header of ours, Ray's client sends the token it finds itself.
    check_transport(url, bool(headers) or os.environ.get("RAY_AUTH_MODE", "").lower() == "token", insecure)

    class Client(JobSubmissionClient):
        # Ray's client sends every request without a timeout: a dashboard that accepts but never answers hangs it.
        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout_s)
            with dashboard_errors(url, timeout_s):
                response = super()._do_request(method, endpoint, **kwargs)
            if endpoint == "/api/version":
                check_version_answer(url, response)
            return response

    try:
        return Client(url, headers=headers)
    except RuntimeError as exc:  # a dashboard of Ray older than 2.0
        raise SpecError(f"--address {url}: {str(exc).splitlines()[0]}") from None


def runtime_env(working_dir: Path, data_dir: str | None = None, pip: list[str] | None = None) -> dict[str, Any]:
    """working_dir (the project, minus EXCLUDES), env_vars (the data dir, the model cache, offline flags), pip. An
    absolute ``data_dir`` is a path on the cluster's nodes, passed as given; else the data dir found here is passed."""
    env_vars = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env_vars.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        env_vars[DATA_DIR_ENV] = data_dir if data_dir and Path(data_dir).is_absolute() else str(resolve_data_dir(data_dir))
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
    spec = load_spec(job, overrides)  # a bad spec fails here, not minutes later on the cluster
    if not Path(spec.output_dir).is_absolute():  # it would land in the job's working_dir copy, which Ray deletes
        raise SpecError(f"output_dir {spec.output_dir} is relative: on the cluster it would lie in the job's temporary "
                        "working dir, out of reach of the other nodes; give a path on storage every node shares, "
                        "e.g. --set output_dir=/shared/runs")
    root = Path(working_dir or Path.cwd())
    if not root.is_dir():
        raise SpecError(f"--working-dir {root}: not a directory")
    if submission_id == "":
        raise SpecError("--submission-id is empty; leave it out for an id Ray generates")
    command = entrypoint(Path(job), root, overrides)
    jobs = client(address, insecure)
    try:
        submitted = jobs.submit_job(
            entrypoint=command, runtime_env=runtime_env(root, data_dir, pip), submission_id=submission_id,
            metadata={"augsbert_job": Path(job).name},
        )
    except RuntimeError as exc:  # the dashboard's answer was not 200: its traceback, in Ray's message
        url = dashboard_address(address)
        code, reason = request_reason(exc)
        if submission_id and f"submission_id {submission_id} already exists" in str(exc):
            raise SpecError(f"--submission-id {submission_id}: a job with this id already exists at {url}") from None
        raise SpecError(f"--address {url}: the dashboard refused the job{f' (HTTP {code})' if code else ''}: {reason}") from None
    return jobs, submitted


class JobStatus(NamedTuple):
    """A submitted job's state (PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED), Ray's message about it, and its
    driver's exit status (None while it runs)."""

    state: str
    message: str
    exit_code: int | None


def status(jobs, submission_id: str) -> JobStatus:
    """The job's state, Ray's message about it, and its driver's exit status (None while it runs)."""
    info = jobs.get_job_info(submission_id)
    return JobStatus(str(info.status.value if hasattr(info.status, "value") else info.status), info.message or "", info.driver_exit_code)


def follow_logs(jobs, submission_id: str, address: str | None) -> None:
    """Stream the job's logs until it ends. A stream that breaks (a dropped tunnel or port-forward) is one line: the
    job goes on, and ``augsbert logs ID --follow`` picks it up again."""

    async def tail() -> None:
        async for lines in jobs.tail_job_logs(submission_id):
            sys.stdout.write(lines)
            sys.stdout.flush()

    try:
        asyncio.run(tail())
    except (RuntimeError, OSError) as exc:  # Ray's "WebSocket connection closed unexpectedly"; aiohttp's errors are OSErrors
        url = dashboard_address(address)
        raise SpecError(f"lost the log stream of job {submission_id} from {url} ({str(exc).splitlines()[0] or type(exc).__name__}); "
                        f"the job goes on: `augsbert logs {submission_id} --follow --address {url}` picks it up") from None


def get(address: str | None, submission_id: str, insecure: bool = False):
    """A client, after checking that the job exists (one clear error otherwise)."""
    if not submission_id:  # GET /api/jobs/ would list every job
        raise SpecError("submission id is empty")
    jobs = client(address, insecure)
    try:
        jobs.get_job_info(submission_id)
    except RuntimeError as exc:
        url = dashboard_address(address)
        code, reason = request_reason(exc)
        if code == 404:
            raise SpecError(f"no job {submission_id!r} at {url}") from None
        raise SpecError(f"--address {url}: job {submission_id!r}: {f'HTTP {code}: ' if code else ''}{reason}") from None
    except TypeError:  # an id such as "." that requests resolves to the list of all jobs
        raise SpecError(f"no job {submission_id!r} at {dashboard_address(address)}") from None
    return jobs


@dataclass(frozen=True)
class SubmittedJob:
    """A job that ``submit_job`` submitted: its id, and the Jobs API client that follows it."""

    submission_id: str
    address: str | None
    client: Any

    def wait(self) -> JobStatus:
        """Stream the job's logs to stdout until it ends; its final status."""
        follow_logs(self.client, self.submission_id, self.address)
        return status(self.client, self.submission_id)


def submit_job(
    job: str | Path, address: str | None = None, overrides: list[str] | None = None, *, working_dir: str | Path | None = None,
    data_dir: str | Path | None = None, pip: list[str] | None = None, submission_id: str | None = None, insecure: bool = False,
) -> SubmittedJob:
    """Check a job spec here, then submit it to a Ray cluster as a Ray job that runs `augsbert run JOB` there, with
    ``working_dir`` shipped as its runtime env: what `augsbert submit` does.

    Args:
        job: The job spec YAML, inside ``working_dir``.
        address: The Ray dashboard's URL; default: $RAY_API_SERVER_ADDRESS, else an http(s) $RAY_ADDRESS, else
            http://127.0.0.1:8265.
        overrides: ``KEY=VALUE`` spec overrides; the spec's output_dir must be absolute, on storage every node shares.
        working_dir: The directory shipped to the cluster (less .venv, runs, .git and caches); default: the current one.
        data_dir: The named datasets' directory on the cluster's nodes (an absolute path, as given); default: the one
            found here.
        pip: pip requirements installed into the job's runtime env.
        submission_id: The id to submit under; default: one Ray generates.
        insecure: Send the auth token over plain http:// to a host other than this one.

    Returns:
        The SubmittedJob: its ``submission_id``; ``wait()`` streams its logs and returns its JobStatus.

    Example:
        A cluster's dashboard is needed, so this example is skipped here; tests/test_cluster.py submits a job so.

        >>> submitted = submit_job("jobs/stsb_indomain_bm25.yaml", "http://127.0.0.1:8265", ["output_dir=/shared/runs"])  # doctest: +SKIP
        >>> submitted.wait().state  # doctest: +SKIP
        'SUCCEEDED'
    """
    jobs, submitted = submit(
        str(job), address, list(overrides or []), working_dir=None if working_dir is None else str(working_dir),
        data_dir=None if data_dir is None else str(data_dir), pip=pip, submission_id=submission_id, insecure=insecure,
    )
    return SubmittedJob(submitted, address, jobs)


def job_status(address: str | None, submission_id: str, insecure: bool = False) -> JobStatus:
    """A submitted job's status, from the Ray dashboard at ``address``: what `augsbert status` prints.

    Args:
        address: The Ray dashboard's URL (default as for ``submit_job``).
        submission_id: The id ``submit_job`` returned.
        insecure: Send the auth token over plain http:// to a host other than this one.

    Returns:
        The JobStatus: ``state`` (PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED), ``message`` and ``exit_code``.

    Example:
        A cluster's dashboard is needed (tests/test_cluster.py):

        >>> job_status("http://127.0.0.1:8265", "raysubmit_abc").state  # doctest: +SKIP
        'RUNNING'
    """
    return status(get(address, submission_id, insecure), submission_id)


def job_logs(address: str | None, submission_id: str, insecure: bool = False, follow: bool = False) -> None:
    """Write a submitted job's driver logs to stdout, from the Ray dashboard at ``address``: what `augsbert logs`
    does.

    Args:
        address: The Ray dashboard's URL (default as for ``submit_job``).
        submission_id: The id ``submit_job`` returned.
        insecure: Send the auth token over plain http:// to a host other than this one.
        follow: Stream the logs until the job ends, instead of writing those so far.

    Returns:
        None.

    Example:
        A cluster's dashboard is needed (tests/test_cluster.py):

        >>> job_logs("http://127.0.0.1:8265", "raysubmit_abc", follow=True)  # doctest: +SKIP
    """
    jobs = get(address, submission_id, insecure)
    if follow:
        follow_logs(jobs, submission_id, address)
    else:
        sys.stdout.write(jobs.get_job_logs(submission_id))
