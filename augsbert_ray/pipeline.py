"""`augsbert run`: the in-domain and domain-transfer methods, each a composition of the stages in
augsbert_ray.stages; metrics.json is assembled from what the stages returned."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from augsbert_ray.config import JobSpec, SpecError, check_output_dir, dump_spec, load_spec
from augsbert_ray.evaluation import Evaluation
from augsbert_ray.evaluation.checks import saved_kind
from augsbert_ray.files import atomic_write_text
from augsbert_ray.labeling import check_resources, labels_in_process
from augsbert_ray.labeling.teacher import single_output_error
from augsbert_ray.layout import METRICS_FILE, REPORT_FILE, SPEC_FILE, bi_encoder_name
from augsbert_ray.models import check_model, model_outputs, resolve_model
from augsbert_ray.report import plot_score_densities, write_report
from augsbert_ray.resume import FINGERPRINT_FILE, changed_entries, describe, fit_still_matches, run_fingerprint, run_models, write_fingerprint
from augsbert_ray.runtime import RUN_LOG, Request, chatter_to, check_cpu_bf16, check_requests, init_ray, log
from augsbert_ray.stages import (
    CandidateSource, Fit, FitLedger, Gold, RunContext, Silver, StageClock, check_candidates, check_teacher, evaluate_models,
    given_target_pairs, make_silver, read_gold, read_target, silver_by_top_k, silver_dirs_by_k, student_fitter, teacher_stage,
    train_bi_encoder, train_labels, train_teacher, transfer_reference_labels, tuning_silver_counts,
)
from augsbert_ray.tuning.report import write_tuning_report


def new_run_dir(spec: JobSpec) -> Path:
    check_output_dir(spec.output_dir, "output_dir")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = (spec.output_dir / f"{spec.name}-{stamp}").resolve()
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = (spec.output_dir / f"{spec.name}-{stamp}-{suffix}").resolve()
    run_dir.mkdir(parents=True)
    return run_dir


def run_logged(runner: Callable[..., Path], spec: JobSpec, resume: Path | None = None, verbose: bool = False, **kwargs: Any) -> Path:
    """``runner`` (run_job or run_tuning_job) in a new run directory, or continuing ``resume``; returns the run
    directory. Unless ``verbose``, Ray's and the libraries' output goes to the run's run.log instead of the console.
    A new run refused before it wrote its spec.yaml (before Ray starts) leaves no directory behind.

    Args:
        runner: run_job or run_tuning_job.
        spec: the job spec.
        resume: an unfinished run directory to continue.
        verbose: leave that output on the console.
        kwargs: the runner's other arguments (data_dir, force_resume).

    Example::

        run_dir = run_logged(run_job, load_spec("jobs/stsb_indomain_bm25.yaml"), data_dir="../shared/data")
    """
    run_dir = resume or new_run_dir(spec)
    try:
        with contextlib.nullcontext() if verbose else chatter_to(run_dir / RUN_LOG):
            return runner(spec, resume=resume, run_dir=None if resume else run_dir, **kwargs)
    except BaseException:
        if resume is None and not (run_dir / SPEC_FILE).exists():  # refused by a check: nothing to resume or read
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def start_run(
    spec: JobSpec, resume: Path | None, data_dir: str | Path | None, force_resume: bool = False, run_dir: Path | None = None
) -> RunContext:
    """A new run directory (``run_dir``, made by new_run_dir, or a new one) with spec.yaml and the run's fingerprint,
    or the unfinished run ``resume``; then Ray."""
    check_cpu_bf16(spec.ray.address, {"training.bf16": spec.training.bf16 and not spec.training.use_gpu,
                                      "labeling.precision bf16": spec.labeling.bf16_on_cpu})
    check_run_models(spec)
    if resume is None:
        fingerprint = run_fingerprint(spec, data_dir)  # first: a run refused for its data leaves no spec.yaml to resume
        ctx = RunContext.open(spec, run_dir or new_run_dir(spec))
        (ctx.layout.root / SPEC_FILE).write_text(dump_spec(spec), encoding="utf-8")
        write_fingerprint(ctx.layout.root, fingerprint)
    else:
        ctx = resume_run(spec, resume, data_dir, force_resume)
    log.info("run directory: %s", ctx.layout.root)
    init_ray(spec.ray.address, spec.ray.num_cpus)
    check_resources(spec.labeling, labels_in_process(spec.labeling, spec.ray.address))  # before the fits, not after
    check_requests(job_requests(spec))
    return ctx


def job_requests(spec: JobSpec) -> list[Request]:
    """What each fit (all its workers at once), evaluation task, search task and tuning trial of the run asks of Ray."""
    training, evaluation = spec.training, spec.evaluation
    workers = training.num_workers
    requests: list[Request] = [
        (f"training.num_workers {workers} x cpus_per_worker {training.cpus_per_worker:g} ({workers * training.cpus_per_worker:g} "
         "CPUs at once)", workers * training.cpus_per_worker, "CPU"),
        (f"training.use_gpu with num_workers {workers} (a GPU each)", workers * training.use_gpu, "GPU"),
        (f"evaluation.cpus {evaluation.cpus:g}", evaluation.cpus, "CPU"),
        (f"evaluation.gpus {evaluation.gpus:g}", evaluation.gpus, "GPU"),
        (f"sampling.search_cpus {spec.sampling.search_cpus:g}", spec.sampling.search_cpus, "CPU"),
    ]
    if spec.tuning is not None:
        requests += [(f"tuning.cpus_per_trial {spec.tuning.cpus_per_trial:g}", spec.tuning.cpus_per_trial, "CPU"),
                     (f"tuning.gpus_per_trial {spec.tuning.gpus_per_trial:g}", spec.tuning.gpus_per_trial, "GPU")]
    return requests


def check_run_models(spec: JobSpec) -> None:
    """Every model the run loads must load (``check_model``): a typo in one first used late in the run (the
    zero-shot model at evaluation) fails in seconds, before Ray starts, naming its setting. A trained teacher model
    must be of its kind, and a trained cross-encoder have one output."""
    for setting, name in run_models(spec).items():
        try:
            check_model(resolve_model(name))
        except (SpecError, FileNotFoundError) as exc:
            raise SpecError(f"{setting}: {exc}") from None
    for setting, trained, kind in (("cross_encoder.trained", spec.cross_encoder.trained, "cross_encoder"),
                                   ("teacher.bi_encoder.trained", spec.teacher.bi_encoder.trained, "bi_encoder")):
        found = saved_kind(trained) if trained else None
        if found is not None and found != kind:  # loaded as the other kind, it would get a fresh, random part
            raise SpecError(f"{setting} {trained}: a {found.replace('_', '-')}, not a {kind.replace('_', '-')}")
        if trained and kind == "cross_encoder" and (outputs := model_outputs(trained)) != 1:
            raise SpecError(f"{setting} {single_output_error(trained, outputs)}")


def load_run_spec(run_dir: Path, overrides: list[str] | None = None) -> JobSpec:
    """The spec an unfinished run was started with (its spec.yaml), to resume it."""
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
    ctx = RunContext.open(spec, run_dir.resolve())
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
        for stale in ("silver", "candidates", "tuning_silver", *(f"models/{name}" for name in ledger.finished.keys() - kept.keys()),
                      *(f"ray_train/{name}" for name in states)):
            shutil.rmtree(run_dir / stale, ignore_errors=True)
        ctx = RunContext(spec, ctx.layout, FitLedger(ctx.layout, kept))
        ctx.ledger.write()
    write_fingerprint(run_dir, now)
    finished = ctx.ledger.finished
    log.info("resuming %s: %d finished fit(s) to reuse (%s)", run_dir, len(finished), ", ".join(finished) or "none")
    return ctx


def run_metrics(
    ctx: RunContext, gold_counts: dict[str, Any], fits: list[Fit], silver: Silver, tuning_counts: dict[str, Any],
    teacher_record: dict[str, Any], evaluations: dict[str, Evaluation], wall_seconds: dict[str, float],
) -> dict[str, Any]:
    """metrics.json, from the values the stages returned."""
    spec = ctx.spec
    counts = {**gold_counts, "trained_on": {fit.name: fit.trained_on for fit in fits}, **silver.counts(),
              **({"tuning_silver": tuning_counts} if tuning_counts else {})}
    return {
        "task": spec.evaluation_task,
        "metric": "spearman_x100" if spec.evaluation_task == "regression" else "f1_x100",
        "dev": {name: result.dev for name, result in evaluations.items()},
        "test": {name: result.test for name, result in evaluations.items()},
        "details": {name: result.to_dict() for name, result in evaluations.items()},
        "sampling": {strategy: silver_set.diagnostics for strategy, silver_set in silver.sets.items()},
        "counts": counts,
        "wall_seconds": wall_seconds,
        "reused_fits": ctx.ledger.reused,
        "teacher": teacher_record,
    }


def write_outputs(ctx: RunContext, metrics: dict[str, Any], fits: list[Fit], reference_labels: np.ndarray, silver: Silver) -> None:
    """The score-density plot, report.md, after a search tuning.md/tuning.json, and last metrics.json, which marks
    the run finished (`--resume` refuses it): a run stopped before it resumes and writes them all again."""
    root = ctx.layout.root
    plot_score_densities(reference_labels, silver.histograms(), root / "score_density.png")
    write_report(ctx.spec, metrics, root / REPORT_FILE)
    searched = {fit.name: fit.tuning for fit in fits if fit.tuning is not None}
    if searched:
        write_tuning_report(root, ctx.spec.name, searched, {name: metrics["test"][name] for name in searched}, metrics["metric"])
    atomic_write_text(root / METRICS_FILE, json.dumps(metrics, indent=2))
    log.info("done: %s", root / REPORT_FILE)


def run_job(
    spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False,
    run_dir: Path | None = None,
) -> Path:
    """Run the job's scenario (in a new run directory, or continuing the unfinished run ``resume``) and
    return the run directory.

    Args:
        spec: the job spec, e.g. ``load_spec("jobs/stsb_indomain_bm25.yaml")``.
        data_dir: where the named datasets live (default $AUGSBERT_DATA_DIR, else ../shared/data).
        resume: an unfinished run directory to continue (its fingerprint must match, see augsbert_ray.resume).
        force_resume: continue ``resume`` though its inputs changed, reusing only the fits they do not touch.
        run_dir: the new run's directory, made by ``new_run_dir(spec)`` (default: made here).

    Example::

        run_dir = run_job(load_spec("jobs/stsb_indomain_bm25.yaml", ["sampling.top_k=5"]))
        print((run_dir / "report.md").read_text())
    """
    run = run_domain_transfer if spec.scenario == "domain-transfer" else run_in_domain
    return run(spec, data_dir, resume, force_resume, run_dir)


def run_in_domain(
    spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False,
    run_dir: Path | None = None,
) -> Path:
    """Run the whole in-domain method and return the run directory."""
    ctx = start_run(spec, resume, data_dir, force_resume, run_dir)
    layout, clock = ctx.layout, StageClock(8)

    with clock.stage("read gold data"):
        gold = read_gold(ctx, data_dir)
        candidate_source = CandidateSource.in_domain(gold.splits)
        check_candidates(spec, candidate_source)

    with clock.stage(teacher_stage(spec)):
        teacher, fits = train_teacher(ctx, gold)

    with clock.stage("train SBERT on gold"):
        # before sampling: semantic search embeds with the gold-trained bi-encoder, as in the paper
        sbert = train_bi_encoder(ctx, "sbert", [gold.train_file], student_fitter(spec, "sbert"))

    with clock.stage("teacher gate: teacher vs SBERT on dev"):
        checked = check_teacher(ctx, teacher, gold.splits, sbert.model_dir, gold.splits.dev)

    with clock.stage("sample and label candidates"):
        silver = make_silver(spec, layout, candidate_source, checked.teacher, sbert.model_dir)
        by_k = silver_by_top_k(ctx, gold.splits, checked.teacher, sbert.model_dir, silver)

    with clock.stage("train AugSBERT bi-encoders"):
        trial_silver = silver_dirs_by_k(by_k)
        augsbert = []
        for strategy, silver_set in silver.sets.items():
            name = bi_encoder_name(strategy)
            files = [gold.train_file, *silver_set.train_files()]
            augsbert.append(train_bi_encoder(ctx, name, files, student_fitter(spec, name, trial_silver)))

    with clock.stage("evaluate"):
        students = [sbert, *augsbert]
        evaluations = evaluate_models(ctx, checked, [fit.name for fit in students], gold.splits)

    with clock.stage("report"):
        fits = [*fits, *students]
        metrics = run_metrics(ctx, gold.counts, fits, silver, tuning_silver_counts(by_k, silver), checked.record, evaluations,
                              clock.with_total())
        write_outputs(ctx, metrics, fits, train_labels(gold.splits), silver)
    return layout.root


def run_domain_transfer(
    spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False,
    run_dir: Path | None = None,
) -> Path:
    """The teacher on the labeled source, silver labels on the target, AugSBERT on the target silver alone;
    every model is scored on the target's test split."""
    assert spec.target is not None
    ctx = start_run(spec, resume, data_dir, force_resume, run_dir)
    layout, clock = ctx.layout, StageClock(8)

    with clock.stage("read source and target data"):
        target: Gold = read_target(ctx, data_dir)
        source: Gold = read_gold(ctx, data_dir, target)  # its train without the target's dev and test pairs
        candidate_source = CandidateSource.target(spec, target.splits, source.splits) if spec.target.candidates == "sentences" else None
        if candidate_source is not None:
            check_candidates(spec, candidate_source)

    with clock.stage(teacher_stage(spec) + " on the source"):
        teacher, fits = train_teacher(ctx, source)

    with clock.stage("train SBERT on source gold (and target gold)"):
        sbert_source = train_bi_encoder(ctx, "sbert_source", [source.train_file], student_fitter(spec, "sbert_source"))
        # the upper bound: what target labels would give
        sbert_target = ([train_bi_encoder(ctx, "sbert_target", [target.train_file], student_fitter(spec, "sbert_target"))]
                        if target.splits.train.num_rows else [])

    with clock.stage("teacher gate: teacher vs SBERT-source on the target dev"):
        # mapped onto the source's gold scale, compared where the silver labels will be used
        checked = check_teacher(ctx, teacher, source.splits, sbert_source.model_dir, target.splits.dev)

    with clock.stage("sample and label target candidates"):
        if candidate_source is None:
            silver = given_target_pairs(spec, layout, target.splits, checked.teacher)
        else:
            silver = make_silver(spec, layout, candidate_source, checked.teacher, sbert_source.model_dir)

    with clock.stage("train AugSBERT on target silver"):
        augsbert = []
        for strategy, silver_set in silver.sets.items():
            name = "augsbert" if strategy == "given" else bi_encoder_name(strategy)
            # silver alone: the target has no gold to add
            augsbert.append(train_bi_encoder(ctx, name, silver_set.train_files(), student_fitter(spec, name)))

    with clock.stage("evaluate on the target"):
        students = [sbert_source, *sbert_target, *augsbert]
        evaluations = evaluate_models(ctx, checked, [fit.name for fit in students], target.splits)

    with clock.stage("report"):
        fits = [*fits, *students]
        metrics = run_metrics(ctx, {**source.counts, **target.counts}, fits, silver, {}, checked.record, evaluations,
                              clock.with_total())
        write_outputs(ctx, metrics, fits, transfer_reference_labels(target.splits, source.splits), silver)
    return layout.root
