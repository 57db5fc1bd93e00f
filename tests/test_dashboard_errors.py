"""`augsbert submit/status/logs` against addresses that are not a working Ray dashboard: tiny HTTP servers on
127.0.0.1 answer as Ray 2.60's dashboard would (or as something else would), and each bad case is one line, exit 2.
No Ray cluster is started."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from augsbert_ray.cli import main

REPO = Path(__file__).resolve().parents[1]
JOB = "jobs/stsb_indomain_bm25.yaml"
VERSION = (200, "application/json", json.dumps({"version": "4", "ray_version": "2.60.0", "ray_commit": "b7f4259"}))
# Ray 2.60's job agent, for a submission id that is taken: a 400 with its traceback (the head may wrap it in its own)
ALREADY_EXISTS = (
    "Traceback (most recent call last):\n"
    '  File "/ray/dashboard/modules/job/job_agent.py", line 45, in submit_job\n'
    "    submission_id = await self.get_job_manager().submit_job(\n"
    "ValueError: Job with submission_id abc already exists. Please use a different submission_id.\n"
)
# Routes: (method, path) -> (status, content type, body); a path ending in "*" matches its prefix.
Routes = dict[tuple[str, str], tuple[int, str, str]]


class CurrentStderr:
    """Whatever sys.stderr is when written to (capsys replaces it for each test and phase)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No token settings and no address from the environment; a short wait for an answer. Ray's log handler writes
    to the stderr of the moment: it keeps the sys.stderr of when Ray was imported, another test's, closed since."""
    from ray._private.log import PlainRayHandler

    for handler in logging.getLogger("ray").handlers:
        if isinstance(handler, PlainRayHandler):  # not pytest's capturing handlers, also there
            monkeypatch.setattr(handler, "stream", CurrentStderr())
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AUGSBERT_CONNECT_TIMEOUT", "1")


