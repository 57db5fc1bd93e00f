"""Resuming an unfinished run in its own directory: its spec, what changed since it started, and which of its
finished fits are still valid."""

from __future__ import annotations

import shutil
from pathlib import Path

from augsbert_ray.config import JobSpec, SpecError, load_spec, path_problem
from augsbert_ray.layout import METRICS_FILE, SPEC_FILE
from augsbert_ray.pipeline.context import FitLedger, RunContext
from augsbert_ray.pipeline.fingerprint import FINGERPRINT_FILE, changed_entries, describe, fit_still_matches, run_fingerprint, write_fingerprint
from augsbert_ray.runtime import log


def resume_spec(run_dir: Path, overrides: list[str] | None = None) -> JobSpec:
    """The spec an unfinished run was started with (its spec.yaml), to resume it.

    Args:
        run_dir: The unfinished run's directory.
        overrides: Settings to change on resume (``--set``), e.g. ``ray.address``.

    Returns:
        The run's ``JobSpec``; a SpecError when ``run_dir`` is no run directory or the run has finished.

    Example:
        >>> resume_spec(tmp_dir)
        Traceback (most recent call last):
        ...
        augsbert_ray.config.errors.SpecError: --resume ...: not a run directory (no spec.yaml)
    """
    if (problem := path_problem(run_dir, "dir")) and "not found" not in problem:
        raise SpecError(f"--resume {run_dir}: {problem}")
    if not (run_dir / SPEC_FILE).is_file():
        raise SpecError(f"--resume {run_dir}: not a run directory (no spec.yaml)")
    for output in (METRICS_FILE, "tuning.json"):  # a finished `augsbert run` / `augsbert tune` has written it
        if (run_dir / output).exists():
            raise SpecError(f"--resume {run_dir}: that run has finished ({output} exists)")
    return load_spec(run_dir / SPEC_FILE, overrides)


def resume_run(spec: JobSpec, run_dir: Path, data_dir: str | Path | None, force: bool) -> RunContext:
    """Continue an unfinished run in its own directory: finished fits are reused, gold and candidates are made
    again (they are seeded), and labeling skips the shards already written. What the run computes from must
    not have changed since it started (its fingerprint); with ``force``, only the fits that the changes do not
    touch are reused, and the silver sets are made again."""
    ctx = RunContext.open(spec, run_dir.resolve(), data_dir)
    run_dir, ledger = ctx.layout.root, ctx.ledger
    now = run_fingerprint(spec, data_dir)
    changed = changed_entries(run_dir, now) if (run_dir / FINGERPRINT_FILE).exists() else {}
    if changed and not force:
        raise SpecError(f"--resume {run_dir}: what the run computes from changed since it started: {describe(changed)}; "
                        "start a new run, or add --force-resume to reuse only the fits these changes do not touch")
    if changed:
        tuned = spec.tuned_models()
        kept = {name: record for name, record in ledger.finished.items() if fit_still_matches(name, changed, tuned)}
        # an unfinished fit's training state, made under the old settings, must not be where its refit goes on from
        states = sorted(path.name for path in ctx.layout.ray_train.glob("*") if not fit_still_matches(path.name, changed, tuned))
        log.warning("--force-resume: %s changed; reusing %s, fitting again %s, dropping the training states of %s, labeling "
                    "again", describe(changed), ", ".join(kept) or "no fit",
                    ", ".join(sorted(ledger.finished.keys() - kept.keys())) or "nothing", ", ".join(states) or "none")
        for stale in ("silver", "candidates", "tuning_silver", "retrieval", *(f"models/{name}" for name in ledger.finished.keys() - kept.keys()),
                      *(f"ray_train/{name}" for name in states)):
            shutil.rmtree(run_dir / stale, ignore_errors=True)
        ctx = RunContext(spec, ctx.layout, FitLedger(ctx.layout, kept), data_dir)
        ctx.ledger.write()
    write_fingerprint(run_dir, now)
    finished = ctx.ledger.finished
    log.info("resuming %s: %d finished fit(s) to reuse (%s)", run_dir, len(finished), ", ".join(finished) or "none")
    return ctx
