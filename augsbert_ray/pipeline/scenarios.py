"""One declared list of steps per scenario: in-domain, domain transfer, retrieval, and a tuning run (``augsbert tune``).

Each step is a function of the run context and, by parameter name, of what earlier steps made (see steps.py);
the last step turns what they made into the run's ``RunResult`` and writes its files (result.py)."""

from __future__ import annotations

from typing import Any

import ray

from augsbert_ray.config import JobSpec, SpecError
from augsbert_ray.evaluation import Evaluation, evaluate_on_ray
from augsbert_ray.labeling import Teacher
from augsbert_ray.layout import bi_encoder_name
from augsbert_ray.pipeline.context import FitRecord, RunContext
from augsbert_ray.pipeline.evaluate import evaluate_models
from augsbert_ray.pipeline.gold import Gold, read_gold, read_target, train_labels
from augsbert_ray.pipeline.result import RunResult, write_outputs
from augsbert_ray.pipeline.retrieval import (
    distil_student, evaluate_rankers, find_candidates, knrm_on, label_candidates, train_gold_sbert, train_knrm, train_reranker,
)
from augsbert_ray.pipeline.retrieval_data import read_retrieval
from augsbert_ray.pipeline.retrieval_report import report_retrieval
from augsbert_ray.pipeline.silver import (
    CandidateSource, Silver, check_candidates, given_target_pairs, make_silver, silver_by_top_k, silver_dirs_by_k,
    transfer_reference_labels, tuning_silver_counts, with_sampling,
)
from augsbert_ray.pipeline.steps import Step
from augsbert_ray.pipeline.students import fit_strategy, train_bi_encoder
from augsbert_ray.pipeline.teacher import CheckedTeacher, check_teacher, teacher_stage, train_teacher
from augsbert_ray.tuning import strategy_of

# -- in-domain ----------------------------------------------------------------------------------------------------


def read_in_domain(ctx: RunContext) -> tuple[Gold, CandidateSource]:
    gold = read_gold(ctx)
    candidate_source = CandidateSource.in_domain(gold.splits)
    check_candidates(ctx.spec, candidate_source)
    return gold, candidate_source


def train_sbert(ctx: RunContext, gold: Gold) -> FitRecord:
    # before sampling: semantic search embeds with the gold-trained bi-encoder, as in the paper
    return train_bi_encoder(ctx, "sbert", [gold.train_file], fit_strategy(ctx, "sbert"))


def gate_in_domain(ctx: RunContext, teacher: Teacher, gold: Gold, sbert: FitRecord) -> CheckedTeacher:
    return check_teacher(ctx, teacher, gold.splits, sbert.model_dir, gold.splits.dev)


def label_in_domain(
    ctx: RunContext, candidate_source: CandidateSource, checked: CheckedTeacher, sbert: FitRecord, gold: Gold
) -> tuple[Silver, dict[int, Silver]]:
    silver = make_silver(ctx.spec, ctx.layout, candidate_source, checked.teacher, sbert.model_dir)
    return silver, silver_by_top_k(ctx, gold.splits, checked.teacher, sbert.model_dir, silver)


def train_augsbert(ctx: RunContext, gold: Gold, silver: Silver, silver_by_k: dict[int, Silver]) -> list[FitRecord]:
    trial_silver = silver_dirs_by_k(silver_by_k)
    return [train_bi_encoder(ctx, name, [gold.train_file, *silver_set.train_files()], fit_strategy(ctx, name, trial_silver))
            for strategy, silver_set in silver.sets.items() for name in [bi_encoder_name(strategy)]]


def evaluate_in_domain(ctx: RunContext, checked: CheckedTeacher, sbert: FitRecord, augsbert: list[FitRecord], gold: Gold) -> dict[str, Evaluation]:
    return evaluate_models(ctx, checked, [fit.name for fit in [sbert, *augsbert]], gold.splits)


