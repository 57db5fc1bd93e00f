"""The teacher steps: the teacher's models fitted on gold (or copied when given trained), and the teacher gate that
calibrates the teacher and compares it with the gold-only student on dev before any labeling."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray

from augsbert_ray.config import BiEncoderSpec, JobSpec, SpecError
from augsbert_ray.data import GoldData
from augsbert_ray.evaluation import check_scores, dev_metric, gather, score_pairs_on_ray
from augsbert_ray.labeling import Teacher, TeacherMember
from augsbert_ray.layout import PROGRESS_FILE
from augsbert_ray.models import resolve_model
from augsbert_ray.pipeline.context import FitRecord, Fitted, RunContext
from augsbert_ray.pipeline.gold import Gold
from augsbert_ray.runtime import log
from augsbert_ray.training import fit_bi_encoder, fit_cross_encoder


def link_or_copy(source: str, target: str) -> None:
    """A hard link where the file system allows one, else a copy. A saved model's files are replaced, not rewritten,
    by the fits here (each writes a new directory); a folder overwritten in place by other tools would change the
    run's copy too, which the setting's description says."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def copy_trained_model(trained: Path, model_dir: Path, name: str) -> Fitted:
    """A teacher model given as already trained is copied, so the run directory stays whole (as hard links where
    possible: an mpnet teacher is 0.4 GB per run). When it comes from an earlier run, that run's progress.json says
    what it was trained on, under the model's own name there (an earlier run's SBERT may be this one's teacher)."""
    log.info("%s: copying the trained model at %s, no fit", name, trained)
    shutil.copytree(trained, model_dir, copy_function=link_or_copy)
    source = trained.resolve()
    source_progress = source.parent.parent / PROGRESS_FILE
    fits = json.loads(source_progress.read_text(encoding="utf-8")) if source_progress.is_file() else {}
    return Fitted(fits.get(source.name, {}).get("trained_on"))


def train_cross_encoder(ctx: RunContext, gold: Gold) -> FitRecord:
    spec, name = ctx.spec, "cross_encoder"
    model_dir = ctx.layout.model(name)

    def fit() -> Fitted:
        if spec.cross_encoder.trained:
            return copy_trained_model(Path(spec.cross_encoder.trained).expanduser(), model_dir, name)
        metrics = fit_cross_encoder(spec.cross_encoder, resolve_model(spec.cross_encoder.model), [gold.train_file], spec.training,
                                    spec.seed, ctx.layout.ray_train, model_dir)
        return Fitted.from_metrics(gold.splits.train.num_rows * (2 if spec.cross_encoder.both_orders else 1), metrics)

    return ctx.fit_once(name, fit)


def train_teacher_bi_encoder(ctx: RunContext, gold: Gold) -> FitRecord:
    """The bi-encoder teacher (teacher.bi_encoder, by default mpnet) fine-tuned on gold, into models/teacher_bi_encoder."""
    name, settings = "teacher_bi_encoder", ctx.spec.teacher.bi_encoder
    model_dir = ctx.layout.model(name)

    def fit() -> Fitted:
        if settings.trained:
            return copy_trained_model(Path(settings.trained).expanduser(), model_dir, name)
        fit_settings = BiEncoderSpec.model_validate(settings.model_dump(exclude={"trained"}))
        metrics = fit_bi_encoder(fit_settings, resolve_model(settings.model), [gold.train_file], ctx.spec.training,
                                 ctx.spec.seed, ctx.layout.ray_train, name, model_dir)
        return Fitted.from_metrics(int(metrics["train_rows"]), metrics)

    return ctx.fit_once(name, fit)


def train_teacher(ctx: RunContext, gold: Gold) -> tuple[Teacher, list[FitRecord]]:
    """The teacher's models fitted on the gold (in transfer: source) train split, each reused on resume: the
    cross-encoder, the bi-encoder teacher, or both (ensemble). Their scores are not mapped yet (see check_teacher).
    The fits also hold the bi-encoder teacher fitted only to be scored (evaluation.teacher_bi_encoder)."""
    fitters = {"cross_encoder": train_cross_encoder, "bi_encoder": train_teacher_bi_encoder}
    fits = {kind: fitters[kind](ctx, gold) for kind in ctx.spec.teacher.member_kinds}
    teacher = Teacher(tuple(TeacherMember(kind, str(fit.model_dir)) for kind, fit in fits.items()))
    compared = [train_teacher_bi_encoder(ctx, gold)] if ctx.spec.compares_teacher_bi_encoder else []
    return teacher, [*fits.values(), *compared]


