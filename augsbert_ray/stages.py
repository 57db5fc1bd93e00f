"""The stages a run is composed of, and the typed values they return.

gold (``Gold``) -> teacher (``Teacher``, with its ``Fit`` records) -> SBERT (``Fit``) -> teacher gate
(``CheckedTeacher``) -> candidates and silver labels (``Silver`` of ``SilverSet``) -> AugSBERT bi-encoders (``Fit``)
-> evaluation (``Evaluation`` per model). Each stage reads what it needs from its arguments and returns what it made;
`augsbert_ray.pipeline` composes them into the in-domain and transfer runs, `augsbert_ray.tune_job` into a search.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from augsbert_ray.config import TOP_K_STRATEGIES, BiEncoderSpec, DataSpec, JobSpec, SamplingSpec, SpecError
from augsbert_ray.data import GoldData, check_gold_usable, check_reject_fractions, load_gold, read_sentences, write_rejects
from augsbert_ray.evaluation import (
    Evaluation, check_scores, dev_metric, evaluate_on_ray, majority_baseline, metrics_from_scores, score_pairs_on_ray,
)
from augsbert_ray.files import atomic_write_text
from augsbert_ray.labeling import LabelJob, Teacher, TeacherMember, label_dataset, labels_in_process
from augsbert_ray.layout import PROGRESS_FILE, RunLayout, TrainFile, bi_encoder_name, silver_files
from augsbert_ray.models import resolve_model
from augsbert_ray.runtime import log
from augsbert_ray.sampling import (
    Neighbours, SentencePool, available_pairs, candidate_table, given_pairs, sample_bm25, shares_a_term,
)
from augsbert_ray.sampling.neighbours import check_top_k
from augsbert_ray.selection import (
    accepted_rows, read_silver, score_histogram, select, silver_diagnostics, thin_silver_warning, write_silver,
)
from augsbert_ray.training import fit_bi_encoder, fit_cross_encoder
from augsbert_ray.tuning.search import Outcome
from augsbert_ray.tuning.trial_loop import cull_step, total_steps
from augsbert_ray.tuning.stage import SilverByK, searched_fit

# BM25 runs first: random sampling and the KDE pool are sized from its candidate count.
STRATEGY_ORDER = ("bm25", "random", "kde", "semantic", "bm25+semantic")


@dataclass
class FitLedger:
    """The fits a run has finished (progress.json), so that a resumed run reuses them instead of fitting again."""

    layout: RunLayout
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)  # model name -> record, as in progress.json
    reused: dict[str, float] = field(default_factory=dict)  # fits an earlier attempt made -> the seconds they took then

    @classmethod
    def read(cls, layout: RunLayout) -> FitLedger:
        finished = json.loads(layout.progress.read_text(encoding="utf-8")) if layout.progress.exists() else {}
        return cls(layout, finished)

    def write(self) -> None:
        atomic_write_text(self.layout.progress, json.dumps(self.finished, indent=1))

    def fit_once(self, name: str, keep_training_state: bool, fit: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Fit models/<name>, or reuse it when an earlier attempt at this run finished it."""
        record = self.finished.get(name)
        if record is not None and self.layout.model(name).is_dir():
            log.info("resume: reusing models/%s, fitted by an earlier attempt in %.0fs", name, record["wall_seconds"])
            self.reused[name] = record["wall_seconds"]
            return record
        remove_unfinished_fit(self.layout, name, keep_training_state)
        started = time.perf_counter()
        record = fit()
        seconds = time.perf_counter() - started
        if record.pop("reused", False):  # Ray Train kept the final model of an attempt stopped before recording it
            seconds = record.pop("train_seconds")
            log.info("resume: %s had finished in an earlier attempt (%.0fs of training); its model is reused", name, seconds)
            self.reused[name] = seconds
        record = {**record, "wall_seconds": round(seconds, 2)}
        self.finished[name] = record
        self.write()
        return record


