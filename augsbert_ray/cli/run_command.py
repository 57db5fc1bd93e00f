"""`augsbert run` and `augsbert tune`: a job spec (with --set overrides), or with --resume RUN_DIR the spec saved in
that run, run end to end or tuned; then the report."""

from __future__ import annotations

import argparse
from pathlib import Path

import augsbert_ray as ar
from augsbert_ray.cli.errors import writing_to


def job_spec(args: argparse.Namespace, overrides: list[str]) -> tuple[ar.JobSpec, Path | None]:
    """The job spec file with --set overrides, or with --resume RUN_DIR the spec saved in that run."""
    given = ar.cluster_address(args.address)
    address = [f"ray.address={given}"] if given else []
    resume = Path(args.resume) if args.resume else None
    if args.force_resume and resume is None:
        raise ar.SpecError("--force-resume goes with --resume RUN_DIR")
    if resume is not None:
        settable = [f"{section}.{key}" for section, keys in ar.RESUME_SETTABLE.items() for key in keys]
        if args.job or any(override.partition("=")[0].strip() not in settable for override in overrides):
            raise ar.SpecError(
                "--resume continues a run with the spec saved in its spec.yaml: give no job spec, "
                f"and --set only {', '.join(settable)}"
            )
        return ar.resume_spec(resume, overrides + address), resume
    if args.job:
        return ar.load_spec(args.job, overrides + address), None
    raise ar.SpecError(f"give a job spec (e.g. {args.example_job}), or --resume RUN_DIR")


def run_command(args: argparse.Namespace) -> int:
    spec, resume = job_spec(args, list(args.set or []))
    with writing_to(resume or spec.output_dir, "--resume RUN_DIR" if resume else "output_dir"):
        result = ar.run(spec, data_dir=args.data_dir, resume=resume, force_resume=args.force_resume, verbose=args.verbose)
    print(f"run directory: {result.run_dir}")
    print(result.report.read_text(encoding="utf-8").split("## Counts")[0])
    return 0


def tune_command(args: argparse.Namespace) -> int:
    overrides = list(args.set or [])
    if args.cross_encoder:
        if args.resume:
            raise ar.SpecError("--cross-encoder starts a new run; a resumed run keeps the cross-encoder of its spec.yaml")
        overrides.append(f"cross_encoder.trained={args.cross_encoder}")
    spec, resume = job_spec(args, overrides)
    # a spec without a tuning section tunes no model: ar.tune refuses it, before a run directory is made
    if args.cross_encoder and spec.tuned_models() == ["sbert"]:
        raise ar.SpecError(f"--cross-encoder {args.cross_encoder}: the tuned models (tuning.models: [sbert]) need no teacher; it labels "
                           "silver for tuned AugSBERT models (e.g. --set 'tuning.models=[augsbert_bm25]')")
    with writing_to(resume or spec.output_dir, "--resume RUN_DIR" if resume else "output_dir"):
        result = ar.tune(spec, data_dir=args.data_dir, resume=resume, force_resume=args.force_resume, verbose=args.verbose)
    print(f"run directory: {result.run_dir}")
    print(result.report.read_text(encoding="utf-8"))
    return 0
