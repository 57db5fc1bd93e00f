"""The `augsbert` command: parsing and printing over the public API (``import augsbert_ray``).

Each subcommand is a module of its own (run_command for run and tune, label_command, evaluate_command,
models_command, submit_command for submit, status and logs); parser holds the flags and help texts, errors how a
failure is reported.
"""

from __future__ import annotations

import atexit
import sys

import augsbert_ray as ar
from augsbert_ray.cli.errors import causes, failure, ray_failure
from augsbert_ray.cli.interrupt import report_interrupt, stop_on_interrupt
from augsbert_ray.cli.parser import build_parser
from augsbert_ray.cli.run_command import job_spec

__all__ = ["build_parser", "causes", "job_spec", "main", "ray_failure"]


def main(argv: list[str] | None = None) -> int:
    """Run `augsbert` with ``argv`` (default: the command line); returns the exit status."""
    try:
        return _command(argv)
    finally:
        _no_color_reset_at_exit()


def _command(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    ar.setup_logging(args.verbose)
    try:
        with stop_on_interrupt(args.command):
            return args.handler(args)
    except KeyboardInterrupt as exc:  # Ctrl-C: what was finished, and how to go on
        return report_interrupt(args.command, exc)
    except Exception as exc:
        reported = failure(exc, args.verbose)
        if reported is None:
            raise
        message, status = reported
        print(f"augsbert {args.command}: error: {message}", file=sys.stderr)
        return status


def _no_color_reset_at_exit() -> None:
    """Ray's CLI logger calls colorama.init() when imported, whose exit handler wrote ESC[0m to a terminal after the
    command's last line."""
    initialise = getattr(sys.modules.get("colorama"), "initialise", None)
    if initialise is not None:
        atexit.unregister(initialise.reset_all)
