"""The two ways to run a job spec from Python: ``run`` (the spec's scenario, as ``augsbert run``) and ``tune`` (its
searches alone, as ``augsbert tune``)."""

from __future__ import annotations

import contextlib
import shlex
import shutil
from pathlib import Path

from augsbert_ray.config import JobSpec, load_spec
from augsbert_ray.layout import SPEC_FILE
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.pipeline.result import RunResult
from augsbert_ray.pipeline.resume import resume_spec
from augsbert_ray.pipeline.scenarios import check_tunable, scenario_steps
from augsbert_ray.pipeline.start import new_run_dir, start_run
from augsbert_ray.pipeline.steps import Interrupted, run_steps
from augsbert_ray.runtime import RUN_LOG, chatter_to, ray_output_kept_off_console


def run(
    spec: JobSpec | str | Path | None = None, data_dir: str | Path | None = None, resume: str | Path | None = None,
    force_resume: bool = False, verbose: bool = True,
) -> RunResult:
    """Run a job spec's scenario (in-domain, domain transfer or retrieval) on Ray, as ``augsbert run`` does.

    Args:
        spec: A ``JobSpec`` (``load_spec``) or the path of a job spec YAML; None with ``resume``.
        data_dir: Where the named datasets live (default $AUGSBERT_DATA_DIR, else ../shared/data).
        resume: An unfinished run directory to continue: finished fits are reused and labeling skips the shards
            already written. Its spec.yaml is the spec, unless ``spec`` is given.
        force_resume: Continue ``resume`` though its spec, data or models changed since it started; only the fits
            the changes do not touch are reused.
        verbose: Leave Ray's and the libraries' output on the console; else it goes to the run's run.log, and what
            Ray forwards from its workers after the call is dropped.

    Returns:
        The run's ``RunResult``: each model's dev and test score, its fits, counts, timings and the run directory
        (a retrieval run's ``RetrievalRunResult``: nDCG@10 as the score, every metric in ``retrieval``).

    Example:
        >>> import augsbert_ray as ar
        >>> spec = ar.load_spec("jobs/stsb_indomain_bm25.yaml", {"data.train_limit": 200})  # doctest: +SKIP
        >>> result = ar.run(spec)  # doctest: +SKIP
        >>> result.test["augsbert_bm25"] - result.test["sbert"]  # doctest: +SKIP
    """
    return _run_scenario(spec, data_dir, resume, force_resume, verbose, tuning=False)


def tune(
    spec: JobSpec | str | Path | None = None, data_dir: str | Path | None = None, resume: str | Path | None = None,
    force_resume: bool = False, verbose: bool = True,
) -> RunResult:
    """Seed optimization (and top-k search) of a job spec's ``tuning.models`` on Ray Tune, as ``augsbert tune``:
    gold, the teacher and silver where a tuned model needs them, the searches, then the chosen models' scores
    (tuning.md, tuning.json).

    Args:
        spec: A ``JobSpec`` with a ``tuning`` section, or the path of one; None with ``resume``.
        data_dir: Where the named datasets live (default $AUGSBERT_DATA_DIR, else ../shared/data).
        resume: An unfinished tuning run to continue: finished fits and searches are reused, an unfinished search
            starts over.
        force_resume: Continue ``resume`` though its inputs changed.
        verbose: Leave Ray's and the libraries' output on the console; else it goes to the run's run.log, and what
            Ray forwards from its workers after the call is dropped.

    Returns:
        The run's ``RunResult`` (``tuned``): the chosen models' scores and each search in ``fits[name].tuning``.

    Example:
        >>> import augsbert_ray as ar
        >>> result = ar.tune("jobs/stsb_seed_opt.yaml")  # doctest: +SKIP
        >>> result.fits["sbert"].tuning.chosen  # doctest: +SKIP
    """
    return _run_scenario(spec, data_dir, resume, force_resume, verbose, tuning=True)


def _run_scenario(
    spec: JobSpec | str | Path | None, data_dir: str | Path | None, resume: str | Path | None, force_resume: bool,
    verbose: bool, tuning: bool,
) -> RunResult:
    resume_dir = Path(resume) if resume is not None else None
    if spec is None:
        if resume_dir is None:
            raise ValueError("give a job spec, or resume= an unfinished run directory")
        spec = resume_spec(resume_dir)
    elif not isinstance(spec, JobSpec):
        spec = load_spec(spec)
    if tuning:
        check_tunable(spec)  # before a run directory is made
    run_dir = resume_dir or new_run_dir(spec)
    ctx: RunContext | None = None
    try:
        with contextlib.nullcontext() if verbose else chatter_to(run_dir / RUN_LOG), \
                contextlib.nullcontext() if verbose else ray_output_kept_off_console():
            ctx = start_run(spec, resume_dir, data_dir, force_resume, None if resume_dir else run_dir)
            return run_steps(ctx, scenario_steps(spec, tuning))["result"]
    except BaseException as exc:
        unstarted = resume_dir is None and not (run_dir / SPEC_FILE).exists()
        if unstarted:  # refused by a check, or stopped before: nothing to resume or read
            shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(interrupted_at(ctx, exc, "tune" if tuning else "run", data_dir, run_dir.resolve(), unstarted)) from None
        raise


def interrupted_at(ctx: RunContext | None, exc: KeyboardInterrupt, command: str, data_dir: str | Path | None, run_dir: Path,
                   unstarted: bool) -> str:
    """What a run stopped by Ctrl-C had finished, and the command that resumes it."""
    if unstarted:
        return "before the run started; nothing to resume"
    where = str(exc) if isinstance(exc, Interrupted) else "while starting"
    fits = ", ".join(ctx.ledger.finished) if ctx is not None else ""
    given = f" --data-dir {shlex.quote(str(data_dir))}" if data_dir is not None else ""
    return f"{where}; finished fits: {fits or 'none'}; resume with: augsbert {command} --resume {shlex.quote(str(run_dir))}{given}"
