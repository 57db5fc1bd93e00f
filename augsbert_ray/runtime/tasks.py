"""Internal: a step's scoring work as Ray tasks, or in the calling process on an embedded Ray (``here``).

A task on a new Ray worker first imports torch and sentence-transformers: about 12 s on 2 busy cores, most of a
step on a small model, and paid again by each step whose workers Ray has since let go. On an embedded Ray without
GPUs the calling process, which has them imported, does the same work one piece after another on all of the Ray's
CPUs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import ray

# A Ray ObjectRef, or the call that makes the value in this process (``result`` makes it).
Pending = Any


def submit(function: Callable[..., Any], cpus: float, gpus: float, here: bool, *args: Any) -> Pending:
    """``function(*args)`` as a Ray task reserving ``cpus`` and ``gpus``; ``here``: a call to make in this process."""
    if here:
        return functools.partial(function, *args)
    return ray.remote(num_cpus=cpus, num_gpus=gpus)(function).remote(*args)


def result(pending: Pending) -> Any:
    """The value of what ``submit`` returned (``ray.get`` of a task's reference)."""
    return pending() if callable(pending) else ray.get(pending)


def task_threads(cpus: float, here: bool) -> int:
    """Torch threads for a piece of work: a task's whole CPUs (at least 1); here: all of the embedded Ray's."""
    if here:
        total = ray.cluster_resources().get("CPU") if ray.is_initialized() else None
        return max(1, int(total or os.cpu_count() or 1))
    return max(1, int(cpus))
