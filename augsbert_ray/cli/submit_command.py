"""`augsbert submit`, `augsbert status` and `augsbert logs`: a job spec run on a Ray cluster through the Ray Jobs API."""

from __future__ import annotations

import argparse

import augsbert_ray as ar


def submit_command(args: argparse.Namespace) -> int:
    submitted = ar.submit_job(
        args.job, args.address, list(args.set or []), working_dir=args.working_dir, data_dir=args.data_dir,
        pip=args.pip, submission_id=args.submission_id, insecure=args.insecure,
    )
    print(f"submission id: {submitted.submission_id}", flush=True)
    if args.no_wait:
        return 0
    state, message, exit_code = submitted.wait()
    print(f"{submitted.submission_id}: {state}{f' ({message})' if message and state != 'SUCCEEDED' else ''}")
    return 0 if state == "SUCCEEDED" else 2 if exit_code == 2 else 1  # 2: its driver stopped on bad input


def status_command(args: argparse.Namespace) -> int:
    state, message, _ = ar.job_status(args.address, args.submission_id, args.insecure)
    print(f"{args.submission_id}: {state}{f' ({message})' if message else ''}")
    return 0


def logs_command(args: argparse.Namespace) -> int:
    ar.job_logs(args.address, args.submission_id, args.insecure, args.follow)
    return 0