def report_in_domain(
    ctx: RunContext, gold: Gold, teacher_fits: list[FitRecord], sbert: FitRecord, augsbert: list[FitRecord], silver: Silver,
    silver_by_k: dict[int, Silver], checked: CheckedTeacher, evaluations: dict[str, Evaluation], wall_seconds: dict[str, float],
) -> RunResult:
    fits = [*teacher_fits, sbert, *augsbert]
    result = run_result(ctx, gold.counts, fits, silver, tuning_silver_counts(silver_by_k, silver), checked, evaluations, wall_seconds)
    return write_outputs(result, ctx.spec, train_labels(gold.splits), silver.histograms())


IN_DOMAIN = (
    Step(("gold", "candidate_source"), "read gold data", read_in_domain),
    Step(("teacher", "teacher_fits"), teacher_stage, train_teacher),
    Step("sbert", "train SBERT on gold", train_sbert),
    Step("checked", "teacher gate: teacher vs SBERT on dev", gate_in_domain),
    Step(("silver", "silver_by_k"), "sample and label candidates", label_in_domain),
    Step("augsbert", "train AugSBERT bi-encoders", train_augsbert),
    Step("evaluations", "evaluate", evaluate_in_domain),
    Step("result", "report", report_in_domain),
)

# -- domain transfer ----------------------------------------------------------------------------------------------


def read_transfer(ctx: RunContext) -> tuple[Gold, Gold, CandidateSource | None]:
    assert ctx.spec.target is not None
    target = read_target(ctx)
    source = read_gold(ctx, target)  # its train without the target's dev and test pairs
    candidate_source = None
    if ctx.spec.target.candidates == "sentences":
        candidate_source = CandidateSource.target(ctx.spec, target.splits, source.splits)
        check_candidates(ctx.spec, candidate_source)
    return source, target, candidate_source


def train_sbert_source(ctx: RunContext, source: Gold, target: Gold) -> tuple[FitRecord, FitRecord | None]:
    sbert_source = train_bi_encoder(ctx, "sbert_source", [source.train_file], fit_strategy(ctx, "sbert_source"))
    # the upper bound: what target labels would give
    sbert_target = (train_bi_encoder(ctx, "sbert_target", [target.train_file], fit_strategy(ctx, "sbert_target"))
                    if target.splits.train.num_rows else None)
    return sbert_source, sbert_target


def gate_transfer(ctx: RunContext, teacher: Teacher, source: Gold, target: Gold, sbert_source: FitRecord) -> CheckedTeacher:
    # mapped onto the source's gold scale, compared where the silver labels will be used
    return check_teacher(ctx, teacher, source.splits, sbert_source.model_dir, target.splits.dev)


def label_transfer(
    ctx: RunContext, target: Gold, candidate_source: CandidateSource | None, checked: CheckedTeacher, sbert_source: FitRecord
) -> Silver:
    if candidate_source is None:
        return given_target_pairs(ctx.spec, ctx.layout, target.splits, checked.teacher)
    return make_silver(ctx.spec, ctx.layout, candidate_source, checked.teacher, sbert_source.model_dir)


def train_augsbert_on_silver(ctx: RunContext, silver: Silver) -> list[FitRecord]:
    # silver alone: the target has no gold to add
    return [train_bi_encoder(ctx, name, silver_set.train_files(), fit_strategy(ctx, name))
            for strategy, silver_set in silver.sets.items()
            for name in ["augsbert" if strategy == "given" else bi_encoder_name(strategy)]]


def evaluate_transfer(
    ctx: RunContext, checked: CheckedTeacher, sbert_source: FitRecord, sbert_target: FitRecord | None, augsbert: list[FitRecord],
    target: Gold,
) -> dict[str, Evaluation]:
    students = [sbert_source, *([sbert_target] if sbert_target else []), *augsbert]
    return evaluate_models(ctx, checked, [fit.name for fit in students], target.splits)


def report_transfer(
    ctx: RunContext, source: Gold, target: Gold, teacher_fits: list[FitRecord], sbert_source: FitRecord,
    sbert_target: FitRecord | None, augsbert: list[FitRecord], silver: Silver, checked: CheckedTeacher,
    evaluations: dict[str, Evaluation], wall_seconds: dict[str, float],
) -> RunResult:
    fits = [*teacher_fits, sbert_source, *([sbert_target] if sbert_target else []), *augsbert]
    result = run_result(ctx, {**source.counts, **target.counts}, fits, silver, {}, checked, evaluations, wall_seconds)
    return write_outputs(result, ctx.spec, transfer_reference_labels(target.splits, source.splits), silver.histograms())


