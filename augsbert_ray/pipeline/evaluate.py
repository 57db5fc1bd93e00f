"""The evaluation step: every model of the run, and the baselines, on the dev and test split."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from augsbert_ray.data import GoldData
from augsbert_ray.evaluation import Evaluation, evaluate_on_ray, gather, majority_baseline, metrics_from_scores, score_pairs_on_ray
from augsbert_ray.models import resolve_model
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.pipeline.teacher import CheckedTeacher


def evaluate_models(ctx: RunContext, checked: CheckedTeacher, bi_encoders: list[str], eval_set: GoldData) -> dict[str, Evaluation]:
    """Every model on the dev and test split, each scoring a Ray task: the teacher's models (and an ensemble
    teacher itself; on dev, the gate's scores), the bi-encoders in models/, the untrained zero-shot bi-encoder and
    the Jaccard baseline (and for classification the majority-class one)."""
    spec, task, teacher = ctx.spec, ctx.spec.evaluation_task, checked.teacher
    assert checked.dev is eval_set.dev, "the teacher gate scored another dev split"
    test_refs = {f"{Path(m.model).name} (test)": score_pairs_on_ray(m.kind, m.model, eval_set.test, spec.evaluation.cpus, spec.evaluation.gpus)
                 for m in teacher.members}
    compared = ["teacher_bi_encoder"] if spec.compares_teacher_bi_encoder else []
    jobs = {name: ("bi_encoder", str(ctx.layout.model(name))) for name in [*bi_encoders, *compared]}
    jobs["zero_shot"] = ("bi_encoder", resolve_model(spec.evaluation.zero_shot_model))
    jobs["jaccard"] = ("jaccard", None)
    refs = {name: evaluate_on_ray(kind, model, task, eval_set.dev, eval_set.test, spec.evaluation.cpus, spec.evaluation.gpus)
            for name, (kind, model) in jobs.items()}
    dev_labels, test_labels = (split.column("label").to_numpy() for split in (eval_set.dev, eval_set.test))
    gathered = gather({**test_refs, **refs}, "evaluate")
    test_scores = [np.asarray(gathered[name]) for name in test_refs]
    evaluations = {Path(m.model).name: metrics_from_scores(task, dev, dev_labels, test, test_labels, m.model)
                   for m, dev, test in zip(teacher.members, checked.dev_scores, test_scores)}
    if len(teacher.members) > 1:
        evaluations["teacher"] = metrics_from_scores(task, teacher.combine(checked.dev_scores), dev_labels,
                                                     teacher.combine(test_scores), test_labels, teacher.labeler)
    evaluations.update({name: gathered[name] for name in refs})
    if task == "classification":
        evaluations["majority"] = majority_baseline(dev_labels, test_labels)
    return evaluations
