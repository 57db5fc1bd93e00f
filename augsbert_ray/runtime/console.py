"""Internal: the augsbert logger, and what reaches the console or the run log (chatter_to)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


log = logging.getLogger("augsbert")

# Where `augsbert run` and `augsbert tune` put everything but their own lines, unless -v.
RUN_LOG = "run.log"
# The lines that stay on the console: the augsbert logger's (setup_logging's format), and the fits' progress lines
# that Ray forwards from training workers (training/ray_fit.py), without Ray's "(RayTrainWorker pid=...)" prefix.
CONSOLE_LINE = re.compile(r"\d\d:\d\d:\d\d [A-Z]+ augsbert(\.[\w.]+)?: |fit \S+: step \d+/\d+")
RAY_PREFIX = re.compile(r"^(\x1b\[[\d;]*m)?\(\w+ pid=\d+(, ip=[\d.]+)?\)(\x1b\[[\d;]*m)? ")
RAY_DEDUP_NOTE = re.compile(r"(\x1b\[[\d;]*m)? \[repeated \d+x across cluster\].*$")  # Ray's note after a deduplicated line


@contextmanager
def chatter_to(log_file: Path, shown_as: Path | None = None) -> Iterator[None]:
    """Inside, everything this process writes to stdout and stderr (Ray's and the libraries' logs and warnings, and
    what Ray forwards from its workers) is appended to ``log_file``; the console keeps the augsbert logger's lines
    and the fits' progress lines. Works on the file descriptors, so output of C++ code and of Ray's log forwarding
    is caught too.

    Args:
        log_file: The log to append to, e.g. ``run_dir / RUN_LOG``.
        shown_as: The log's name in the console line that says where the output goes, where the caller moves it
            there afterwards; default ``log_file``.

    Example:
        ::

            with chatter_to(run_dir / RUN_LOG):
                run(spec)
    """
    sys.stdout.flush()
    sys.stderr.flush()
    console, saved = os.dup(2), (os.dup(1), os.dup(2))
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    done = threading.Event()
    sorter = threading.Thread(target=_sort_lines, args=(read_end, log_file, console, done), name="chatter", daemon=True)
    sorter.start()
    log.info("Ray's and the libraries' output goes to %s (-v shows it here)", shown_as or log_file)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, target in zip(saved, (1, 2)):
            os.dup2(fd, target)
            os.close(fd)
        done.set()
        sorter.join(timeout=10)
        os.close(console)


def _sort_lines(read_end: int, log_file: Path, console: int, done: threading.Event) -> None:
    """Append all that comes through the pipe to the log; copy the console's lines to the console. Stops once
    ``done`` is set and nothing more is waiting (a process started inside may still hold the pipe open). A log that
    cannot be written (a full disk) is given up, and the pipe still drained: else every writer would block."""
    pending = b""
    log_out = _open_log(log_file)
    try:
        while True:
            if not select.select([read_end], [], [], 0.1)[0]:
                if done.is_set():
                    break
                continue
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            if log_out is not None:
                try:
                    log_out.write(chunk)
                except OSError:
                    log_out = None
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                # what a terminal would show: the part after the last carriage return (a cleared progress bar)
                text = RAY_PREFIX.sub("", line.decode("utf-8", "replace")).rsplit("\r", 1)[-1]
                if CONSOLE_LINE.match(text):
                    text = RAY_DEDUP_NOTE.sub("", text)
                    with contextlib.suppress(OSError):  # a console that went away (a closed pipe) only loses lines
                        os.write(console, (text + "\n").encode())
    finally:
        if log_out is not None:
            log_out.close()
        os.close(read_end)


def _open_log(log_file: Path) -> BinaryIO | None:
    """The log, unbuffered (each chunk is written as it comes, and a failed write leaves nothing to flush)."""
    try:
        return log_file.open("ab", buffering=0)
    except OSError:
        return None


def format_seconds(seconds: float) -> str:
    """A time left for a progress line: '1m05s', or '2h01m' from an hour on; 'unknown' for infinity."""
    if seconds == float("inf"):
        return "unknown"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


LOG_FORMAT, LOG_DATE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"


def setup_logging(verbose: bool = False) -> None:
    """The augsbert logger's lines (stages, counts, warnings, progress) on the console, as the CLI prints them.

    Args:
        verbose: DEBUG instead of INFO.

    Returns:
        None.

    Example:
        >>> setup_logging()  # as `augsbert` does before a command; a no-op where logging is set up already
        >>> log.name  # the logger whose lines the console keeps
        'augsbert'
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT)


def setup_worker_logging() -> None:
    """In a Ray worker: the augsbert logger writes in the driver's format (which the driver's console keeps, see
    chatter_to), and only through its own handler, not also through the one Ray gives the worker's root logger."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
