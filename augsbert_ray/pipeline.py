"""The in-domain AugSBERT job, built from the stages: gold -> teacher -> SBERT -> teacher gate -> candidates
-> silver -> bi-encoders -> evaluation -> report."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data
from ray.data.expressions import col

from augsbert_ray.config import (
    TOP_K_STRATEGIES, BiEncoderSpec, DataSpec, JobSpec, SamplingSpec, SpecError, bi_encoder_name, check_output_dir, dump_spec,
    load_spec,
)
from augsbert_ray.data import GoldData, check_gold_usable, check_reject_fractions, load_gold, read_sentences, write_rejects
from augsbert_ray.evaluation import Evaluation, dev_metric, evaluate_on_ray, score_pairs_on_ray
from augsbert_ray.files import atomic_write_text
from augsbert_ray.labeling import TEACHER_FILE, LabelJob, Teacher, TeacherMember, label_table
from augsbert_ray.models import resolve_model
from augsbert_ray.report import plot_score_densities, write_report
from augsbert_ray.resume import FINGERPRINT_FILE, changed_entries, describe, fit_still_matches, run_fingerprint, write_fingerprint
from augsbert_ray.runtime import init_ray, log
from augsbert_ray.sampling import Neighbours, SentencePool, available_pairs, candidate_table, given_pairs, sample_bm25
from augsbert_ray.selection import score_histogram, select, silver_diagnostics
from augsbert_ray.training import fit_bi_encoder, fit_cross_encoder
from augsbert_ray.training.ray_fit import TrainFile
from augsbert_ray.tuning.report import write_tuning_report
from augsbert_ray.tuning.search import Outcome
from augsbert_ray.tuning.stage import SilverByK, chosen_rows, silver_files, tune_bi_encoder, with_sampling

# Each finished fit is recorded here, so that `augsbert run --resume` reuses it instead of fitting again.
PROGRESS_FILE = "progress.json"


@dataclass
class RunState:
    """What a run has measured so far; becomes metrics.json."""

    run_dir: Path
    counts: dict[str, Any] = field(default_factory=dict)
    wall_seconds: dict[str, float] = field(default_factory=dict)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    sampling: dict[str, dict[str, float | int]] = field(default_factory=dict)
    tuning: dict[str, Any] = field(default_factory=dict)  # model name -> tuning.search.Outcome
    tuning_silver: dict[int, dict[str, Path]] = field(default_factory=dict)  # tuning.top_k -> strategy -> silver dir
    finished_fits: dict[str, dict[str, Any]] = field(default_factory=dict)  # model name -> record, as in progress.json
    reused: dict[str, float] = field(default_factory=dict)  # fits an earlier attempt made -> the seconds they took then
    teacher: dict[str, Any] = field(default_factory=dict)  # the teacher gate: kind, labeler, dev scores of teacher and SBERT
    stage_number: int = 0

    @contextmanager
    def stage(self, name: str, total: int) -> Iterator[None]:
        self.stage_number += 1
        log.info("[stage %d/%d] %s ...", self.stage_number, total, name)
        start = time.perf_counter()
        yield
        self.wall_seconds[name] = round(time.perf_counter() - start, 2)
        log.info("[stage %d/%d] %s done in %.1fs", self.stage_number, total, name, self.wall_seconds[name])

    def metrics(self, spec: JobSpec) -> dict[str, Any]:
        return {
            "task": spec.evaluation_task,
            "metric": "spearman_x100" if spec.evaluation_task == "regression" else "f1_x100",
            "dev": {name: result.dev for name, result in self.evaluations.items()},
            "test": {name: result.test for name, result in self.evaluations.items()},
            "details": {name: result.to_dict() for name, result in self.evaluations.items()},
            "sampling": self.sampling,
            "counts": self.counts,
            "wall_seconds": self.wall_seconds,
            "reused_fits": self.reused,
            "teacher": self.teacher,
        }

    def record_fit(self, name: str, record: dict[str, Any]) -> None:
        self.finished_fits[name] = record
        write_progress(self.run_dir, self.finished_fits)


def write_progress(run_dir: Path, finished_fits: dict[str, dict[str, Any]]) -> None:
    atomic_write_text(run_dir / PROGRESS_FILE, json.dumps(finished_fits, indent=1))


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


def read_gold(spec: JobSpec, state: RunState, data_dir: str | Path | None) -> GoldData:
    """The gold (in-domain) or source (transfer) pairs, into gold/ with rejects.jsonl and counts."""
    gold = read_splits(spec.data, spec.seed, state, data_dir, "gold", "")
    check_gold_usable(gold, spec)
    return gold


def read_target(spec: JobSpec, state: RunState, data_dir: str | Path | None) -> GoldData:
    """The transfer target's splits, into target/ with target_rejects.jsonl and target_* counts."""
    assert spec.target is not None
    target = read_splits(spec.target.data, spec.seed, state, data_dir, "target", "target_")
    check_gold_usable(target, spec, target=True)
    return target


