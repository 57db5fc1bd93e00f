"""The silver steps: candidates drawn from a sentence pool per sampling strategy, labeled by the teacher on the
Ray Data engine (streaming, resumable), selected (KDE) and measured."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from augsbert_ray.config import TOP_K_STRATEGIES, JobSpec, SamplingSpec, SpecError
from augsbert_ray.data import GoldData, read_sentences
from augsbert_ray.labeling import LabelJob, Teacher, label_dataset, labels_in_process
from augsbert_ray.layout import RunLayout, TrainFile, bi_encoder_name, silver_files
from augsbert_ray.models import resolve_model
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.pipeline.gold import train_labels
from augsbert_ray.runtime import log
from augsbert_ray.sampling import (
    Neighbours, SentencePool, available_pairs, candidate_table, given_pairs, sample_bm25, shares_a_term,
)
from augsbert_ray.sampling.neighbours import check_top_k
from augsbert_ray.selection import (
    accepted_rows, read_silver, score_histogram, select, silver_diagnostics, thin_silver_warning, write_silver,
)
from augsbert_ray.tuning import SilverByK

# BM25 runs first: random sampling and the KDE pool are sized from its candidate count.
STRATEGY_ORDER = ("bm25", "random", "kde", "semantic", "bm25+semantic")


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