def teacher_stage(spec: JobSpec) -> str:
    """The teacher's stage name in logs and wall_seconds: a cross-encoder's keeps the name it always had."""
    return "train cross-encoder" if spec.teacher.kind == "cross-encoder" else f"train the {spec.teacher.kind} teacher"


@dataclass(frozen=True)
class CheckedTeacher:
    """The teacher mapped onto the gold scale, the gate's record (metrics.json ``teacher``), and each of its
    models' raw scores of the dev split the gate used (evaluation reuses them)."""

    teacher: Teacher
    record: dict[str, Any]
    dev: pa.Table
    dev_scores: list[np.ndarray]


def score_members(spec: JobSpec, teacher: Teacher, table: pa.Table) -> list[np.ndarray]:
    """Each teacher model's raw scores of a table's pairs, one Ray task per model."""
    refs = [score_pairs_on_ray(m.kind, m.model, table, spec.evaluation.cpus, spec.evaluation.gpus) for m in teacher.members]
    return [np.asarray(scores) for scores in ray.get(refs)]


def calibrate_teacher(
    ctx: RunContext, teacher: Teacher, calibration: GoldData, scored: tuple[pa.Table, list[np.ndarray]] | None = None
) -> Teacher:
    """A bi-encoder or ensemble teacher's models mapped onto the gold scale, fitted on ``calibration``'s
    teacher.calibration split (``scored``: a split whose member scores are known); saved as models/teacher.json."""
    if teacher.kind != "cross-encoder":
        split = calibration.split(ctx.spec.teacher.calibration)
        scores = scored[1] if scored is not None and scored[0] is split else score_members(ctx.spec, teacher, split)
        teacher = teacher.calibrated(scores, split.column("label").to_numpy(), ctx.spec.teacher.calibration_map)
    teacher.save(ctx.layout.models)
    return teacher


def check_teacher(ctx: RunContext, teacher: Teacher, calibration: GoldData, student_dir: Path, dev: pa.Table) -> CheckedTeacher:
    """The teacher gate, before any labeling: calibrates the teacher (calibrate_teacher), then scores it and the
    gold-only student on ``dev``. A teacher that is not better warns, or with
    labeling.require_better_teacher stops the run: its silver labels would teach the student nothing it lacks."""
    spec = ctx.spec
    dev_labels = dev.column("label").to_numpy().astype(np.float64)
    refs = {Path(m.model).name: score_pairs_on_ray(m.kind, m.model, dev, spec.evaluation.cpus, spec.evaluation.gpus) for m in teacher.members}
    student_ref = score_pairs_on_ray("bi_encoder", str(student_dir), dev, spec.evaluation.cpus, spec.evaluation.gpus)
    gathered = gather({**refs, f"{student_dir.name} (student)": student_ref}, "teacher gate: dev scores")
    dev_scores = [np.asarray(gathered[name]) for name in refs]
    student_scores = np.asarray(gathered[f"{student_dir.name} (student)"])
    for model, scores in [*((m.model, s) for m, s in zip(teacher.members, dev_scores)), (str(student_dir), student_scores)]:
        check_scores(scores, f"teacher gate: {model}: dev split")  # before: a NaN gate let a diverged teacher label
    teacher = calibrate_teacher(ctx, teacher, calibration, scored=(dev, dev_scores))
    teacher_dev = dev_metric(spec.evaluation_task, teacher.combine(dev_scores), dev_labels)
    student_dev = dev_metric(spec.evaluation_task, student_scores, dev_labels)
    record = {
        "kind": teacher.kind, "labeler": teacher.labeler, "teacher_dev": round(teacher_dev, 4),
        "student": student_dir.name, "student_dev": round(student_dev, 4), "better": teacher_dev > student_dev,
        "members": [{"kind": m.kind, "model": Path(m.model).name, "scale": m.scale, "shift": m.shift} for m in teacher.members],
    }
    verdict = (f"teacher ({teacher.kind}) dev {teacher_dev:.2f} vs {student_dir.name} (gold only) dev {student_dev:.2f}: "
               f"{'better' if teacher_dev > student_dev else 'NOT better'} by {teacher_dev - student_dev:+.2f}")
    if teacher_dev > student_dev:
        log.info("teacher gate: %s", verdict)
    elif spec.labeling.require_better_teacher:
        raise SpecError(f"teacher gate: {verdict}; silver labels from it would not help (labeling.require_better_teacher)")
    else:
        log.warning("teacher gate: %s; its silver labels are unlikely to help (a stronger teacher: teacher.kind, cross_encoder.model)", verdict)
    return CheckedTeacher(teacher, record, dev, dev_scores)


