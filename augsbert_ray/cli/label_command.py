"""`augsbert label`: pairs (--input) or a sentence list paired with a strategy (--sentences) labeled by a teacher;
the labeling spec's fields and errors worded as this command's flags."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pydantic import ValidationError

import augsbert_ray as ar
from augsbert_ray.cli.errors import writing_to

# The flag that sets each LabelingSpec field, where its name is not the field's with dashes.
LABEL_FLAGS = {"min_actors": "--actors", "max_actors": "--actors"}
BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}
# `augsbert label`'s flags for each way of giving pairs, with their defaults (None in argparse: given or not).
SENTENCE_FLAGS = {"strategy": "random", "pairs": None, "top_k": 3, "seed": 42}
INPUT_FLAGS = {"format": None, "text_columns": "sentence1,sentence2"}


def label_command(args: argparse.Namespace) -> int:
    try:
        with writing_to(Path(args.output), "--output"):
            result = _label(args)
    except ar.SpecError as exc:  # the labeling spec's fields, worded as this command's flags
        raise ar.SpecError(_with_flags(str(exc), prefix="labeling.")) from None
    except KeyboardInterrupt as exc:  # Ctrl-C: the shards written are kept
        said = f"{exc}; " if str(exc) else ""
        raise KeyboardInterrupt(f"{said}run the same command again to label the rest") from None
    print(result.summary())
    print(f"labeled pairs: {result.output}  manifest: {result.manifest}  rejects: {result.rejects}")
    if result.labeled == 0:
        why = "the input holds no pairs" if result.pairs_in == 0 else f"every pair was rejected (see {result.rejects})"
        print(f"augsbert label: warning: 0 pairs labeled ({result.pairs_in} pairs in): {why}", file=sys.stderr)
    return 0


def _label(args: argparse.Namespace) -> ar.LabelResult:
    address = ar.cluster_address(args.address)
    min_actors, max_actors = args.actors
    try:
        spec = ar.LabelingSpec(
            batch_size=args.batch_size, min_actors=min_actors, max_actors=max_actors, cpus_per_actor=args.cpus_per_actor,
            gpus_per_actor=args.gpus_per_actor, precision=args.precision, runtime=args.runtime, max_seq_length=args.max_seq_length,
            shard_rows=args.shard_rows,
        )
    except ValidationError as exc:
        raise _flag_errors(exc) from None
    if (args.input is None) == (args.sentences is None):
        raise ar.SpecError("give exactly one of --input (pairs) and --sentences (a sentence list to pair with --strategy)")
    _label_mode_flags(args)
    if args.sentences:
        return ar.label_sentences(args.sentences, args.output, args.model, spec, strategy=args.strategy, pairs=args.pairs,
                                  top_k=args.top_k, seed=args.seed, address=address, verbose=args.verbose)
    return ar.label_files(args.input, args.output, args.model, spec, text_columns=args.text_columns, format=args.format,
                          address=address, verbose=args.verbose)


def _label_flags() -> dict[str, str]:
    return {name: LABEL_FLAGS.get(name, "--" + name.replace("_", "-")) for name in ar.LabelingSpec.model_fields}


def _with_flags(message: str, prefix: str = "") -> str:
    """A message naming LabelingSpec fields (``prefix`` + field), worded with the flags of `augsbert label`."""
    flags = _label_flags()
    return re.sub(r"\b" + re.escape(prefix) + r"(" + "|".join(flags) + r")\b", lambda found: flags[found[1]], message)


def _flag_errors(exc: ValidationError) -> ar.SpecError:
    """LabelingSpec's errors worded with the flags of `augsbert label`, on one line: --batch-size: must be > 0."""
    flags = _label_flags()
    reasons = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] in BOUNDS:
            symbol, key = BOUNDS[error["type"]]
            message = f"must be {symbol} {error['ctx'][key]:g}"
        if error["loc"]:
            reasons.append(f"{flags[str(error['loc'][0])]}: {message}")
        else:  # a check across fields names them in its message
            reasons.append(_with_flags(message))
    return ar.SpecError("; ".join(reasons))


def _label_mode_flags(args: argparse.Namespace) -> None:
    """Refuse a flag of the other way of giving pairs (--input, --sentences): it would do nothing. Then the defaults
    of those not given."""
    unused = INPUT_FLAGS if args.sentences else SENTENCE_FLAGS
    given = ["--" + name.replace("_", "-") for name in unused if getattr(args, name) is not None]
    if given:
        raise ar.SpecError(f"{', '.join(given)}: not used with {'--sentences' if args.sentences else '--input'}")
    for name, default in {**SENTENCE_FLAGS, **INPUT_FLAGS}.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
