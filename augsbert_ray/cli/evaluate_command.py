"""`augsbert evaluate`: a model's metrics as JSON on stdout; the data's counts, rejects and warnings on stderr."""

from __future__ import annotations

import argparse
import json
import sys

import augsbert_ray as ar

# The pair-file settings' names in ar.evaluate's errors, worded as this command's flags.
FLAG_WORDS = {"set 'format'": "pass --format", "score_range must be": "--score-range must be"}


def evaluate_command(args: argparse.Namespace) -> int:
    try:
        result = ar.evaluate(
            args.model, args.data, dev=args.dev, format=args.format, task=args.task, score_range=args.score_range,
            kind=args.kind, rejects=args.rejects, max_reject_fraction=args.max_reject_fraction, data_dir=args.data_dir,
            seed=args.seed, threads=args.threads, notes=_note,
        )
    except ar.SpecError as exc:
        worded = str(exc)
        for words, flag in FLAG_WORDS.items():
            worded = worded.replace(words, flag)
        if worded == str(exc):
            raise
        raise ar.SpecError(worded) from None
    print(json.dumps(result.to_dict(), indent=2))
    return 0


def _note(line: str) -> None:
    """ar.evaluate's report on the data, on stderr (stdout is the metrics' JSON)."""
    print(f"augsbert evaluate: {line}" if line.startswith("warning: ") else line, file=sys.stderr)