def read_splits(data: DataSpec, seed: int, state: RunState, data_dir: str | Path | None, folder: str, prefix: str) -> GoldData:
    gold = load_gold(data, seed, data_dir)
    rejects_path = state.run_dir / f"{prefix}rejects.jsonl"
    write_rejects(gold.rejects, rejects_path)
    state.counts.update({
        f"{prefix}rows_read": gold.rows_read,
        f"{prefix}rejected": len(gold.rejects),
        f"{prefix}accepted": gold.rows_read - len(gold.rejects),
        f"{prefix or 'gold_'}train_before_limit": gold.train_before_limit,
        f"{prefix or 'gold_'}train": gold.train.num_rows,
        f"{prefix or 'gold_'}dev": gold.dev.num_rows,
        f"{prefix or 'gold_'}test": gold.test.num_rows,
        **gold.cleaning_counts(prefix or "gold_"),
    })
    check_reject_fractions(gold, data.max_reject_fraction, rejects_path, folder)
    split_dir = state.run_dir / folder
    split_dir.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        pq.write_table(gold.split(split), split_dir / f"{split}.parquet")
    return gold


# BM25 runs first: random sampling and the KDE pool are sized from its candidate count.
STRATEGY_ORDER = ("bm25", "random", "kde", "semantic", "bm25+semantic")


def random_pool_sizes(sampling: SamplingSpec, pool: SentencePool, excluded: np.ndarray, bm25_count: int | None) -> dict[str, int]:
    """Pairs drawn by random sampling and for the KDE pool: as requested, else as many as BM25 makes (and 10x that
    for KDE), capped by the pool. BM25 is counted even when it is not a strategy of the run (bm25_count None), so
    that a run of some strategies draws the pools that a run of all of them draws."""
    available = available_pairs(pool, excluded)
    n_random = sampling.random_pairs
    if n_random is None:
        if bm25_count is None:
            bm25_count = len(sample_bm25(pool, sampling.top_k, excluded, sampling.bm25_shard_size, sampling.search_cpus)[0])
        n_random = min(bm25_count, available)
    return {"random": n_random, "kde": sampling.kde_pool or min(10 * n_random, available)}


@dataclass
class CandidateSource:
    """What candidates are drawn from: a sentence pool, the pairs that must never be candidates, and the
    gold labels that KDE selection and the diagnostics compare the silver scores with."""

    pool: SentencePool
    excluded: np.ndarray
    gold_labels: np.ndarray

    @classmethod
    def in_domain(cls, gold: GoldData) -> "CandidateSource":
        """Gold-train sentences recombined; no gold pair (train, dev or test) is a candidate."""
        pool = SentencePool.from_pairs(gold.train)
        return cls(pool, pool.gold_codes([gold.train, gold.dev, gold.test]), train_labels(gold))


def train_labels(gold: GoldData) -> np.ndarray:
    return gold.train.column("label").to_numpy().astype(np.float64)


def transfer_reference_labels(target: GoldData, source: GoldData) -> np.ndarray:
    """The gold labels silver scores are compared with in transfer: the target's, else the source's."""
    return train_labels(target) if target.train.num_rows else train_labels(source)


