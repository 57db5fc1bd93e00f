"""A scenario is a declared list of steps. Each step names what it makes and takes, by parameter name, the run
context and what earlier steps made; the runner counts the list for the progress log and times each step into
metrics.json ``wall_seconds``."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from augsbert_ray.config import JobSpec
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.runtime import log

WALL_SECONDS = "wall_seconds"  # a step that takes this parameter gets the seconds of the steps before it, and the total


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run: the message says where, what was finished and how to go on."""


def always(spec: JobSpec) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One step of a scenario.

    Args:
        makes: The name its value goes by, or a tuple of names for a step that returns a tuple.
        title: Its name in the log and in ``wall_seconds``; a function of the spec where the name depends on it.
        run: ``run(ctx, **earlier)``: it takes the run context and, by parameter name, the values of earlier steps
            (a skipped step's names hold None).
        when: Whether the spec runs this step (default: always).

    Example:
        >>> step = Step("gold", "read gold data", lambda ctx: "the gold splits")
        >>> step.title_for(None)
        'read gold data'
    """

    makes: str | tuple[str, ...]
    title: str | Callable[[JobSpec], str]
    run: Callable[..., Any]
    when: Callable[[JobSpec], bool] = always

    @property
    def names(self) -> tuple[str, ...]:
        return self.makes if isinstance(self.makes, tuple) else (self.makes,)

    def title_for(self, spec: JobSpec) -> str:
        return self.title(spec) if callable(self.title) else self.title


def run_steps(ctx: RunContext, steps: tuple[Step, ...]) -> MappingProxyType[str, Any]:
    """Run a scenario's steps in order and return what they made, by name. The log numbers each step
    ("[stage 3/8] ...") out of the steps the spec runs."""
    chosen = [step for step in steps if step.when(ctx.spec)]
    made: dict[str, Any] = {name: None for step in steps for name in step.names}
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    for number, step in enumerate(chosen, start=1):
        title = step.title_for(ctx.spec)
        log.info("[stage %d/%d] %s ...", number, len(chosen), title)
        step_start = time.perf_counter()
        wanted = list(inspect.signature(step.run).parameters)[1:]
        earlier = {WALL_SECONDS: {**seconds, "total": round(time.perf_counter() - started, 2)}, **made}
        try:
            value = step.run(ctx, **{name: earlier[name] for name in wanted})
        except KeyboardInterrupt as exc:  # Ctrl-C: say where (and what the step says it finished)
            said = f": {exc}" if str(exc) else ""
            raise Interrupted(f"at stage {number}/{len(chosen)} ({title}{said})") from None
        made.update(zip(step.names, value) if isinstance(step.makes, tuple) else {step.makes: value})
        seconds[title] = round(time.perf_counter() - step_start, 2)
        log.info("[stage %d/%d] %s done in %.1fs", number, len(chosen), title, seconds[title])
    return MappingProxyType(made)