@pytest.fixture
def serve() -> Iterator:
    """serve(routes) -> the URL of an HTTP server on 127.0.0.1 that answers ``routes`` (404 for others)."""
    servers: list[ThreadingHTTPServer] = []

    def start(routes: Routes) -> str:
        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                path = self.path.split("?")[0]
                status, kind, body = next(
                    (reply for (method, route), reply in routes.items()
                     if method == self.command and (path == route or route.endswith("*") and path.startswith(route[:-1]))),
                    (404, "text/plain", "404: Not Found"),
                )
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = answer

            def log_message(self, *args: object) -> None:  # quiet
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_dashboard_that_accepts_but_never_answers_fails_after_the_timeout(capsys) -> None:
    """Before: `augsbert status` hung forever (Ray's client sends requests without a timeout)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never accepts or reads
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        assert main(["status", "abc", "--address", url]) == 2
        seconds = time.monotonic() - start
    assert capsys.readouterr().err == (
        f"augsbert status: error: cannot reach the Ray dashboard at {url}: no answer within 1 s "
        "($AUGSBERT_CONNECT_TIMEOUT sets the wait)\n"
    )
    assert 1 <= seconds < 60  # waited for the timeout, and did not hang (the bound leaves room for importing Ray)


def test_nothing_listening_names_the_reason(capsys) -> None:
    """Before: `cannot reach the Ray dashboard at URL: Failed to connect to Ray at address: URL.`"""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        url = f"http://127.0.0.1:{taken.getsockname()[1]}"
    assert main(["logs", "abc", "--address", url]) == 2
    assert capsys.readouterr().err == f"augsbert logs: error: cannot reach the Ray dashboard at {url}: Connection refused\n"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ((404, "text/plain", "404: Not Found"), "GET /api/version answered HTTP 404"),
        ((500, "text/plain", "Internal Server Error"), "GET /api/version answered HTTP 500"),
        ((200, "text/html", "<html><body>a web server</body></html>"), "GET /api/version answered text/html, not JSON"),
        ((200, "application/json", '{"version": "1.0"}'), "GET /api/version answered JSON without ray_version"),
    ],
    ids=["404", "500", "html", "other-json"],
)
def test_an_address_that_is_not_a_ray_dashboard(serve, capsys, reply: tuple[int, str, str], reason: str) -> None:
    """Before: 404 gave a traceback `RuntimeError: Version check returned 404...`, 500 a traceback
    `requests.exceptions.HTTPError`, HTML `error: Expecting value: line 1 column 1 (char 0)` without the address."""
    url = serve({("GET", "/api/version"): reply})
    assert main(["status", "abc", "--address", url]) == 2
    assert capsys.readouterr().err == f"augsbert status: error: --address {url}: not a Ray dashboard's Jobs API ({reason})\n"


@pytest.mark.parametrize(
    ("token", "status", "body", "problem"),
    [
        (None, 401, "Unauthorized: Missing authentication token", "wants a Ray auth token and none was sent"),
        ("wrong", 403, "Forbidden: Invalid authentication token", "refused the Ray auth token"),
    ],
    ids=["401-no-token", "403-wrong-token"],
)
def test_a_dashboard_that_refuses_the_token(
    serve, capsys, monkeypatch: pytest.MonkeyPatch, token: str | None, status: int, body: str, problem: str
) -> None:
    """Before: exit 1 with Ray's `Authentication required: ...` (or `failed`), naming neither the address nor the
    variables that set the token."""
    if token:
        monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    url = serve({("GET", "/api/version"): (status, "text/plain", body)})
    assert main(["logs", "abc", "--address", url]) == 2
    assert capsys.readouterr().err == (
        f"augsbert logs: error: --address {url}: the dashboard {problem}; set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
        "to the cluster's token\n"
    )


@pytest.mark.parametrize("command", ["status", "logs"])
def test_an_empty_submission_id(capsys, command: str) -> None:
    """Before: a traceback `TypeError: ... JobDetails() argument after ** must be a mapping, not list` (GET /api/jobs/
    lists every job)."""
    assert main([command, "", "--address", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == f"augsbert {command}: error: submission id is empty\n"


def test_a_job_that_does_not_exist(serve, capsys) -> None:
    """Before: `no job 'abc' at URL: Request failed with status code 404: Job abc does not exist.`"""
    url = serve({("GET", "/api/version"): VERSION, ("GET", "/api/jobs/abc"): (404, "text/plain", "Job abc does not exist")})
    assert main(["status", "abc", "--address", url]) == 2
    assert capsys.readouterr().err == f"augsbert status: error: no job 'abc' at {url}\n"


def test_status_of_a_job_still_works(serve, capsys) -> None:
    """Before: the same; the timeout and the checks of every request leave a good answer alone."""
    job = {"type": "SUBMISSION", "submission_id": "abc", "status": "RUNNING", "entrypoint": "python -m x", "message": "busy"}
    url = serve({("GET", "/api/version"): VERSION, ("GET", "/api/jobs/abc"): (200, "application/json", json.dumps(job))})
    assert main(["status", "abc", "--address", url]) == 0
    assert capsys.readouterr().out == "abc: RUNNING (busy)\n"


def error_line(capsys) -> str:
    """The last line of stderr, after Ray's INFO lines about the working dir's package (no traceback)."""
    lines = capsys.readouterr().err.splitlines()
    assert all("\tINFO dashboard_sdk.py" in line and "_ray_pkg_" in line for line in lines[:-1]), "\n".join(lines)
    return lines[-1]


SHARED_OUTPUT = ["--set", "output_dir=/shared/runs"]  # the job specs' output_dir, runs, is refused for a cluster


@pytest.fixture
def working_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with just the job spec (hashing the whole project for its package takes a while)."""
    (tmp_path / "jobs").mkdir()
    shutil.copy(REPO / JOB, tmp_path / JOB)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, "Job with submission_id abc already exists. Please use a different submission_id."),
        (400, ALREADY_EXISTS),
        (500, f"Traceback (most recent call last):\nRuntimeError: Request failed with status code 400: {ALREADY_EXISTS}.\n"),
    ],
    ids=["plain", "agent-traceback", "head-traceback"],
)
def test_submit_with_an_id_that_is_taken(serve, capsys, working_dir: Path, status: int, body: str) -> None:
    """Before: a traceback `RuntimeError: Request failed with status code 400: ...`."""
    url = serve({("GET", "/api/version"): VERSION, ("GET", "/api/packages/*"): (200, "text/plain", ""),
                 ("POST", "/api/jobs/"): (status, "text/plain", body)})
    assert main(["submit", JOB, *SHARED_OUTPUT, "--address", url, "--submission-id", "abc", "--no-wait"]) == 2
    assert error_line(capsys) == f"augsbert submit: error: --submission-id abc: a job with this id already exists at {url}"


def test_submit_that_the_dashboard_refuses(serve, capsys, working_dir: Path) -> None:
    """Before: a traceback `RuntimeError: Request failed with status code 400: Traceback ...`."""
    body = 'Traceback (most recent call last):\n  File "job_head.py", line 1, in submit_job\nTypeError: bad entrypoint_resources\n'
    url = serve({("GET", "/api/version"): VERSION, ("GET", "/api/packages/*"): (200, "text/plain", ""),
                 ("POST", "/api/jobs/"): (400, "text/plain", body)})
    assert main(["submit", JOB, *SHARED_OUTPUT, "--address", url, "--no-wait"]) == 2
    assert error_line(capsys) == (
        f"augsbert submit: error: --address {url}: the dashboard refused the job (HTTP 400): TypeError: bad entrypoint_resources"
    )


def test_submit_with_a_relative_output_dir(capsys, working_dir: Path) -> None:
    """Before: submitted; the run went into the job's temporary working dir copy, which other nodes never see."""
    assert main(["submit", JOB, "--address", "http://127.0.0.1:1", "--no-wait"]) == 2
    assert capsys.readouterr().err == (
        "augsbert submit: error: output_dir runs is relative: on the cluster it would lie in the job's temporary working "
        "dir, out of reach of the other nodes; give a path on storage every node shares, e.g. --set output_dir=/shared/runs\n")