def label_candidates(spec: JobSpec, state: RunState, strategy: str, candidates: pa.Table, teacher: Teacher) -> Path:
    """Label one strategy's candidates on the actor pool into silver/<strategy>/ (streaming, resumable)."""
    labeled_dir = state.run_dir / "silver" / (f"{strategy}_pool" if strategy == "kde" else strategy)
    job = LabelJob(teacher, spec.labeling, strategy=strategy)
    log.info("labeling %d %s candidates with %s", candidates.num_rows, strategy, job.labeler)
    labeled = label_table(candidates, state.run_dir / "candidates" / f"{strategy}.parquet", labeled_dir, job)
    state.counts["candidates"][strategy] = candidates.num_rows
    state.counts["labeled"][strategy] = labeled.labeled
    return labeled_dir


def make_silver(
    spec: JobSpec, state: RunState, source: CandidateSource, teacher: Teacher, sbert_dir: Path
) -> tuple[dict[str, Path], dict[str, np.ndarray]]:
    """Per strategy: sample candidates, label them on the actor pool into silver/<strategy>/ (streaming),
    select (KDE), and measure the kept score distribution. Returns silver dirs and kept-score histograms."""
    pool, excluded, gold_labels = source.pool, source.excluded, source.gold_labels
    semantic_model = str(sbert_dir) if spec.sampling.semantic_model == "gold" else resolve_model(spec.sampling.semantic_model)
    state.counts.update(sentences=len(pool), candidates={}, labeled={}, kept={})
    state.sampling = {}
    silver_dirs: dict[str, Path] = {}
    histograms: dict[str, np.ndarray] = {}
    random_sizes: dict[str, int] = {}
    found: dict[str, Neighbours] = {}  # searched once: bm25+semantic unites the bm25 and semantic neighbours
    for strategy in sorted(spec.sampling.strategies, key=STRATEGY_ORDER.index):
        if strategy in ("random", "kde") and not random_sizes:
            bm25_count = len(found["bm25"][0]) if "bm25" in found else None
            random_sizes = random_pool_sizes(spec.sampling, pool, excluded, bm25_count)
        candidates = candidate_table(
            strategy, pool, excluded, spec.sampling, spec.seed,
            n_random=random_sizes.get(strategy, 0), semantic_model=semantic_model, resources=spec.labeling, found=found,
        )
        labeled_dir = label_candidates(spec, state, strategy, candidates, teacher)
        silver_dir = labeled_dir
        kept = ray.data.read_parquet(str(labeled_dir))
        if strategy == "kde":
            silver_dir = state.run_dir / "silver" / strategy
            shutil.rmtree(silver_dir, ignore_errors=True)  # a resumed run selects again
            selected, _ = select(kept, gold_labels, spec.task, spec.seed, spec.sampling.kde_mode, spec.sampling.kde_bins)
            selected.write_parquet(str(silver_dir))
            kept = ray.data.read_parquet(str(silver_dir)).filter(expr=col("accepted"))
        histograms[strategy] = score_histogram(kept, spec.sampling.kde_bins)
        state.sampling[strategy] = silver_diagnostics(gold_labels, candidates.num_rows, histograms[strategy])
        state.counts["kept"][strategy] = state.sampling[strategy]["kept"]
        silver_dirs[strategy] = silver_dir
    return silver_dirs, histograms


def silver_by_top_k(
    spec: JobSpec, state: RunState, gold: GoldData, teacher: Teacher, sbert_dir: Path, made: dict[str, Path]
) -> SilverByK:
    """Candidates and silver labels for each tuning.top_k value, made once here and shared by every seed's
    trial. The spec's own sampling.top_k reuses the silver already in ``made``."""
    strategies = [s for s in spec.sampling.strategies if s in TOP_K_STRATEGIES and bi_encoder_name(s) in spec.tuned_models()]
    if spec.tuning is None or not spec.tuning.top_k or not strategies:
        return {}
    by_k: SilverByK = {}
    for k in spec.tuning.top_k:
        if k == spec.sampling.top_k and all(strategy in made for strategy in strategies):
            by_k[k] = {strategy: made[strategy] for strategy in strategies}
            continue
        k_state = RunState(state.run_dir / "tuning_silver" / f"top_k{k}")
        k_state.run_dir.mkdir(parents=True, exist_ok=True)
        log.info("tuning: silver for top_k=%d (%s)", k, ", ".join(strategies))
        by_k[k], _ = make_silver(
            with_sampling(spec, top_k=k, strategies=strategies), k_state, CandidateSource.in_domain(gold), teacher, sbert_dir
        )
        state.counts.setdefault("tuning_silver", {})[f"top_k={k}"] = {key: k_state.counts.get(key) for key in ("candidates", "labeled")}
    return by_k


