"""The read step of ``scenario: retrieval``: the train, dev and test tasks read from ArguAna, a BEIR folder or files;
the gold queries (a seeded subset of train's judged ones), the unlabeled queries (the rest, distant supervision, or a
file) and the dev and test tasks, with nothing of train in them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from augsbert_ray.config import JobSpec, RetrievalSpec, RetrievalSplitFiles, SpecError
from augsbert_ray.data import resolve_data_dir, write_rejects
from augsbert_ray.data.arguana import read_arguana
from augsbert_ray.data.retrieval import Qrels, RetrievalSet, distant_queries, keep_groups, split_by_group
from augsbert_ray.data.retrieval_readers import read_beir, read_corpus, read_qrels, read_queries
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.runtime import log


@dataclass(frozen=True)
class RetrievalData:
    """What the retrieval steps read from.

    Attributes:
        gold: The train corpus, the gold queries and their qrels (the teacher and SBERT learn from these).
        unlabeled: The unlabeled queries and the corpus their candidates come from (no qrels are used).
        dev: The dev task (the aggregation is fitted on it).
        test: The test task.
        counts: metrics.json ``counts`` entries of reading.
    """

    gold: RetrievalSet
    unlabeled: RetrievalSet
    dev: RetrievalSet
    test: RetrievalSet
    counts: dict[str, Any]


def arguana_root(spec: RetrievalSpec, data_dir: str | Path | None, data_spec_dir: Path | None = None) -> Path:
    """The ArguAna tree: ``retrieval.path``, else the data directory's ``arguana/``."""
    return spec.path if spec.path is not None else resolve_data_dir(data_dir or data_spec_dir) / "arguana"


def retrieval_sources(spec: JobSpec, data_dir: str | Path | None) -> dict[str, list[Path]]:
    """The files a retrieval run reads, by role, for the run's fingerprint (``--resume`` refuses changed data).

    Example:
        ::

            retrieval_sources(load_spec("jobs/arguana_premise.yaml"), None)["train"][:1]
    """
    rspec = spec.retrieval
    assert rspec is not None
    splits = [("train", rspec.train_name), ("test", rspec.test_name), *([("dev", rspec.dev_split)] if rspec.dev_split else [])]
    sources: dict[str, list[Path]] = {}
    if rspec.source == "arguana":
        root = arguana_root(rspec, data_dir, spec.data.data_dir)
        sources = {role: sorted(p for p in (root / name).rglob("*") if p.is_file()) for role, name in splits}
    elif rspec.source == "beir":
        assert rspec.path is not None
        shared = [rspec.path / "corpus.jsonl", rspec.path / "queries.jsonl"]
        sources = {role: [*shared, rspec.path / "qrels" / f"{name}.tsv"] for role, name in splits}
    else:
        assert rspec.files is not None
        given = {"train": rspec.files.train, "test": rspec.files.test, "dev": rspec.files.dev}
        sources = {role: [files.corpus, files.queries, files.qrels] for role, files in given.items() if files is not None}
    if isinstance(rspec.unlabeled, Path):
        sources["unlabeled"] = [rspec.unlabeled]
    return {role: [path for path in paths if path.is_file()] for role, paths in sources.items()}


def read_files(files: RetrievalSplitFiles) -> RetrievalSet:
    """One split of ``source: files``, its readers' rejects and counts kept."""
    corpus, queries = read_corpus(files.corpus), read_queries(files.queries)
    qrels = read_qrels(files.qrels, queries.value, corpus.value)
    counts: dict[str, int] = {}
    for name, read in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        counts |= {f"{name}_read": read.rows_read, f"{name}_kept": read.kept, f"{name}_rejected": len(read.rejects)}
    return RetrievalSet(corpus.value, queries.value, qrels.value, rejects=corpus.rejects + queries.rejects + qrels.rejects,
                        counts=counts)


