"""`augsbert tune`: the tuning stage of a job on its own, composed of the pipeline's stages."""

from __future__ import annotations

import time
from pathlib import Path

import ray

from augsbert_ray.config import JobSpec, SpecError, bi_encoder_name
from augsbert_ray.evaluation import evaluate_on_ray
from augsbert_ray.pipeline import (
    CandidateSource, calibrate_teacher, make_silver, read_gold, silver_by_top_k, start_run, teacher_stage, train_bi_encoder,
    train_teacher,
)
from augsbert_ray.runtime import log
from augsbert_ray.tuning.report import write_tuning_report
from augsbert_ray.tuning.stage import silver_files, strategy_of, with_sampling


def run_tuning_job(spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False) -> Path:
    """`augsbert tune`: gold -> (cross-encoder and silver, if a tuned model needs them) -> the searches ->
    test scores of the chosen models -> tuning.md / tuning.json. With ``resume``, continues that unfinished
    run as `augsbert run --resume` does: finished fits and searches are reused, an unfinished search starts over."""
    if spec.tuning is None:
        raise SpecError("augsbert tune needs a 'tuning' section in the job spec (e.g. tuning: {seeds: 5})")
    tuned = spec.tuned_models()
    strategies = [strategy_of(spec, model) for model in tuned if model != "sbert"]
    # semantic search embeds with the gold-trained SBERT, as in `augsbert run`
    needs_sbert = "sbert" in tuned or (spec.sampling.semantic_model == "gold" and any("semantic" in s for s in strategies))
    state = start_run(spec, resume, data_dir, force_resume)
    stages = 2 + needs_sbert + 3 * bool(strategies)
    started = time.perf_counter()
    models_dir = state.run_dir / "models"

    with state.stage("read gold data", stages):
        gold = read_gold(spec, state, data_dir)
    gold_file = (str(state.run_dir / "gold" / "train.parquet"), "label")
    state.counts["trained_on"] = {}
    if strategies:
        with state.stage(teacher_stage(spec), stages):
            teacher = calibrate_teacher(spec, state, train_teacher(spec, state, gold, gold_file), gold)
    if needs_sbert:
        with state.stage("tune SBERT" if "sbert" in tuned else "train SBERT on gold", stages):
            train_bi_encoder(spec, state, "sbert", [gold_file])

    made: dict[str, Path] = {}
    if strategies:
        with state.stage("sample and label candidates", stages):
            plain = [s for s in strategies if spec.tuning_top_ks(bi_encoder_name(s)) == [None]]
            if plain:
                made, _ = make_silver(
                    with_sampling(spec, strategies=plain), state, CandidateSource.in_domain(gold), teacher, models_dir / "sbert"
                )
            state.tuning_silver = silver_by_top_k(spec, state, gold, teacher, models_dir / "sbert", made)
        with state.stage("tune AugSBERT bi-encoders", stages):
            for strategy in strategies:
                default = [gold_file, *silver_files(made[strategy])] if strategy in made else [gold_file]
                train_bi_encoder(spec, state, bi_encoder_name(strategy), default)

    with state.stage("evaluate and report", stages):
        refs = {name: evaluate_on_ray("bi_encoder", str(models_dir / name), spec.task, gold.dev, gold.test,
                                      spec.evaluation.cpus, spec.evaluation.gpus) for name in state.tuning}
        tests = {name: ray.get(ref).test for name, ref in refs.items()}
        metric = "spearman_x100" if spec.task == "regression" else "f1_x100"
        state.wall_seconds["total"] = round(time.perf_counter() - started, 2)
        extra = {"counts": state.counts, "wall_seconds": state.wall_seconds, "reused_fits": state.reused}
        write_tuning_report(state.run_dir, spec.name, state.tuning, tests, metric, extra)
    log.info("done: %s", state.run_dir / "tuning.md")
    return state.run_dir
