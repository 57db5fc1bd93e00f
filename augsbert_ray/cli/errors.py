"""How `augsbert` reports a failure: one line, ``augsbert COMMAND: error: MESSAGE`` on stderr, and the exit status:
2 for bad input, 1 for a failure that came through Ray (or a labeler in the command's process), with the traceback
under -v. Any other exception is a bug, and keeps its traceback."""

from __future__ import annotations

import traceback

import augsbert_ray as ar

USER_ERRORS = (ar.SpecError, FileNotFoundError, PermissionError, ValueError, ar.ModelPartsError)
# Raised on purpose inside Ray tasks and workers for bad input: within a Ray failure, only these (and a model's
# UnusableScores) are user errors.
RAISED_USER_ERRORS = (ar.SpecError, FileNotFoundError, ar.ModelPartsError)


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


def failure(exc: Exception, verbose: bool) -> tuple[str, int] | None:
    """The one-line message and the exit status for an exception a command raised; None for a bug, which keeps its
    traceback. A failure that came through Ray prints its traceback here under ``verbose``."""
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
