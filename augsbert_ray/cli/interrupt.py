"""Ctrl-C in `augsbert`: the first stops the command within seconds, and the command prints one line saying what
was finished and how to go on (status 130); a second one ends the process at once.

A terminal sends SIGINT to the whole process group. Ray's own processes block it (they are stopped with the
driver), so only this process reacts. Ray Train's fits and Ray Tune install handlers of their own, which swallow
the first Ctrl-C (training.ray_fit keeps this one during fits; Tune's is turned off here).

Python runs a signal handler between any two bytecodes, a finalizer's among them (a weakref callback of numba's,
while a model loads), and an exception raised in a finalizer is printed and dropped: the run went on. So the first
Ctrl-C is watched: while the main thread handles no KeyboardInterrupt, it is raised there again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process stopped by Ctrl-C
CHECK_S = 1.0  # how often the watch looks at the main thread after a Ctrl-C
LOST_AFTER = 2  # checks in a row that find no KeyboardInterrupt in hand: it was dropped, and is raised again


class _Interrupts:
    """The SIGINT handler of one command, and its watch of the first Ctrl-C."""

    def __init__(self, command: str) -> None:
        self.command = command
        # the console as it is now: inside, a run's output (fd 2 too) may go to its log (runtime.chatter_to)
        self.console = os.dup(2)
        self.received = 0
        self.redelivering = False
        self.done = threading.Event()

    def handle(self, signum: int, frame: object) -> None:
        if self.redelivering:  # the watch raising a dropped first Ctrl-C again, not a second one
            self.redelivering = False
            raise KeyboardInterrupt
        self.received += 1
        if self.received > 1:
            os.write(self.console, f"\naugsbert {self.command}: interrupted again: exiting now\n".encode())
            os._exit(INTERRUPTED)
        threading.Thread(target=self.watch, name="augsbert-interrupt", daemon=True).start()
        raise KeyboardInterrupt

    def watch(self) -> None:
        main, strikes = threading.main_thread().ident, 0
        while not self.done.wait(CHECK_S):
            current = sys._current_exceptions().get(main)
            handled = current[1] if isinstance(current, tuple) else current  # Python 3.11: exc_info; later: the exception
            strikes = 0 if isinstance(handled, KeyboardInterrupt) else strikes + 1
            if strikes >= LOST_AFTER:
                strikes = 0
                self.redelivering = True
                signal.pthread_kill(main, signal.SIGINT)  # a real signal: it wakes a main thread asleep in a system call


@contextmanager
def stop_on_interrupt(command: str) -> Iterator[None]:
    """Inside, a first SIGINT raises KeyboardInterrupt in the main thread (again, where it was dropped), and any later
    one exits at once with status 130. The handler before is restored unless an interrupt came (the exit that
    follows, Ray's shutdown included, stays forcible). Nothing changes where SIGINT is ignored (a background job) or
    off the main thread."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is not signal.default_int_handler:
        yield
        return
    interrupts = _Interrupts(command)
    # Ray Tune's handler would take the first Ctrl-C as "finish the search gracefully" and return as if done
    tune_set_here = "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    signal.signal(signal.SIGINT, interrupts.handle)
    try:
        yield
    finally:
        interrupts.done.set()
        os.close(interrupts.console)
        if not interrupts.received:
            signal.signal(signal.SIGINT, previous)
            if tune_set_here:
                os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)


def interrupted_line(command: str, exc: KeyboardInterrupt) -> str:
    """The one line for a command stopped by Ctrl-C: what the command says was finished, else only that it stopped."""
    said = str(exc).strip()
    return f"augsbert {command}: interrupted" + (f": {said}" if said else "")


def report_interrupt(command: str, exc: KeyboardInterrupt) -> int:
    sys.stdout.flush()
    print(interrupted_line(command, exc), file=sys.stderr, flush=True)
    return INTERRUPTED
