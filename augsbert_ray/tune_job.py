"""`augsbert tune`: the tuning stage of a job on its own, composed of the same stages as `augsbert run`."""

from __future__ import annotations

from pathlib import Path

import ray

from augsbert_ray.config import JobSpec, SpecError
from augsbert_ray.evaluation import evaluate_on_ray
from augsbert_ray.layout import bi_encoder_name
from augsbert_ray.pipeline import start_run
from augsbert_ray.runtime import log
from augsbert_ray.stages import (
    CandidateSource, Fit, Silver, StageClock, check_candidates, check_teacher, make_silver, read_gold, silver_by_top_k,
    silver_dirs_by_k, student_fitter, teacher_stage, train_bi_encoder, train_teacher, tuning_silver_counts, with_sampling,
)
from augsbert_ray.tuning.report import write_tuning_report
from augsbert_ray.tuning.stage import strategy_of


def check_tunable(spec: JobSpec) -> None:
    if spec.tuning is None:
        raise SpecError("augsbert tune needs a 'tuning' section in the job spec (e.g. tuning: {seeds: 5})")


def run_tuning_job(
    spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False,
    run_dir: Path | None = None,
) -> Path:
    """`augsbert tune`: gold -> (teacher and silver, if a tuned model needs them) -> the searches -> test scores of
    the chosen models -> tuning.md / tuning.json.

    Args:
        spec: A job spec with a ``tuning`` section.
        data_dir: Where the named datasets live (default $AUGSBERT_DATA_DIR, else ../shared/data).
        resume: An unfinished tuning run to continue, as `augsbert run --resume` does: finished fits and searches
            are reused, an unfinished search starts over.
        force_resume: Continue ``resume`` though its inputs changed.
        run_dir: The new run's directory, made by ``new_run_dir(spec)`` (default: made here).

    Example::

        run_dir = run_tuning_job(load_spec("jobs/stsb_seed_opt.yaml"))
        print((run_dir / "tuning.md").read_text())
    """
    check_tunable(spec)
    tuned = spec.tuned_models()
    strategies = [strategy_of(spec, model) for model in tuned if model != "sbert"]
    # silver needs SBERT as `augsbert run` does: the teacher gate compares the teacher with it, and semantic search
    # embeds with it
    needs_sbert = "sbert" in tuned or bool(strategies)
    ctx = start_run(spec, resume, data_dir, force_resume, run_dir)
    clock = StageClock(2 + needs_sbert + 4 * bool(strategies))
    sbert_dir = ctx.layout.model("sbert")

    with clock.stage("read gold data"):
        gold = read_gold(ctx, data_dir)
        candidate_source = CandidateSource.in_domain(gold.splits)
        if strategies:
            check_candidates(with_sampling(spec, strategies=strategies), candidate_source)
    fits: list[Fit] = []
    if strategies:
        with clock.stage(teacher_stage(spec)):
            teacher, fits = train_teacher(ctx, gold)
    if needs_sbert:
        with clock.stage("tune SBERT" if "sbert" in tuned else "train SBERT on gold"):
            fits.append(train_bi_encoder(ctx, "sbert", [gold.train_file], student_fitter(spec, "sbert")))

    made, by_k, gate = Silver({}), {}, {}
    if strategies:
        with clock.stage("teacher gate: teacher vs SBERT on dev"):
            checked = check_teacher(ctx, teacher, gold.splits, sbert_dir, gold.splits.dev)
            teacher, gate = checked.teacher, {"teacher": checked.record}
        with clock.stage("sample and label candidates"):
            plain = [s for s in strategies if spec.tuning_top_ks(bi_encoder_name(s)) == [None]]
            if plain:
                made = make_silver(with_sampling(spec, strategies=plain), ctx.layout, candidate_source, teacher, sbert_dir)
            by_k = silver_by_top_k(ctx, gold.splits, teacher, sbert_dir, made)
        with clock.stage("tune AugSBERT bi-encoders"):
            trial_silver = silver_dirs_by_k(by_k)
            for strategy in strategies:
                name = bi_encoder_name(strategy)
                default = [gold.train_file, *made.sets[strategy].train_files()] if strategy in made.sets else [gold.train_file]
                fits.append(train_bi_encoder(ctx, name, default, student_fitter(spec, name, trial_silver)))

    with clock.stage("evaluate and report"):
        searched = {fit.name: fit.tuning for fit in fits if fit.tuning is not None}
        refs = {name: evaluate_on_ray("bi_encoder", str(ctx.layout.model(name)), spec.task, gold.splits.dev, gold.splits.test,
                                      spec.evaluation.cpus, spec.evaluation.gpus) for name in searched}
        tests = {name: ray.get(ref).test for name, ref in refs.items()}
        metric = "spearman_x100" if spec.task == "regression" else "f1_x100"
        counts = {**gold.counts, "trained_on": {fit.name: fit.trained_on for fit in fits}, **(made.counts() if made.sets else {}),
                  **({"tuning_silver": tuning} if (tuning := tuning_silver_counts(by_k, made)) else {})}
        extra = {**gate, "counts": counts, "wall_seconds": clock.with_total(), "reused_fits": ctx.ledger.reused}
        write_tuning_report(ctx.layout.root, spec.name, searched, tests, metric, extra)
    log.info("done: %s", ctx.layout.root / "tuning.md")
    return ctx.layout.root