class StubJobs:
    """A Jobs API client whose log stream breaks after a line, or ends; its job ended as ``state`` with ``exit_code``."""

    def __init__(self, breaks: bool, state: str = "FAILED", exit_code: int | None = None) -> None:
        self.breaks, self.state, self.exit_code = breaks, state, exit_code

    async def tail_job_logs(self, submission_id: str):
        yield "a line of the job\n"
        if self.breaks:  # what Ray's client raises when a tunnel or port-forward drops
            raise RuntimeError("WebSocket connection closed unexpectedly with close code 1006")

    def get_job_info(self, submission_id: str):
        from types import SimpleNamespace

        return SimpleNamespace(status=self.state, message="Job entrypoint command failed", driver_exit_code=self.exit_code)


def test_a_broken_log_stream_is_one_line(capsys, working_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a traceback ending in `RuntimeError: WebSocket connection closed unexpectedly`, exit 1."""
    from augsbert_ray import submission

    monkeypatch.setattr(submission, "submit", lambda *args, **kwargs: (StubJobs(breaks=True), "raysubmit_1"))
    assert main(["submit", JOB, *SHARED_OUTPUT, "--address", "http://127.0.0.1:8265"]) == 2
    out, err = capsys.readouterr()
    assert "a line of the job" in out
    assert err == ("augsbert submit: error: lost the log stream of job raysubmit_1 from http://127.0.0.1:8265 (WebSocket "
                   "connection closed unexpectedly with close code 1006); the job goes on: `augsbert logs raysubmit_1 "
                   "--follow --address http://127.0.0.1:8265` picks it up\n")


@pytest.mark.parametrize(("state", "exit_code", "expected"), [("SUCCEEDED", 0, 0), ("FAILED", 2, 2), ("FAILED", 1, 1), ("STOPPED", None, 1)])
def test_submit_exits_as_its_job_did(capsys, working_dir: Path, monkeypatch: pytest.MonkeyPatch, state: str,
                                     exit_code: int | None, expected: int) -> None:
    """Before: 1 for every job that did not succeed, bad input (the driver's exit 2) included."""
    from augsbert_ray import submission

    monkeypatch.setattr(submission, "submit", lambda *args, **kwargs: (StubJobs(False, state, exit_code), "raysubmit_1"))
    assert main(["submit", JOB, *SHARED_OUTPUT, "--address", "http://127.0.0.1:8265"]) == expected
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"raysubmit_1: {state}")


def test_submit_with_an_empty_submission_id(capsys, working_dir: Path) -> None:
    """Before: the empty id was dropped, and Ray made up one."""
    assert main(["submit", JOB, *SHARED_OUTPUT, "--address", "http://127.0.0.1:1", "--submission-id", ""]) == 2
    assert capsys.readouterr().err == "augsbert submit: error: --submission-id is empty; leave it out for an id Ray generates\n"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("http://127.0.0.1:notaport", "port 'notaport' is not a number from 1 to 65535"),
        ("http://127.0.0.1:99999", "port '99999' is not a number from 1 to 65535"),
        ("http://127.0.0.1:0", "port '0' is not a number from 1 to 65535"),
        ("http://", "no host"),
        ("http://:8265", "no host"),
        ("http://[::1", "Invalid IPv6 URL"),
    ],
)
def test_an_address_that_is_not_a_valid_url(capsys, address: str, reason: str) -> None:
    """Before: messages that did not name --address: `Failed to parse: '127.0.0.1:notaport' is not a valid host or
    port`, `Failed to parse: http://127.0.0.1:99999/api/version`, `Invalid gcs_address: http:`, `Invalid IPv6 URL`;
    port 0 tried to connect."""
    assert main(["status", "abc", "--address", address]) == 2
    assert capsys.readouterr().err == f"augsbert status: error: --address {address}: not a valid URL ({reason})\n"


def test_an_empty_address(capsys) -> None:
    """Before: `--address ''` was silently replaced by http://127.0.0.1:8265 (`cannot reach the Ray dashboard at
    http://127.0.0.1:8265: ...` where nothing listens there)."""
    assert main(["status", "abc", "--address", ""]) == 2
    assert capsys.readouterr().err == (
        "augsbert status: error: --address '': not a valid URL (empty; give the dashboard's URL, e.g. http://127.0.0.1:8265)\n"
    )


def test_an_invalid_address_from_the_environment(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `Failed to parse: '127.0.0.1:port' is not a valid host or port`, not naming the variable."""
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://127.0.0.1:port")
    assert main(["status", "abc"]) == 2
    assert capsys.readouterr().err == (
        "augsbert status: error: RAY_API_SERVER_ADDRESS=http://127.0.0.1:port: not a valid URL (port 'port' is not a number "
        "from 1 to 65535)\n"
    )
