"""How `augsbert` reports a failure: one line, ``augsbert COMMAND: error: MESSAGE`` on stderr, and the exit status:
2 for bad input, 1 for a failure that came through Ray (or a labeler in the command's process), with the traceback
under -v. Any other exception is a bug, and keeps its traceback."""

from __future__ import annotations

import errno
import re
import shutil
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import augsbert_ray as ar

USER_ERRORS = (ar.SpecError, FileNotFoundError, PermissionError, ValueError, ar.ModelPartsError)
# Raised on purpose inside Ray tasks and workers for bad input: within a Ray failure, only these (and a model's
# UnusableScores) are user errors.
RAISED_USER_ERRORS = (ar.SpecError, FileNotFoundError, ar.ModelPartsError)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
ROOM = 1 << 30  # free bytes on the output's disk above which a full disk must be another one
# a full disk in a remote traceback's text: "OSError: [Errno 28] No space left on device: '/out/part-0.parquet'"
DISK_FULL_TEXT = re.compile(rf"\[Errno (?:{errno.ENOSPC}|{errno.EDQUOT})\] [^\n']*?(?:: '([^'\n]+)')?$", re.MULTILINE)


def causes(exc: BaseException) -> list[BaseException]:
    """The exception and what caused it, outermost first: Python's chain, a Ray task's cause, a Ray Train
    controller's failure or its first failed worker's."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and not any(current is seen for seen in chain):
        chain.append(current)
        workers = getattr(current, "worker_failures", None) or {}
        context = None if current.__suppress_context__ else current.__context__
        following = [getattr(current, "cause", None), getattr(current, "controller_failure", None),
                     *(workers[rank] for rank in sorted(workers)), current.__cause__, context]
        # a link without a message is a marker, not a cause (Ray Data raises errors `from SystemException()`)
        current = next((link for link in following if isinstance(link, BaseException) and str(link)), None)
    return chain


def ray_failure(exc: BaseException) -> tuple[str, int] | None:
    """For an error that came through Ray (a task, actor, Ray Data, Train or Tune): the root cause's line
    (``Type: message`` unless it is bad input raised on purpose) and the exit status, 2 for bad input, else 1.
    None for any other error."""
    from ray.exceptions import RayActorError, RayError, RayTaskError
    from ray.train import TrainingFailedError
    from ray.tune import TuneError

    chain = causes(exc)
    if not any(isinstance(link, (RayError, TrainingFailedError, TuneError)) for link in chain):
        return None
    root = chain[-1]
    # Ray Data appends its retry advice to the message: the first line is the cause's own
    message = (str(root).strip().splitlines() or ["(no message)"])[0]
    if isinstance(root, (*RAISED_USER_ERRORS, ar.UnusableScores)):
        return message, 2
    if isinstance(root, RayError):
        # the cause stayed in the worker (Ray Data's UserCodeException, an actor that failed to start): the text of
        # the task or actor error is the remote traceback, whose first part ends with the cause's line
        remote = next((link for link in reversed(chain) if isinstance(link, (RayTaskError, RayActorError))), root)
        lines = str(remote).split("The above exception was the direct cause of the following exception:")[0].strip().splitlines()
        return (lines[-1] if lines else message), 1
    return f"{type(root).__name__}: {message}", 1


class DiskFull(OSError):
    """A write failed for a full disk (or a spent quota): one line naming the path, status 1."""


def disk_full_path(exc: BaseException) -> str | None:
    """The path of a write that failed for a full disk (ENOSPC, EDQUOT), '' where no path is known; None for any
    other error. Found among the exception's causes, or in the text of a Ray worker's traceback."""
    chain = causes(exc)
    for link in chain:
        if isinstance(link, OSError) and link.errno in DISK_FULL:
            return str(link.filename or "")
    for link in chain:
        if found := DISK_FULL_TEXT.search(str(link)):
            return found[1] or ""
    return None


@contextmanager
def writing_to(where: Path, setting: str) -> Iterator[None]:
    """Inside, a failure for a full disk becomes one line naming the path (else ``where``, the output that
    ``setting`` names) and the space left on its disk."""
    try:
        yield
    except Exception as exc:
        path = None if isinstance(exc, DiskFull) else disk_full_path(exc)
        if path is None:
            raise
        named = path or str(where)
        existing = next((part for part in (Path(named), *Path(named).parents) if part.exists()), None)
        free = shutil.disk_usage(existing).free if existing is not None else 0
        if not path and free > ROOM:  # the output's disk has room: the write that failed went elsewhere
            raise DiskFull(errno.ENOSPC, f"no space left on device, though {named} has {free / 1e9:,.1f} GB free: another disk is "
                           "full (Ray's temp dir, $RAY_TMPDIR or /tmp; the model cache)") from exc
        raise DiskFull(errno.ENOSPC, f"no space left on device writing {named} ({free / 1e6:,.1f} MB free there); free some "
                       f"space, or write elsewhere ({setting})") from exc


def failure(exc: Exception, verbose: bool) -> tuple[str, int] | None:
    """The one-line message and the exit status for an exception a command raised; None for a bug, which keeps its
    traceback. A failure that came through Ray prints its traceback here under ``verbose``."""
    if isinstance(exc, DiskFull):
        if verbose:
            traceback.print_exception(exc)
        return exc.strerror, 1
    here = isinstance(exc, ar.LabelerFailure)  # `augsbert label` without Ray: its labeler failed in this process
    found = (str(exc), 1) if here else ray_failure(exc)
    if found is None and not isinstance(exc, USER_ERRORS):
        return None
    if found is not None and verbose:
        traceback.print_exception(exc)
    message, status = found or (str(exc), 2)
    if status == 1 and not verbose:
        message += " (rerun with -v for the traceback)" if here else " (rerun with -v for Ray's traceback)"
    return message, status