def teacher_on_source_stage(spec: JobSpec) -> str:
    return teacher_stage(spec) + " on the source"


def train_teacher_on_source(ctx: RunContext, source: Gold) -> tuple[Teacher, list[FitRecord]]:
    return train_teacher(ctx, source)


DOMAIN_TRANSFER = (
    Step(("source", "target", "candidate_source"), "read source and target data", read_transfer),
    Step(("teacher", "teacher_fits"), teacher_on_source_stage, train_teacher_on_source),
    Step(("sbert_source", "sbert_target"), "train SBERT on source gold (and target gold)", train_sbert_source),
    Step("checked", "teacher gate: teacher vs SBERT-source on the target dev", gate_transfer),
    Step("silver", "sample and label target candidates", label_transfer),
    Step("augsbert", "train AugSBERT on target silver", train_augsbert_on_silver),
    Step("evaluations", "evaluate on the target", evaluate_transfer),
    Step("result", "report", report_transfer),
)


# -- retrieval: a corpus, few gold queries, many unlabeled ones (pipeline/retrieval.py) ------------------------------

RETRIEVAL = (
    Step("rdata", "read retrieval data", read_retrieval),
    Step(("teacher", "teacher_fits", "mined"), "mine hard negatives and train the re-ranker teacher", train_reranker),
    Step("sbert", "train SBERT on gold (MNRL + hard negatives)", train_gold_sbert),
    Step("candidates", "first-stage candidates for the unlabeled queries", find_candidates),
    Step("silver", "label (query, candidate) pairs with the teacher", label_candidates),
    Step("student", "distil the AugSBERT student", distil_student),
    Step("knrm", "train KNRM on gold", train_knrm, when=knrm_on),
    Step("evaluation", "evaluate the rankers", evaluate_rankers),
    Step("result", "report", report_retrieval),
)


def run_result(
    ctx: RunContext, gold_counts: dict[str, Any], fits: list[FitRecord], silver: Silver, tuning_counts: dict[str, Any],
    checked: CheckedTeacher, evaluations: dict[str, Evaluation], wall_seconds: dict[str, float],
) -> RunResult:
    counts = {**gold_counts, "trained_on": {fit.name: fit.trained_on for fit in fits}, **silver.counts(),
              **({"tuning_silver": tuning_counts} if tuning_counts else {})}
    return RunResult(
        ctx.layout.root, ctx.spec.evaluation_task, evaluations, {fit.name: fit for fit in fits}, counts, wall_seconds,
        checked.record, {strategy: silver_set.diagnostics for strategy, silver_set in silver.sets.items()},
        dict(ctx.ledger.reused),
    )


# -- tuning (`augsbert tune`) -------------------------------------------------------------------------------------


def check_tunable(spec: JobSpec) -> None:
    """A tuning run needs the spec's ``tuning`` section."""
    if spec.tuning is None:
        raise SpecError("augsbert tune needs a 'tuning' section in the job spec (e.g. tuning: {seeds: 5})")


def tuned_strategies(spec: JobSpec) -> list[str]:
    """The sampling strategies of the tuned AugSBERT models: silver is made for these alone."""
    return [strategy_of(spec, model) for model in spec.tuned_models() if model != "sbert"]


def tunes_augsbert(spec: JobSpec) -> bool:
    return bool(tuned_strategies(spec))


def needs_sbert(spec: JobSpec) -> bool:
    # silver needs SBERT as `augsbert run` does: the gate compares the teacher with it, semantic search embeds with it
    return "sbert" in spec.tuned_models() or tunes_augsbert(spec)