def read_split(spec: JobSpec, name: str, role: str, data_dir: str | Path | None) -> RetrievalSet:
    rspec = spec.retrieval
    assert rspec is not None
    if rspec.source == "arguana":
        return read_arguana(arguana_root(rspec, data_dir, spec.data.data_dir), name, rspec.task)
    if rspec.source == "beir":
        assert rspec.path is not None
        return read_beir(rspec.path, name)
    assert rspec.files is not None
    files = getattr(rspec.files, role)
    assert files is not None
    return read_files(files)


def restrict_queries(rset: RetrievalSet, keep: set[str] | list[str]) -> RetrievalSet:
    """The task with only the queries in ``keep`` (their qrels and exclusions); the corpus stays whole."""
    ids = set(keep)
    qrels = Qrels({q: grades for q, grades in rset.qrels.grades.items() if q in ids})
    excluded = {q: docs for q, docs in rset.excluded.items() if q in ids}
    return RetrievalSet(rset.corpus, rset.queries.subset(ids), qrels, excluded)


def seeded_subset(ids: list[str] | tuple[str, ...], limit: int | None, seed: int) -> list[str]:
    """``limit`` of the ids, chosen by ``seed`` whatever their order; all of them (sorted) when limit is None."""
    ordered = sorted(ids)
    if limit is None or limit >= len(ordered):
        return ordered
    return sorted(ordered[i] for i in np.random.default_rng(seed).permutation(len(ordered))[:limit])


def split_by_query(rset: RetrievalSet, seed: int, fraction: float) -> tuple[RetrievalSet, RetrievalSet]:
    """Dev and test halves of a task without groups: its judged queries split (seeded), both ranking the whole corpus."""
    judged = sorted(rset.qrels.judged_query_ids)
    first = set(seeded_subset(judged, int(round(fraction * len(judged))), seed))
    return restrict_queries(rset, first), restrict_queries(rset, set(judged) - first)


def has_groups(rset: RetrievalSet) -> bool:
    return rset.corpus.groups is not None and rset.queries.groups is not None


def unlabeled_queries(spec: JobSpec, train: RetrievalSet, gold_ids: set[str]) -> RetrievalSet:
    """The queries whose candidates the teacher labels, with the corpus they are searched in."""
    rspec = spec.retrieval
    assert rspec is not None
    if rspec.unlabeled == "rest":
        rest = set(train.qrels.judged_query_ids) - gold_ids
        return RetrievalSet(train.corpus, train.queries.subset(rest), {}, {q: d for q, d in train.excluded.items() if q in rest})
    if rspec.unlabeled == "distant":
        try:
            made = distant_queries(train.corpus, source=rspec.distant_source, origin="train corpus")
        except ValueError as exc:
            raise SpecError(f"retrieval.distant_source: {exc}") from None
        return RetrievalSet(made.corpus, made.queries, {}, rejects=made.rejects, counts=made.counts)
    read = read_queries(rspec.unlabeled)
    return RetrievalSet(train.corpus, read.value, {}, rejects=read.rejects, counts={"read": read.rows_read, "rejected": len(read.rejects)})


def evaluation_halves(spec: JobSpec, test: RetrievalSet, dev: RetrievalSet | None, seed: int) -> tuple[RetrievalSet, RetrievalSet]:
    rspec = spec.retrieval
    assert rspec is not None
    if dev is None:
        halves = split_by_group if has_groups(test) else split_by_query
        dev, test = halves(test, seed, rspec.dev_fraction)
    # only the judged queries are ranked (BEIR's queries.jsonl holds every split's), or a seeded subset of them
    dev, test = (restrict_queries(part, seeded_subset(part.qrels.judged_query_ids, rspec.eval_queries, seed)) for part in (dev, test))
    return dev, test