def fit_once(spec: JobSpec, state: RunState, name: str, fit: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Fit models/<name>, or reuse it when an earlier attempt at this run finished it (progress.json)."""
    record = state.finished_fits.get(name)
    if record is not None and (state.run_dir / "models" / name).is_dir():
        log.info("resume: reusing models/%s, fitted by an earlier attempt in %.0fs", name, record["wall_seconds"])
        state.reused[name] = record["wall_seconds"]
        return record
    remove_unfinished_fit(state.run_dir, name, keep_training_state=spec.training.checkpoint_every is not None)
    started = time.perf_counter()
    record = {**fit(), "wall_seconds": round(time.perf_counter() - started, 2)}
    state.record_fit(name, record)
    return record


def remove_unfinished_fit(run_dir: Path, name: str, keep_training_state: bool) -> None:
    """Clear what an unfinished fit left. Ray Train restores the earlier attempt's checkpoints, found by run
    name: kept when ``keep_training_state`` (training.checkpoint_every), so the fit goes on from its last
    training state, else removed so that it starts over. A search always starts over: Ray Tune would mix its
    trials with the earlier ones."""
    tune_dir = run_dir / "ray_tune"
    leftovers = [run_dir / "models" / name, *tune_dir.glob(f"{name}-*"), *(tune_dir / "ray_train").glob(f"{name}-*"),
                 *(tune_dir / "stop").glob(f"{name}-*"), *([] if keep_training_state else [run_dir / "ray_train" / name])]
    for path in leftovers:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def train_bi_encoder(spec: JobSpec, state: RunState, name: str, files: list[tuple[str, str]]) -> None:
    def fit() -> dict[str, Any]:
        if name in spec.tuned_models():  # seed (and top_k) search; the chosen trial lands in models/<name>
            outcome = tune_bi_encoder(spec, state.run_dir, name, files, state.tuning_silver)
            return {"trained_on": chosen_rows(outcome), "tuning": outcome.state()}
        metrics = fit_bi_encoder(
            spec.bi_encoder, resolve_model(spec.bi_encoder.model), files, spec.training, spec.seed,
            state.run_dir / "ray_train", name, state.run_dir / "models" / name,
        )
        return {"trained_on": int(metrics["train_rows"])}  # after selection's `accepted` filter

    record = fit_once(spec, state, name, fit)
    state.counts["trained_on"][name] = record["trained_on"]
    if "tuning" in record:
        state.tuning[name] = Outcome.from_state(record["tuning"])


def start_run(spec: JobSpec, resume: Path | None, data_dir: str | Path | None, force_resume: bool = False) -> RunState:
    """A new run directory with spec.yaml and the run's fingerprint, or the unfinished run ``resume``; then Ray."""
    if resume is None:
        state = RunState(new_run_dir(spec))
        (state.run_dir / "spec.yaml").write_text(dump_spec(spec), encoding="utf-8")
        write_fingerprint(state.run_dir, run_fingerprint(spec, data_dir))
    else:
        state = resumed_state(spec, resume, data_dir, force_resume)
    log.info("run directory: %s", state.run_dir)
    init_ray(spec.ray.address, spec.ray.num_cpus)
    return state


def load_run_spec(run_dir: Path, overrides: list[str] | None = None) -> JobSpec:
    """The spec an unfinished run was started with (its spec.yaml), to resume it."""
    if not (run_dir / "spec.yaml").is_file():
        raise SpecError(f"--resume {run_dir}: not a run directory (no spec.yaml)")
    for output in ("metrics.json", "tuning.json"):  # a finished `augsbert run` / `augsbert tune` has written it
        if (run_dir / output).exists():
            raise SpecError(f"--resume {run_dir}: that run has finished ({output} exists)")
    return load_spec(run_dir / "spec.yaml", overrides)


def resumed_state(spec: JobSpec, run_dir: Path, data_dir: str | Path | None, force: bool) -> RunState:
    """Continue an unfinished run in its own directory: finished fits are reused, gold and candidates are made
    again (they are seeded), and labeling skips the shards already written. What the run computes from must
    not have changed since it started (its fingerprint); with ``force``, only the fits that the changes do not
    touch are reused, and the silver sets are made again."""
    run_dir = run_dir.resolve()
    progress = run_dir / PROGRESS_FILE
    finished = json.loads(progress.read_text(encoding="utf-8")) if progress.exists() else {}
    now = run_fingerprint(spec, data_dir)
    changed = changed_entries(run_dir, now) if (run_dir / FINGERPRINT_FILE).exists() else {}
    if changed and not force:
        raise SpecError(f"--resume {run_dir}: what the run computes from changed since it started: {describe(changed)}; "
                        "start a new run, or add --force-resume to reuse only the fits these changes do not touch")
    if changed:
        kept = {name: record for name, record in finished.items() if fit_still_matches(name, changed)}
        log.warning("--force-resume: %s changed; reusing %s, fitting again %s, labeling again", describe(changed),
                    ", ".join(kept) or "no fit", ", ".join(sorted(finished.keys() - kept.keys())) or "nothing")
        for stale in ("silver", "candidates", "tuning_silver", *(f"models/{name}" for name in finished.keys() - kept.keys())):
            shutil.rmtree(run_dir / stale, ignore_errors=True)
        finished = kept
        write_progress(run_dir, finished)
    write_fingerprint(run_dir, now)
    log.info("resuming %s: %d finished fit(s) to reuse (%s)", run_dir, len(finished), ", ".join(finished) or "none")
    return RunState(run_dir, finished_fits=finished)


def teacher_stage(spec: JobSpec) -> str:
    """The teacher's stage name in logs and wall_seconds: a cross-encoder's keeps the name it always had."""
    return "train cross-encoder" if spec.teacher.kind == "cross-encoder" else f"train the {spec.teacher.kind} teacher"


def train_teacher(spec: JobSpec, state: RunState, gold: GoldData, gold_file: TrainFile) -> Teacher:
    """The teacher's models fitted on the gold (in transfer: source) train split, each reused on resume: the
    cross-encoder, the bi-encoder teacher, or both (ensemble). Their scores are not mapped yet (see check_teacher)."""
    fits = {"cross_encoder": train_cross_encoder, "bi_encoder": train_teacher_bi_encoder}
    return Teacher(tuple(TeacherMember(kind, str(fits[kind](spec, state, gold, gold_file))) for kind in spec.teacher.member_kinds))


def train_cross_encoder(spec: JobSpec, state: RunState, gold: GoldData, gold_file: TrainFile) -> Path:
    cross_encoder_dir = state.run_dir / "models" / "cross_encoder"

    def fit() -> dict[str, Any]:
        if spec.cross_encoder.trained:
            return copy_trained_model(Path(spec.cross_encoder.trained).expanduser(), cross_encoder_dir, "cross_encoder")
        fit_cross_encoder(
            spec.cross_encoder, resolve_model(spec.cross_encoder.model), [gold_file],
            spec.training, spec.seed, state.run_dir / "ray_train", cross_encoder_dir,
        )
        return {"trained_on": gold.train.num_rows * (2 if spec.cross_encoder.both_orders else 1)}

    state.counts.setdefault("trained_on", {})["cross_encoder"] = fit_once(spec, state, "cross_encoder", fit)["trained_on"]
    return cross_encoder_dir


def train_teacher_bi_encoder(spec: JobSpec, state: RunState, gold: GoldData, gold_file: TrainFile) -> Path:
    """The bi-encoder teacher (teacher.bi_encoder, by default mpnet) fine-tuned on gold, into models/teacher_bi_encoder."""
    name = "teacher_bi_encoder"
    model_dir = state.run_dir / "models" / name
    settings = spec.teacher.bi_encoder

    def fit() -> dict[str, Any]:
        if settings.trained:
            return copy_trained_model(Path(settings.trained).expanduser(), model_dir, name)
        fit_settings = BiEncoderSpec.model_validate(settings.model_dump(exclude={"trained"}))
        metrics = fit_bi_encoder(fit_settings, resolve_model(settings.model), [gold_file], spec.training, spec.seed,
                                 state.run_dir / "ray_train", name, model_dir)
        return {"trained_on": int(metrics["train_rows"])}

    state.counts.setdefault("trained_on", {})[name] = fit_once(spec, state, name, fit)["trained_on"]
    return model_dir


def copy_trained_model(trained: Path, model_dir: Path, name: str) -> dict[str, Any]:
    """A teacher model given as already trained is copied, so the run directory stays whole. When it comes from
    an earlier run, that run's progress.json says what it was trained on."""
    log.info("%s: copying the trained model at %s, no fit", name, trained)
    shutil.copytree(trained, model_dir)
    source_progress = trained.resolve().parent.parent / PROGRESS_FILE
    fits = json.loads(source_progress.read_text(encoding="utf-8")) if source_progress.is_file() else {}
    return {"trained_on": fits.get(name, {}).get("trained_on")}


def score_members(spec: JobSpec, teacher: Teacher, table: pa.Table) -> list[np.ndarray]:
    """Each teacher model's raw scores of a table's pairs, one Ray task per model."""
    refs = [score_pairs_on_ray(m.kind, m.model, table, spec.evaluation.cpus, spec.evaluation.gpus) for m in teacher.members]
    return [np.asarray(scores) for scores in ray.get(refs)]


def calibrate_teacher(
    spec: JobSpec, state: RunState, teacher: Teacher, calibration: GoldData, scored: tuple[pa.Table, list[np.ndarray]] | None = None
) -> Teacher:
    """A bi-encoder or ensemble teacher's models mapped onto the gold scale, fitted on ``calibration``'s
    teacher.calibration split (``scored``: a split whose member scores are known); saved as models/teacher.json."""
    if teacher.kind != "cross-encoder":
        split = calibration.split(spec.teacher.calibration)
        scores = scored[1] if scored is not None and scored[0] is split else score_members(spec, teacher, split)
        teacher = teacher.calibrated(scores, split.column("label").to_numpy())
    teacher.save(state.run_dir / "models")
    return teacher


def check_teacher(spec: JobSpec, state: RunState, teacher: Teacher, calibration: GoldData, student_dir: Path, dev: pa.Table) -> Teacher:
    """The teacher gate, before any labeling: calibrates the teacher (calibrate_teacher), then scores it and the
    gold-only student on ``dev``. A teacher that is not better warns, or with
    labeling.require_better_teacher stops the run: its silver labels would teach the student nothing it lacks."""
    dev_labels = dev.column("label").to_numpy().astype(np.float64)
    student_ref = score_pairs_on_ray("bi_encoder", str(student_dir), dev, spec.evaluation.cpus, spec.evaluation.gpus)
    dev_scores = score_members(spec, teacher, dev)
    teacher = calibrate_teacher(spec, state, teacher, calibration, scored=(dev, dev_scores))
    teacher_dev = dev_metric(spec.evaluation_task, teacher.combine(dev_scores), dev_labels)
    student_dev = dev_metric(spec.evaluation_task, np.asarray(ray.get(student_ref)), dev_labels)
    state.teacher = {
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
    return teacher


def evaluate_models(spec: JobSpec, state: RunState, teacher: Teacher, bi_encoders: list[str], eval_set: GoldData) -> None:
    """Every model on the dev and test split, each evaluation a Ray task: the teacher's models (and an ensemble
    teacher itself), the bi-encoders in models/, the untrained zero-shot bi-encoder and the Jaccard baseline."""
    models_dir = state.run_dir / "models"
    jobs = {Path(m.model).name: (m.kind, m.model) for m in teacher.members}
    if len(teacher.members) > 1:
        jobs["teacher"] = ("teacher", str(models_dir / TEACHER_FILE))
    jobs.update({name: ("bi_encoder", str(models_dir / name)) for name in bi_encoders})
    jobs["zero_shot"] = ("bi_encoder", resolve_model(spec.evaluation.zero_shot_model))
    jobs["jaccard"] = ("jaccard", None)
    task = spec.evaluation_task
    refs = {
        name: evaluate_on_ray(kind, model, task, eval_set.dev, eval_set.test, spec.evaluation.cpus, spec.evaluation.gpus)
        for name, (kind, model) in jobs.items()
    }
    state.evaluations = {name: ray.get(ref) for name, ref in refs.items()}


def write_outputs(spec: JobSpec, state: RunState, started: float, reference_labels: np.ndarray, histograms: dict[str, np.ndarray]) -> None:
    """metrics.json, report.md, the score-density plot and, after a search, tuning.md/tuning.json."""
    state.wall_seconds["total"] = round(time.perf_counter() - started, 2)
    metrics = state.metrics(spec)
    plot_score_densities(reference_labels, histograms, state.run_dir / "score_density.png")
    (state.run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    write_report(spec, metrics, state.run_dir / "report.md")
    if state.tuning:
        tests = {name: state.evaluations[name].test for name in state.tuning}
        write_tuning_report(state.run_dir, spec.name, state.tuning, tests, metrics["metric"])
    log.info("done: %s", state.run_dir / "report.md")


def run_job(spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False) -> Path:
    """Run the job's scenario (in a new run directory, or continuing the unfinished run ``resume``) and
    return the run directory.

    Args:
        spec: the job spec, e.g. ``load_spec("jobs/stsb_indomain_bm25.yaml")``.
        data_dir: where the named datasets live (default $AUGSBERT_DATA_DIR, else ../shared/data).
        resume: an unfinished run directory to continue (its fingerprint must match, see augsbert_ray.resume).
        force_resume: continue ``resume`` though its inputs changed, reusing only the fits they do not touch.

    Example::

        run_dir = run_job(load_spec("jobs/stsb_indomain_bm25.yaml", ["data.train_limit=1000"]))
        print((run_dir / "report.md").read_text())
    """
    run = run_domain_transfer if spec.scenario == "domain-transfer" else run_in_domain
    return run(spec, data_dir, resume, force_resume)


def run_in_domain(spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False) -> Path:
    """Run the whole in-domain method and return the run directory."""
    state = start_run(spec, resume, data_dir, force_resume)
    total_stages = 8
    models_dir = state.run_dir / "models"
    started = time.perf_counter()

    with state.stage("read gold data", total_stages):
        gold = read_gold(spec, state, data_dir)
    gold_file = (str(state.run_dir / "gold" / "train.parquet"), "label")

    with state.stage(teacher_stage(spec), total_stages):
        teacher = train_teacher(spec, state, gold, gold_file)

    with state.stage("train SBERT on gold", total_stages):
        # before sampling: semantic search embeds with the gold-trained bi-encoder, as in the paper
        training_sets = {"sbert": [gold_file]}
        train_bi_encoder(spec, state, "sbert", training_sets["sbert"])

    with state.stage("teacher gate: teacher vs SBERT on dev", total_stages):
        teacher = check_teacher(spec, state, teacher, gold, models_dir / "sbert", gold.dev)

    with state.stage("sample and label candidates", total_stages):
        silver_dirs, histograms = make_silver(spec, state, CandidateSource.in_domain(gold), teacher, models_dir / "sbert")
        state.tuning_silver = silver_by_top_k(spec, state, gold, teacher, models_dir / "sbert", silver_dirs)

    with state.stage("train AugSBERT bi-encoders", total_stages):
        for strategy, silver_dir in silver_dirs.items():
            name = bi_encoder_name(strategy)
            training_sets[name] = [gold_file, *silver_files(silver_dir)]
            train_bi_encoder(spec, state, name, training_sets[name])

    with state.stage("evaluate", total_stages):
        evaluate_models(spec, state, teacher, list(training_sets), gold)

    with state.stage("report", total_stages):
        write_outputs(spec, state, started, train_labels(gold), histograms)
    return state.run_dir


def given_target_pairs(spec: JobSpec, state: RunState, target: GoldData, teacher: Teacher) -> tuple[dict[str, Path], dict[str, np.ndarray]]:
    """The target's train pairs as given, labels dropped: de-duplicated, and never a dev or test pair."""
    candidates, counts = given_pairs(target.train, [target.dev, target.test])
    state.counts.update(candidates={}, labeled={}, kept={}, given_pairs=counts)
    silver_dir = label_candidates(spec, state, "given", candidates, teacher)
    histogram = score_histogram(ray.data.read_parquet(str(silver_dir)), spec.sampling.kde_bins)
    reference = train_labels(target)  # the target's gold labels, for the diagnostics only
    state.sampling = {"given": silver_diagnostics(reference, candidates.num_rows, histogram)}
    state.counts["kept"]["given"] = int(histogram.sum())
    return {"given": silver_dir}, {"given": histogram}


def target_candidate_source(spec: JobSpec, target: GoldData, source: GoldData) -> CandidateSource:
    """Target sentences (target.sentences, else the target's train pairs) to recombine; dev and test pairs
    are never candidates. Diagnostics compare with the target's gold labels when it has them."""
    assert spec.target is not None
    if spec.target.sentences is not None:
        pool = SentencePool(read_sentences(spec.target.sentences, "target.sentences"))
    else:
        pool = SentencePool.from_pairs(target.train)
    return CandidateSource(pool, pool.gold_codes([target.dev, target.test]), transfer_reference_labels(target, source))


def run_domain_transfer(
    spec: JobSpec, data_dir: str | Path | None = None, resume: Path | None = None, force_resume: bool = False
) -> Path:
    """Cross-encoder on the labeled source, silver labels on the target, AugSBERT on the target silver alone;
    every model is scored on the target's test split."""
    assert spec.target is not None
    state = start_run(spec, resume, data_dir, force_resume)
    total_stages = 8
    models_dir = state.run_dir / "models"
    started = time.perf_counter()

    with state.stage("read source and target data", total_stages):
        source = read_gold(spec, state, data_dir)
        target = read_target(spec, state, data_dir)
    source_file = (str(state.run_dir / "gold" / "train.parquet"), "label")

    with state.stage(teacher_stage(spec) + " on the source", total_stages):
        teacher = train_teacher(spec, state, source, source_file)

    with state.stage("train SBERT on source gold (and target gold)", total_stages):
        training_sets = {"sbert_source": [source_file]}
        if target.train.num_rows:  # the upper bound: what target labels would give
            training_sets["sbert_target"] = [(str(state.run_dir / "target" / "train.parquet"), "label")]
        for name, files in training_sets.items():
            train_bi_encoder(spec, state, name, files)

    with state.stage("teacher gate: teacher vs SBERT-source on the target dev", total_stages):
        # mapped onto the source's gold scale, compared where the silver labels will be used
        teacher = check_teacher(spec, state, teacher, source, models_dir / "sbert_source", target.dev)

    with state.stage("sample and label target candidates", total_stages):
        if spec.target.candidates == "pairs":
            silver_dirs, histograms = given_target_pairs(spec, state, target, teacher)
        else:
            silver_dirs, histograms = make_silver(
                spec, state, target_candidate_source(spec, target, source), teacher, models_dir / "sbert_source"
            )

    with state.stage("train AugSBERT on target silver", total_stages):
        for strategy, silver_dir in silver_dirs.items():
            name = "augsbert" if strategy == "given" else bi_encoder_name(strategy)
            training_sets[name] = silver_files(silver_dir)  # silver alone: the target has no gold to add
            train_bi_encoder(spec, state, name, training_sets[name])

    with state.stage("evaluate on the target", total_stages):
        evaluate_models(spec, state, teacher, list(training_sets), target)

    with state.stage("report", total_stages):
        write_outputs(spec, state, started, transfer_reference_labels(target, source), histograms)
    return state.run_dir