def fit_record(trained_on: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """What a fit gives ``FitLedger.fit_once``: the pairs it learned from, and, where Ray Train only reported again
    the final model of an earlier attempt (``metrics`` "reused"), that attempt's training seconds."""
    reused = {"reused": True, "train_seconds": metrics.get("train_seconds", 0.0)} if metrics.get("reused") else {}
    return {"trained_on": trained_on, **reused}


def remove_unfinished_fit(layout: RunLayout, name: str, keep_training_state: bool) -> None:
    """Clear what an unfinished fit left. Ray Train restores the earlier attempt's checkpoints, found by run
    name: kept when ``keep_training_state`` (training.checkpoint_every), so the fit goes on from its last
    training state, else removed so that it starts over. A search always starts over: Ray Tune would mix its
    trials with the earlier ones."""
    tune_dir = layout.ray_tune
    leftovers = [layout.model(name), *tune_dir.glob(f"{name}-*"), *(tune_dir / "ray_train").glob(f"{name}-*"),
                 *(tune_dir / "stop").glob(f"{name}-*"), *([] if keep_training_state else [layout.ray_train / name])]
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


@dataclass(frozen=True)
class RunContext:
    """What every stage of one run shares: its spec, its directory and the record of its finished fits."""

    spec: JobSpec
    layout: RunLayout
    ledger: FitLedger

    @classmethod
    def open(cls, spec: JobSpec, run_dir: Path) -> RunContext:
        """The context of a run directory, with the fits its progress.json records."""
        layout = RunLayout(run_dir)
        return cls(spec, layout, FitLedger.read(layout))

    def fit_once(self, name: str, fit: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return self.ledger.fit_once(name, self.spec.training.checkpoint_every is not None, fit)


class StageClock:
    """Numbers the stages in the log and times each into ``seconds`` (metrics.json ``wall_seconds``)."""

    def __init__(self, total: int) -> None:
        self.total, self.number, self.started = total, 0, time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.number += 1
        log.info("[stage %d/%d] %s ...", self.number, self.total, name)
        start = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - start, 2)
        log.info("[stage %d/%d] %s done in %.1fs", self.number, self.total, name, self.seconds[name])

    def with_total(self) -> dict[str, float]:
        return {**self.seconds, "total": round(time.perf_counter() - self.started, 2)}


# -- gold ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gold:
    """Gold (or source, or target) splits as read, with their counts for metrics.json and the train file fits read."""

    splits: GoldData
    counts: dict[str, Any]
    train_file: TrainFile


def read_gold(ctx: RunContext, data_dir: str | Path | None, target: Gold | None = None) -> Gold:
    """The gold (in-domain) or source (transfer) pairs, into gold/ with rejects.jsonl and counts; a source's train
    holds none of the ``target``'s dev and test pairs (per data.on_overlap)."""
    held_out = {f"target_{split}": target.splits.split(split) for split in ("dev", "test")} if target is not None else None
    gold = read_splits(ctx, ctx.spec.data, data_dir, "gold", "", held_out)
    check_gold_usable(gold.splits, ctx.spec)
    check_sbert_cullable(ctx.spec, gold.splits.train.num_rows)
    return gold


def check_sbert_cullable(spec: JobSpec, train_rows: int) -> None:
    """A seed search of SBERT needs a cull step; checked on reading gold, not after the teacher's fit. (An AugSBERT
    search adds silver to these pairs, so gold alone cannot refuse it.)"""
    if spec.tuning is not None and "sbert" in spec.tuned_models():
        try:
            cull_step(total_steps(train_rows, spec.bi_encoder.batch_size, spec.bi_encoder.epochs), spec.tuning.cull_at)
        except ValueError as exc:
            raise SpecError(f"tuning of sbert on {train_rows} gold train pairs (bi_encoder.batch_size="
                            f"{spec.bi_encoder.batch_size}, epochs={spec.bi_encoder.epochs}): {exc}") from None


def read_target(ctx: RunContext, data_dir: str | Path | None) -> Gold:
    """The transfer target's splits, into target/ with target_rejects.jsonl and target_* counts."""
    assert ctx.spec.target is not None
    target = read_splits(ctx, ctx.spec.target.data, data_dir, "target", "target_")
    check_gold_usable(target.splits, ctx.spec, target=True)
    return target


def read_splits(
    ctx: RunContext, data: DataSpec, data_dir: str | Path | None, folder: str, prefix: str, held_out: dict[str, pa.Table] | None = None
) -> Gold:
    gold = load_gold(data, ctx.spec.seed, data_dir, held_out)
    rejects_path = ctx.layout.rejects(prefix)
    write_rejects(gold.rejects, rejects_path)
    counts = {
        f"{prefix}rows_read": gold.rows_read,
        f"{prefix}rejected": len(gold.rejects),
        f"{prefix}accepted": gold.rows_read - len(gold.rejects),
        f"{prefix or 'gold_'}train_before_limit": gold.train_before_limit,
        f"{prefix or 'gold_'}train": gold.train.num_rows,
        f"{prefix or 'gold_'}dev": gold.dev.num_rows,
        f"{prefix or 'gold_'}test": gold.test.num_rows,
        **gold.cleaning_counts(prefix or "gold_"),
    }
    check_reject_fractions(gold, data.max_reject_fraction, rejects_path, folder, f"{prefix.replace('_', '.')}data.max_reject_fraction")
    ctx.layout.split(folder, "train").parent.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        pq.write_table(gold.split(split), ctx.layout.split(folder, split))
    return Gold(gold, counts, ctx.layout.train_file(folder))


def train_labels(gold: GoldData) -> np.ndarray:
    return gold.train.column("label").to_numpy().astype(np.float64)


# -- fits ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """A model the run fitted (or reused, or copied): where it is, the pairs it learned from, and its search."""

    name: str
    model_dir: Path
    trained_on: int | None
    tuning: Outcome | None = None


def link_or_copy(source: str, target: str) -> None:
    """A hard link where the file system allows one, else a copy. A saved model's files are replaced, not rewritten,
    by the fits here (each writes a new directory); a folder overwritten in place by other tools would change the
    run's copy too, which the setting's description says."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def copy_trained_model(trained: Path, model_dir: Path, name: str) -> dict[str, Any]:
    """A teacher model given as already trained is copied, so the run directory stays whole (as hard links where
    possible: an mpnet teacher is 0.4 GB per run). When it comes from an earlier run, that run's progress.json says
    what it was trained on, under the model's own name there (an earlier run's SBERT may be this one's teacher)."""
    log.info("%s: copying the trained model at %s, no fit", name, trained)
    shutil.copytree(trained, model_dir, copy_function=link_or_copy)
    source = trained.resolve()
    source_progress = source.parent.parent / PROGRESS_FILE
    fits = json.loads(source_progress.read_text(encoding="utf-8")) if source_progress.is_file() else {}
    return {"trained_on": fits.get(source.name, {}).get("trained_on")}


def train_cross_encoder(ctx: RunContext, gold: Gold) -> Fit:
    spec, name = ctx.spec, "cross_encoder"
    model_dir = ctx.layout.model(name)

    def fit() -> dict[str, Any]:
        if spec.cross_encoder.trained:
            return copy_trained_model(Path(spec.cross_encoder.trained).expanduser(), model_dir, name)
        metrics = fit_cross_encoder(spec.cross_encoder, resolve_model(spec.cross_encoder.model), [gold.train_file], spec.training,
                                    spec.seed, ctx.layout.ray_train, model_dir)
        return fit_record(gold.splits.train.num_rows * (2 if spec.cross_encoder.both_orders else 1), metrics)

    return Fit(name, model_dir, ctx.fit_once(name, fit)["trained_on"])


def train_teacher_bi_encoder(ctx: RunContext, gold: Gold) -> Fit:
    """The bi-encoder teacher (teacher.bi_encoder, by default mpnet) fine-tuned on gold, into models/teacher_bi_encoder."""
    name, settings = "teacher_bi_encoder", ctx.spec.teacher.bi_encoder
    model_dir = ctx.layout.model(name)

    def fit() -> dict[str, Any]:
        if settings.trained:
            return copy_trained_model(Path(settings.trained).expanduser(), model_dir, name)
        fit_settings = BiEncoderSpec.model_validate(settings.model_dump(exclude={"trained"}))
        metrics = fit_bi_encoder(fit_settings, resolve_model(settings.model), [gold.train_file], ctx.spec.training,
                                 ctx.spec.seed, ctx.layout.ray_train, name, model_dir)
        return fit_record(int(metrics["train_rows"]), metrics)

    return Fit(name, model_dir, ctx.fit_once(name, fit)["trained_on"])


def train_teacher(ctx: RunContext, gold: Gold) -> tuple[Teacher, list[Fit]]:
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


# A student's fit: plain, or a seed (and top-k) search whose chosen trial lands in models/<name>.
StudentFitter = Callable[[RunContext, str, list[TrainFile]], dict[str, Any]]


def plain_fit(ctx: RunContext, name: str, files: list[TrainFile]) -> dict[str, Any]:
    spec = ctx.spec
    metrics = fit_bi_encoder(spec.bi_encoder, resolve_model(spec.bi_encoder.model), files, spec.training, spec.seed,
                             ctx.layout.ray_train, name, ctx.layout.model(name))
    return fit_record(int(metrics["train_rows"]), metrics)  # rows after selection's `accepted` filter


def student_fitter(spec: JobSpec, name: str, silver_by_k: SilverByK | None = None) -> StudentFitter:
    """The fit a bi-encoder gets: a search when the spec tunes it (tuning.models), else a plain fit."""
    if name not in spec.tuned_models():
        return plain_fit
    search = searched_fit(silver_by_k or {})
    return lambda ctx, model, files: search(ctx.spec, ctx.layout, model, files)


def train_bi_encoder(ctx: RunContext, name: str, files: list[TrainFile], fitter: StudentFitter) -> Fit:
    record = ctx.fit_once(name, lambda: fitter(ctx, name, files))
    tuning = Outcome.from_state(record["tuning"]) if "tuning" in record else None
    return Fit(name, ctx.layout.model(name), record["trained_on"], tuning)


# -- teacher gate -------------------------------------------------------------------------------------------------


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
    student_ref = score_pairs_on_ray("bi_encoder", str(student_dir), dev, spec.evaluation.cpus, spec.evaluation.gpus)
    dev_scores = score_members(spec, teacher, dev)
    student_scores = np.asarray(ray.get(student_ref))
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


# -- candidates and silver ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateSource:
    """What candidates are drawn from: a sentence pool, the pairs that must never be candidates, and the
    gold labels that KDE selection and the diagnostics compare the silver scores with."""

    pool: SentencePool
    excluded: np.ndarray
    gold_labels: np.ndarray

    @classmethod
    def in_domain(cls, gold: GoldData) -> CandidateSource:
        """Gold-train sentences recombined; no gold pair (train, dev or test) is a candidate."""
        pool = SentencePool.from_pairs(gold.train)
        return cls(pool, pool.gold_codes([gold.train, gold.dev, gold.test]), train_labels(gold))

    @classmethod
    def target(cls, spec: JobSpec, target: GoldData, source: GoldData) -> CandidateSource:
        """Target sentences (target.sentences, else the target's train pairs) to recombine; dev and test pairs
        are never candidates. Diagnostics compare with the target's gold labels when it has them."""
        assert spec.target is not None
        if spec.target.sentences is not None:
            pool = SentencePool(read_sentences(spec.target.sentences, "target.sentences"))
        else:
            pool = SentencePool.from_pairs(target.train)
        return cls(pool, pool.gold_codes([target.dev, target.test]), transfer_reference_labels(target, source))


def check_candidates(spec: JobSpec, source: CandidateSource) -> None:
    """What sampling asks of the pool, checked before any fit (it used to fail after the teacher and SBERT fits):
    every top_k (tuning's too) below the pool's size, a term two sentences share where BM25 samples or sizes the
    random pools, random_pairs and kde_pool within its pairs that are not gold.

    Example:
        ::

            check_candidates(spec, CandidateSource.in_domain(gold))  # or ValueError / SpecError naming the setting
    """
    sampling, strategies = spec.sampling, set(spec.sampling.strategies)
    drawn = bool(strategies & {"random", "kde"})
    if strategies & TOP_K_STRATEGIES or (drawn and sampling.random_pairs is None):  # BM25 sizes the random pools
        check_top_k(source.pool, sampling.top_k)
    sized_by_bm25 = drawn and sampling.random_pairs is None
    if ("bm25" in strategies or sized_by_bm25) and not shares_a_term(source.pool.sentences):
        raise SpecError(
            f"sampling: no two of the {len(source.pool)} sentences share a word BM25 indexes (stopwords and unsegmented "
            "text are no words to it), so BM25 finds no pair"
            + ("; random and KDE pools are sized from BM25's pairs: set sampling.random_pairs" if sized_by_bm25 else "")
            + ("; drop bm25 from sampling.strategies" if "bm25" in strategies else "")
        )
    for k in (spec.tuning.top_k or []) if spec.tuning else []:
        check_top_k(source.pool, k, "tuning.top_k")
    if not drawn:
        return
    available = available_pairs(source.pool, source.excluded)
    if available == 0:
        raise SpecError(f"sampling.strategies {'/'.join(sorted(strategies & {'random', 'kde'}))}: the {len(source.pool)} sentences "
                        "make no pair that is not a gold pair")
    for setting, asked in (("random_pairs", sampling.random_pairs), ("kde_pool", sampling.kde_pool if "kde" in strategies else None)):
        if asked is not None and asked > available:
            raise SpecError(f"sampling.{setting} {asked}: the {len(source.pool)} sentences make only {available} pairs that are not gold")


def transfer_reference_labels(target: GoldData, source: GoldData) -> np.ndarray:
    """The gold labels silver scores are compared with in transfer: the target's, else the source's."""
    return train_labels(target) if target.train.num_rows else train_labels(source)


@dataclass(frozen=True)
class SilverSet:
    """One strategy's silver pairs: the training files' directory (for KDE, the selected set), how many candidates
    were labeled, and the kept scores' histogram and diagnostics."""

    strategy: str
    directory: Path
    candidates: int
    labeled: int
    histogram: np.ndarray
    diagnostics: dict[str, float | int]

    @property
    def kept(self) -> int:
        return int(self.diagnostics["kept"])

    def train_files(self) -> list[TrainFile]:
        return silver_files(self.directory)


@dataclass(frozen=True)
class Silver:
    """Every strategy's silver set, the size of the sentence pool they were drawn from, and (transfer) the
    counts of the target pairs used as given."""

    sets: dict[str, SilverSet]
    sentences: int | None = None
    given_pairs: dict[str, int] | None = None

    def counts(self) -> dict[str, Any]:
        """metrics.json ``counts`` entries: sentences, candidates = labeled + label_rejected, and kept per strategy,
        given_pairs."""
        return {
            **({"sentences": self.sentences} if self.sentences is not None else {}),
            "candidates": {s: silver.candidates for s, silver in self.sets.items()},
            "labeled": {s: silver.labeled for s, silver in self.sets.items()},
            # the labeling engine's pairs_in = labeled + rejected, pairs_in being the candidates (its _rejects.jsonl says why)
            "label_rejected": {s: silver.candidates - silver.labeled for s, silver in self.sets.items()},
            "kept": {s: silver.kept for s, silver in self.sets.items()},
            **({"given_pairs": self.given_pairs} if self.given_pairs is not None else {}),
        }

    def histograms(self) -> dict[str, np.ndarray]:
        return {strategy: silver.histogram for strategy, silver in self.sets.items()}


def random_pool_sizes(sampling: SamplingSpec, pool: SentencePool, excluded: np.ndarray, found: dict[str, Neighbours]) -> dict[str, int]:
    """Pairs drawn by random sampling and for the KDE pool: as requested, else as many as BM25 makes (and 10x that
    for KDE), capped by the pool. BM25 searches even when it is not a strategy of the run, so that a run of some
    strategies draws the pools that a run of all of them draws; its neighbours go into ``found`` (candidate_table's),
    for a bm25+semantic of the same run not to search again."""
    available = available_pairs(pool, excluded)
    n_random = sampling.random_pairs
    if n_random is None:
        if "bm25" not in found:
            found["bm25"] = sample_bm25(pool, sampling.top_k, excluded, sampling.bm25_shard_size, sampling.search_cpus)
        n_random = min(len(found["bm25"][0]), available)
        if n_random == 0:
            raise SpecError("sampling.random_pairs: by default as many pairs as BM25 finds, and BM25 finds none here (no two "
                            "sentences share a word it indexes); set sampling.random_pairs")
    return {"random": n_random, "kde": sampling.kde_pool or min(10 * n_random, available)}


def label_candidates(spec: JobSpec, layout: RunLayout, strategy: str, candidates: pa.Table, teacher: Teacher) -> tuple[Path, int]:
    """Label one strategy's candidates on the actor pool into silver/<strategy>/ (streaming, resumable): the
    directory and the pairs labeled."""
    labeled_dir = layout.labeled(strategy)
    job = LabelJob(teacher, spec.labeling, strategy=strategy, onnx_cache=layout.onnx_cache)
    here = labels_in_process(spec.labeling, spec.ray.address)
    log.info("labeling %d %s candidates with %s%s", candidates.num_rows, strategy, job.labeler, " in this process" if here else "")
    return labeled_dir, label_dataset(candidates, labeled_dir, job, layout.candidates(strategy), here).labeled


def make_silver(spec: JobSpec, layout: RunLayout, source: CandidateSource, teacher: Teacher, sbert_dir: Path) -> Silver:
    """Per strategy: sample candidates, label them on the actor pool into silver/<strategy>/ (streaming),
    select (KDE), and measure the kept score distribution."""
    pool, excluded, gold_labels = source.pool, source.excluded, source.gold_labels
    semantic_model = str(sbert_dir) if spec.sampling.semantic_model == "gold" else resolve_model(spec.sampling.semantic_model)
    sets: dict[str, SilverSet] = {}
    random_sizes: dict[str, int] = {}
    found: dict[str, Neighbours] = {}  # searched once: bm25+semantic unites the bm25 and semantic neighbours
    for strategy in sorted(spec.sampling.strategies, key=STRATEGY_ORDER.index):
        if strategy in ("random", "kde") and not random_sizes:
            random_sizes = random_pool_sizes(spec.sampling, pool, excluded, found)
        candidates = candidate_table(
            strategy, pool, excluded, spec.sampling, spec.seed,
            n_random=random_sizes.get(strategy, 0), semantic_model=semantic_model, resources=spec.labeling, found=found,
        )
        silver_dir, labeled = label_candidates(spec, layout, strategy, candidates, teacher)
        kept = read_silver(silver_dir, labeled)
        if strategy == "kde":
            silver_dir = layout.selected(strategy)
            shutil.rmtree(silver_dir, ignore_errors=True)  # a resumed run selects again
            selected, _ = select(kept, gold_labels, spec.task, spec.seed, spec.sampling.kde_mode, spec.sampling.kde_bins)
            write_silver(selected, silver_dir)
            kept = accepted_rows(read_silver(silver_dir, labeled))
        histogram = score_histogram(kept, spec.sampling.kde_bins)
        if warning := thin_silver_warning(strategy, labeled, histogram, len(gold_labels), spec.task, spec.sampling.kde_mode):
            log.warning(warning)
        diagnostics = silver_diagnostics(gold_labels, candidates.num_rows, histogram)
        sets[strategy] = SilverSet(strategy, silver_dir, candidates.num_rows, labeled, histogram, diagnostics)
    return Silver(sets, sentences=len(pool))


def given_target_pairs(spec: JobSpec, layout: RunLayout, target: GoldData, teacher: Teacher) -> Silver:
    """The target's train pairs as given, labels dropped: de-duplicated, and never a dev or test pair."""
    candidates, counts = given_pairs(target.train, [target.dev, target.test])
    silver_dir, labeled = label_candidates(spec, layout, "given", candidates, teacher)
    histogram = score_histogram(read_silver(silver_dir, labeled), spec.sampling.kde_bins)
    reference = train_labels(target)  # the target's gold labels, for the diagnostics only
    diagnostics = silver_diagnostics(reference, candidates.num_rows, histogram)
    return Silver({"given": SilverSet("given", silver_dir, candidates.num_rows, labeled, histogram, diagnostics)}, given_pairs=counts)


def silver_by_top_k(ctx: RunContext, gold: GoldData, teacher: Teacher, sbert_dir: Path, made: Silver) -> dict[int, Silver]:
    """Candidates and silver labels for each tuning.top_k value, made once here and shared by every seed's
    trial. The spec's own sampling.top_k reuses the silver already ``made``."""
    spec = ctx.spec
    strategies = [s for s in spec.sampling.strategies if s in TOP_K_STRATEGIES and bi_encoder_name(s) in spec.tuned_models()]
    if spec.tuning is None or not spec.tuning.top_k or not strategies:
        return {}
    by_k: dict[int, Silver] = {}
    for k in spec.tuning.top_k:
        if k == spec.sampling.top_k and all(strategy in made.sets for strategy in strategies):
            by_k[k] = Silver({strategy: made.sets[strategy] for strategy in strategies})
            continue
        layout = ctx.layout.tuning_silver(k)
        layout.root.mkdir(parents=True, exist_ok=True)
        log.info("tuning: silver for top_k=%d (%s)", k, ", ".join(strategies))
        by_k[k] = make_silver(with_sampling(spec, top_k=k, strategies=strategies), layout, CandidateSource.in_domain(gold),
                              teacher, sbert_dir)
    return by_k


def silver_dirs_by_k(by_k: dict[int, Silver]) -> SilverByK:
    """The silver directories each top_k's trials train on (see tuning.stage)."""
    return {k: {strategy: silver.directory for strategy, silver in sets.sets.items()} for k, sets in by_k.items()}


def tuning_silver_counts(by_k: dict[int, Silver], made: Silver) -> dict[str, Any]:
    """metrics.json ``counts.tuning_silver``: candidates and labeled pairs of each top_k made for the search alone
    (not the run's own silver, ``made``)."""
    return {f"top_k={k}": {key: silver.counts()[key] for key in ("candidates", "labeled")}
            for k, silver in by_k.items() if any(made.sets.get(name) is not s for name, s in silver.sets.items())}


def with_sampling(spec: JobSpec, **changes: Any) -> JobSpec:
    return spec.model_copy(update={"sampling": spec.sampling.model_copy(update=changes)})


# -- evaluation ---------------------------------------------------------------------------------------------------


def evaluate_models(ctx: RunContext, checked: CheckedTeacher, bi_encoders: list[str], eval_set: GoldData) -> dict[str, Evaluation]:
    """Every model on the dev and test split, each scoring a Ray task: the teacher's models (and an ensemble
    teacher itself; on dev, the gate's scores), the bi-encoders in models/, the untrained zero-shot bi-encoder and
    the Jaccard baseline (and for classification the majority-class one)."""
    spec, task, teacher = ctx.spec, ctx.spec.evaluation_task, checked.teacher
    assert checked.dev is eval_set.dev, "the teacher gate scored another dev split"
    test_refs = [score_pairs_on_ray(m.kind, m.model, eval_set.test, spec.evaluation.cpus, spec.evaluation.gpus) for m in teacher.members]
    compared = ["teacher_bi_encoder"] if spec.compares_teacher_bi_encoder else []
    jobs = {name: ("bi_encoder", str(ctx.layout.model(name))) for name in [*bi_encoders, *compared]}
    jobs["zero_shot"] = ("bi_encoder", resolve_model(spec.evaluation.zero_shot_model))
    jobs["jaccard"] = ("jaccard", None)
    refs = {name: evaluate_on_ray(kind, model, task, eval_set.dev, eval_set.test, spec.evaluation.cpus, spec.evaluation.gpus)
            for name, (kind, model) in jobs.items()}
    dev_labels, test_labels = (split.column("label").to_numpy() for split in (eval_set.dev, eval_set.test))
    test_scores = [np.asarray(scores) for scores in ray.get(test_refs)]
    evaluations = {Path(m.model).name: metrics_from_scores(task, dev, dev_labels, test, test_labels, m.model)
                   for m, dev, test in zip(teacher.members, checked.dev_scores, test_scores)}
    if len(teacher.members) > 1:
        evaluations["teacher"] = metrics_from_scores(task, teacher.combine(checked.dev_scores), dev_labels,
                                                     teacher.combine(test_scores), test_labels, teacher.labeler)
    evaluations.update({name: ray.get(ref) for name, ref in refs.items()})
    if task == "classification":
        evaluations["majority"] = majority_baseline(dev_labels, test_labels)
    return evaluations