def read_retrieval(ctx: RunContext) -> RetrievalData:
    """Read the retrieval task into a ``RetrievalData`` and the readers' rejects into rejects.jsonl.

    The dev and test tasks keep none of train's groups (ArguAna files 76 validation debates under training too):
    no query scored is one the teacher or student learned from. Unlabeled queries that are dev or test queries
    are dropped.

    Args:
        ctx: The run's context: its spec's ``retrieval`` section, the data directory, where rejects.jsonl goes.

    Returns:
        The gold, unlabeled, dev and test tasks and their counts; a SpecError when a part is left empty.

    Example:
        ::

            data = read_retrieval(RunContext.open(load_spec("jobs/arguana_premise.yaml"), Path("runs/r")))
            data.counts["queries"]  # {'gold': 300, 'train_judged': 3114, 'unlabeled': 200, 'dev': 100, 'test': 100}
    """
    spec, rspec = ctx.spec, ctx.spec.retrieval
    assert rspec is not None
    seed = rspec.split_seed if rspec.split_seed is not None else spec.seed
    train = read_split(spec, rspec.train_name, "train", ctx.data_dir)
    test_read = read_split(spec, rspec.test_name, "test", ctx.data_dir)
    dev_read = read_split(spec, rspec.dev_split, "dev", ctx.data_dir) if rspec.dev_split else None
    read_counts = {"train": dict(train.counts), "test": dict(test_read.counts), **({"dev": dict(dev_read.counts)} if dev_read else {})}
    rejects = [*train.rejects, *test_read.rejects, *(dev_read.rejects if dev_read else ())]
    dropped = 0
    if has_groups(train) and has_groups(test_read):
        train_groups = set(train.corpus.groups or ()) | set(train.queries.groups or ())
        test_groups = set(test_read.corpus.groups or ()) | set(test_read.queries.groups or ())
        dropped = len(test_groups & train_groups)
        test_read = keep_groups(test_read, test_groups - train_groups)
        if dev_read is not None and has_groups(dev_read):
            dev_read = keep_groups(dev_read, set(dev_read.corpus.groups or ()) - train_groups)
    dev, test = evaluation_halves(spec, test_read, dev_read, seed)
    judged = list(train.qrels.judged_query_ids)
    if not judged:
        raise SpecError(f"retrieval: the train split {rspec.train_name!r} has no judged query, so there is no gold")
    gold = restrict_queries(train, seeded_subset(judged, rspec.train_queries, spec.seed))
    unlabeled = unlabeled_queries(spec, train, set(gold.queries.ids))
    held_out = set(dev.queries.ids) | set(test.queries.ids)
    keep = seeded_subset([q for q in unlabeled.queries.ids if q not in held_out], rspec.unlabeled_queries, spec.seed)
    unlabeled_set = restrict_queries(unlabeled, keep)
    for name, part in (("dev", dev), ("test", test), ("gold", gold)):
        if not part.qrels.judged_query_ids:
            raise SpecError(f"retrieval: the {name} queries have no relevant document (retrieval.eval_queries, dev_fraction?)")
    if not unlabeled_set.queries.ids:
        raise SpecError(f"retrieval.unlabeled {rspec.unlabeled}: no unlabeled query left (retrieval.train_queries takes them all?)")
    rejects += unlabeled.rejects
    write_rejects(rejects, ctx.layout.rejects())
    counts = {
        "queries": {"gold": len(gold.qrels.judged_query_ids), "train_judged": len(judged), "unlabeled": len(keep),
                    "dev": len(dev.qrels.judged_query_ids), "test": len(test.qrels.judged_query_ids)},
        "corpus": {"train": len(train.corpus), "unlabeled": len(unlabeled.corpus), "dev": len(dev.corpus), "test": len(test.corpus)},
        "gold": {"queries": len(gold.qrels.judged_query_ids), "pairs": sum(len(gold.qrels.relevant(q)) for q in gold.queries.ids)},
        "unlabeled": {"queries": len(keep), "source": str(rspec.unlabeled)},
        "test_groups_dropped_as_in_train": dropped,
        "rejects": {"read": len(rejects)},
        "read": {**read_counts, **({"unlabeled": dict(unlabeled.counts)} if unlabeled.counts else {})},
    }
    log.info("retrieval: %d gold queries (%d pairs), %d unlabeled, dev %d / test %d queries over %d / %d documents",
             counts["gold"]["queries"], counts["gold"]["pairs"], len(keep), counts["queries"]["dev"], counts["queries"]["test"],
             len(dev.corpus), len(test.corpus))
    return RetrievalData(gold, unlabeled_set, dev, test, counts)