def read_for_tuning(ctx: RunContext) -> tuple[Gold, CandidateSource]:
    gold = read_gold(ctx)
    candidate_source = CandidateSource.in_domain(gold.splits)
    if strategies := tuned_strategies(ctx.spec):
        check_candidates(with_sampling(ctx.spec, strategies=strategies), candidate_source)
    return gold, candidate_source


def label_for_tuning(
    ctx: RunContext, candidate_source: CandidateSource, checked: CheckedTeacher, sbert: FitRecord, gold: Gold
) -> tuple[Silver, dict[int, Silver]]:
    spec = ctx.spec
    plain = [s for s in tuned_strategies(spec) if spec.tuning_top_ks(bi_encoder_name(s)) == [None]]
    made = make_silver(with_sampling(spec, strategies=plain), ctx.layout, candidate_source, checked.teacher, sbert.model_dir) if plain else Silver({})
    return made, silver_by_top_k(ctx, gold.splits, checked.teacher, sbert.model_dir, made)


def tune_augsbert(ctx: RunContext, gold: Gold, silver: Silver, silver_by_k: dict[int, Silver]) -> list[FitRecord]:
    trial_silver = silver_dirs_by_k(silver_by_k)
    fits = []
    for strategy in tuned_strategies(ctx.spec):
        name = bi_encoder_name(strategy)
        default = [gold.train_file, *silver.sets[strategy].train_files()] if strategy in silver.sets else [gold.train_file]
        fits.append(train_bi_encoder(ctx, name, default, fit_strategy(ctx, name, trial_silver)))
    return fits


def report_tuning(
    ctx: RunContext, gold: Gold, teacher_fits: list[FitRecord] | None, sbert: FitRecord | None, augsbert: list[FitRecord] | None,
    silver: Silver | None, silver_by_k: dict[int, Silver] | None, checked: CheckedTeacher | None, wall_seconds: dict[str, float],
) -> RunResult:
    spec = ctx.spec
    fits = [*(teacher_fits or []), *([sbert] if sbert else []), *(augsbert or [])]
    searched = [fit.name for fit in fits if fit.tuning is not None]
    refs = {name: evaluate_on_ray("bi_encoder", str(ctx.layout.model(name)), spec.task, gold.splits.dev, gold.splits.test,
                                  spec.evaluation.cpus, spec.evaluation.gpus) for name in searched}
    evaluations = dict(zip(refs, ray.get(list(refs.values()))))
    made = silver or Silver({})
    counts = {**gold.counts, "trained_on": {fit.name: fit.trained_on for fit in fits}, **(made.counts() if made.sets else {}),
              **({"tuning_silver": tuning} if (tuning := tuning_silver_counts(silver_by_k or {}, made)) else {})}
    result = RunResult(ctx.layout.root, spec.task, evaluations, {fit.name: fit for fit in fits}, counts, wall_seconds,
                       checked.record if checked else None, reused_fits=dict(ctx.ledger.reused), tuned=True)
    return write_outputs(result, spec)


def sbert_tuning_stage(spec: JobSpec) -> str:
    return "tune SBERT" if "sbert" in spec.tuned_models() else "train SBERT on gold"


TUNING = (
    Step(("gold", "candidate_source"), "read gold data", read_for_tuning),
    Step(("teacher", "teacher_fits"), teacher_stage, train_teacher, when=tunes_augsbert),
    Step("sbert", sbert_tuning_stage, train_sbert, when=needs_sbert),
    Step("checked", "teacher gate: teacher vs SBERT on dev", gate_in_domain, when=tunes_augsbert),
    Step(("silver", "silver_by_k"), "sample and label candidates", label_for_tuning, when=tunes_augsbert),
    Step("augsbert", "tune AugSBERT bi-encoders", tune_augsbert, when=tunes_augsbert),
    Step("result", "evaluate and report", report_tuning),
)


def scenario_steps(spec: JobSpec, tuning: bool = False) -> tuple[Step, ...]:
    """The steps of the spec's scenario (``tuning``: of ``augsbert tune``)."""
    if tuning:
        return TUNING
    return {"domain-transfer": DOMAIN_TRANSFER, "retrieval": RETRIEVAL}.get(spec.scenario, IN_DOMAIN)
