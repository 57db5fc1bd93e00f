"""Rejection sampling that makes the silver score distribution follow the gold one.

Regression (the paper's rule): keep a pair with score s with probability
Q(s) = 1 if F_gold(s) >= F_silver(s) else F_gold(s) / F_silver(s). F_gold is scipy's gaussian_kde
on the gold labels; F_silver is a gaussian_kde over a histogram of the silver scores merged across
Ray Data blocks, so the silver set is never collected. ``exact`` mode scales Q by
min(F_silver / F_gold), which makes the kept density proportional to F_gold.

Classification: keep every positive (score >= 0.5) and the share of negatives that restores the
gold negative/positive ratio.

Each row is accepted when a hash of (seed, pair) falls below its Q, so the kept set does not depend
on how Ray splits the data into blocks, or whether it is one table in the driver: a silver set small enough
(``IN_PROCESS_ROWS``) is counted and selected in the calling process, where Ray Data's tasks and shuffle would
cost more than the work.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray.data
from ray.data.expressions import col
from scipy.stats import gaussian_kde

from augsbert_ray.config import TaskType

GRID = np.linspace(0.0, 1.0, 501)
# Silver sets up to this many rows are read, counted and selected in the calling process (a few hundred MB at most).
IN_PROCESS_ROWS = 1_000_000
# A silver set: a Ray Dataset, or a table in this process.
SilverRows = ray.data.Dataset | pa.Table


@dataclass(frozen=True)
class AcceptanceCurve:
    """Q evaluated on GRID (regression), or the negative keep rate (classification).

    Args:
        task: ``regression`` (``q_grid`` is used) or ``classification`` (``negative_rate`` is used).
        q_grid: The keep probability at each of the 501 GRID points over [0, 1]; regression only.
        negative_rate: The probability of keeping a pair scored below 0.5 (those at 0.5 or above are always kept);
            default 1: keep every pair.

    Example:
        ::

            curve = AcceptanceCurve("classification", negative_rate=0.25)
            curve.probability(np.array([0.9, 0.1]))  # array([1.  , 0.25])
    """

    task: TaskType
    q_grid: np.ndarray | None = None
    negative_rate: float = 1.0

    def probability(self, scores: np.ndarray) -> np.ndarray:
        if self.task == "classification":
            return np.where(scores >= 0.5, 1.0, self.negative_rate)
        return np.interp(np.clip(scores, 0.0, 1.0), GRID, self.q_grid)


def read_silver(directory: Path, rows: int) -> SilverRows:
    """The Parquet files of a silver directory: one table when ``rows`` is at most IN_PROCESS_ROWS, else a Dataset.

    Args:
        directory: A silver set's directory, e.g. a labeling output.
        rows: The pairs it holds (e.g. the count labeled); it only chooses between a table and a Dataset.

    Example:
        ::

            silver = read_silver(Path("runs/<run>/silver/bm25"), result.labeled)
    """
    return pq.read_table(directory) if rows <= IN_PROCESS_ROWS else ray.data.read_parquet(str(directory))


def write_silver(silver: SilverRows, directory: Path) -> None:
    """Into a new ``directory``, as Parquet files.

    Args:
        silver: The rows: a table, written as one part-00000.parquet, or a Dataset, written block by block.
        directory: Where to write; for a table it must not exist yet (its parents are made).

    Example:
        ::

            write_silver(selected, Path("runs/<run>/silver/kde"))
    """
    if isinstance(silver, pa.Table):
        directory.mkdir(parents=True)
        pq.write_table(silver, directory / "part-00000.parquet")
    else:
        silver.write_parquet(str(directory))


def accepted_rows(selected: SilverRows) -> SilverRows:
    """The rows that selection kept: those whose ``accepted`` column is true, as a table or a Dataset like the input.

    Args:
        selected: Silver rows with the boolean ``accepted`` column of ``mark_accepted`` (or ``select``).

    Example:
        ::

            kept = accepted_rows(select(silver, gold_labels, "regression", seed=42)[0])
    """
    return selected.filter(pc.field("accepted")) if isinstance(selected, pa.Table) else selected.filter(expr=col("accepted"))


def bin_counts(scores: np.ndarray, bins: int) -> np.ndarray:
    counts, _ = np.histogram(np.clip(scores, 0.0, 1.0), bins=bins, range=(0.0, 1.0))
    return counts


def score_histogram(silver: SilverRows, bins: int) -> np.ndarray:
    """Counts of silver scores in ``bins`` equal bins over [0,1]: of a table here; of a Dataset, each batch counted
    on the workers and the counts streamed to this process and added up (``bins`` numbers per batch: a groupby's
    hash shuffle would start its own aggregator actors for them).

    Args:
        silver: The rows: a table, or a Dataset.
        bins: How many equal bins; scores outside [0,1] count in the first or last.

    Returns:
        The ``bins`` counts (int64), lowest scores first.

    Example:
        ::

            score_histogram(accepted_rows(selected), 100).sum()  # the pairs kept
    """
    if isinstance(silver, pa.Table):
        return bin_counts(silver.column("score").to_numpy(), bins).astype(np.int64)

    def count(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"bin": np.arange(bins), "count": bin_counts(batch["score"], bins)}

    counts = np.zeros(bins, dtype=np.int64)
    for batch in silver.map_batches(count, batch_format="numpy").iter_batches(batch_format="numpy"):
        np.add.at(counts, batch["bin"], batch["count"])
    return counts


def density_from_histogram(counts: np.ndarray) -> gaussian_kde:
    """A KDE of the silver scores built from bin centres weighted by their counts, with the bandwidth of Scott's
    rule for the scores themselves (gaussian_kde would take the sample size from the weights: about the number of
    bins used, which smooths 5-8 times more), and no narrower than a bin."""
    centres = (np.arange(len(counts)) + 0.5) / len(counts)
    used = counts > 0
    if used.sum() < 2:
        raise ValueError("KDE selection needs silver scores spread over at least two histogram bins")
    spread = float(np.sqrt(np.cov(centres[used], aweights=counts[used])))
    factor = max(float(counts.sum()) ** -0.2, 1 / (len(counts) * spread))
    return gaussian_kde(centres[used], bw_method=factor, weights=counts[used])


def silver_density(silver_counts: np.ndarray, points: np.ndarray) -> np.ndarray:
    """F_silver at ``points``: the histogram's KDE, or, when every score falls in one bin (a
    near-constant cross-encoder), the histogram density itself, since a KDE of one point has no bandwidth."""
    if np.count_nonzero(silver_counts) >= 2:
        return density_from_histogram(silver_counts)(points)
    bins = len(silver_counts)
    index = np.minimum((np.clip(points, 0.0, 1.0) * bins).astype(int), bins - 1)
    return silver_counts[index] * bins / max(silver_counts.sum(), 1)


def regression_curve(gold_labels: np.ndarray, silver_counts: np.ndarray, mode: str) -> AcceptanceCurve:
    if len(np.unique(gold_labels)) < 2:
        raise ValueError("KDE selection needs at least two distinct gold scores")
    if silver_counts.sum() == 0:
        raise ValueError("KDE selection got no silver scores")
    f_gold = gaussian_kde(gold_labels)(GRID)
    if np.count_nonzero(silver_counts) >= 2:
        f_silver = np.maximum(density_from_histogram(silver_counts)(GRID), 1e-12)
    else:  # every score in one bin (a near-constant teacher): that bin's density, flat, so that Q between two grid
        # points inside the bin does not reach for the empty bins beside it
        f_silver = np.full(len(GRID), float(len(silver_counts)))
    ratio = f_gold / f_silver
    q = np.minimum(1.0, ratio) if mode == "paper" else ratio / ratio.max()
    return AcceptanceCurve("regression", q_grid=q)


def positives_and_negatives(silver_counts: np.ndarray) -> tuple[int, int]:
    """Silver scores >= 0.5 and below, from the histogram (an even bin count puts a bin edge at 0.5)."""
    if len(silver_counts) % 2:
        raise ValueError(f"class-ratio selection needs an even bin count (a bin edge at 0.5), got {len(silver_counts)}")
    half = len(silver_counts) // 2
    return int(silver_counts[half:].sum()), int(silver_counts[:half].sum())


def classification_curve(gold_labels: np.ndarray, silver_counts: np.ndarray) -> AcceptanceCurve:
    """Keep all silver positives; keep negatives at the rate that gives the gold negative/positive ratio."""
    gold_pos, gold_neg = int(np.sum(gold_labels == 1)), int(np.sum(gold_labels == 0))
    silver_pos, silver_neg = positives_and_negatives(silver_counts)
    if gold_pos == 0 or silver_neg == 0:
        return AcceptanceCurve("classification", negative_rate=1.0)
    wanted_negatives = silver_pos * gold_neg / gold_pos
    return AcceptanceCurve("classification", negative_rate=float(min(1.0, wanted_negatives / silver_neg)))


def pair_uniforms(sentences1: np.ndarray, sentences2: np.ndarray, seed: int) -> np.ndarray:
    """A uniform [0,1) number per pair from a keyed hash of the unordered pair: stable across blocks and runs.

    Args:
        sentences1: The pairs' first sentences.
        sentences2: Their second sentences, as many; (a,b) and (b,a) get the same number.
        seed: The hash key; another seed gives independent numbers.

    Example:
        ::

            pair_uniforms(np.array(["a", "b"]), np.array(["b", "a"]), seed=42)  # two equal numbers
    """
    key = seed.to_bytes(8, "little", signed=True)
    out = np.empty(len(sentences1), dtype=np.float64)
    for i, (a, b) in enumerate(zip(sentences1, sentences2)):
        low, high = (a, b) if a <= b else (b, a)
        digest = hashlib.blake2b(f"{low}\x00{high}".encode(), digest_size=8, key=key).digest()
        out[i] = int.from_bytes(digest, "little") / 2.0**64
    return out


def mark_accepted(silver: SilverRows, curve: AcceptanceCurve, seed: int) -> SilverRows:
    """Add the boolean `accepted` column; rows are kept, so counts before and after selection add up.

    A row is accepted when its ``pair_uniforms`` number is below the curve's probability at its score.

    Args:
        silver: Labeled pairs (sentence1, sentence2, score): a table, or a Dataset (marked lazily, batch by batch).
        curve: The keep probability of each score.
        seed: Keys the hash of each pair (``pair_uniforms``).

    Example:
        ::

            marked = mark_accepted(silver, AcceptanceCurve("classification", negative_rate=0.25), seed=42)
    """

    def accepted(sentences1: np.ndarray, sentences2: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return pair_uniforms(sentences1, sentences2, seed) < curve.probability(scores.astype(np.float64))

    if isinstance(silver, pa.Table):
        columns = (silver.column(name).to_numpy(zero_copy_only=False) for name in ("sentence1", "sentence2", "score"))
        return silver.append_column("accepted", pa.array(accepted(*columns), pa.bool_()))

    def accept(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["accepted"] = accepted(batch["sentence1"], batch["sentence2"], batch["score"])
        return batch

    return silver.map_batches(accept, batch_format="numpy")


def select(
    silver: SilverRows, gold_labels: np.ndarray, task: TaskType, seed: int, mode: str = "paper", bins: int = 100
) -> tuple[SilverRows, AcceptanceCurve]:
    """Mark which silver rows KDE (regression) or class-ratio (classification) selection keeps.

    Args:
        silver: Labeled pairs (sentence1, sentence2, score in [0, 1]): a table, or a Ray Dataset for large sets.
        gold_labels: The gold train labels whose distribution the kept scores should follow.
        task: ``regression`` (KDE) or ``classification`` (positives kept, negatives at the gold ratio).
        seed: Keys the hash of each pair that decides its acceptance.
        mode: ``paper`` (Q = min(1, F_gold / F_silver)) or ``exact`` (kept density proportional to F_gold).
        bins: Bins of the silver-score histogram.

    Returns:
        The same rows with a boolean ``accepted`` column (nothing is dropped), and the acceptance curve.

    Example:
        ::

            selected, curve = select(silver, gold.train.column("label").to_numpy(), "regression", seed=42)
            kept = accepted_rows(selected)
    """
    counts = score_histogram(silver, bins)
    curve = classification_curve(gold_labels, counts) if task == "classification" else regression_curve(gold_labels, counts, mode)
    return mark_accepted(silver, curve, seed), curve
