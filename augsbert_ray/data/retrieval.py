"""Retrieval data as typed, frozen values: a corpus of documents, queries, graded relevance judgements (qrels), and
per query the documents never to be ranked for it; a seeded split by group (debate, topic) and distant supervision
from a corpus alone.

The readers live in ``retrieval_readers`` (JSONL, Parquet, BEIR's folder layout) and ``arguana`` (the ArguAna
counterargs tree). Every reader keeps its counts whole: records read = records kept + records rejected, each reject
naming file, line and field.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, Literal, TypeVar

import numpy as np

from augsbert_ray.data.rejects import Reject, is_blank

T = TypeVar("T")
_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")


def _frozen_column(owner: object, name: str, values: Iterable[object] | None) -> None:
    """Store ``values`` as a tuple on a frozen dataclass (lists are welcome in the constructor); each must be text,
    since a None or a number turned into text here would pass for a document."""
    if values is not None:
        column = tuple(values)
        wrong = [value for value in column if not isinstance(value, str)]
        if wrong:
            raise TypeError(f"{type(owner).__name__}.{name}: {wrong[0]!r} is not text")
        object.__setattr__(owner, name, column)


def _check_ids(what: str, ids: tuple[str, ...], **columns: tuple[str, ...] | None) -> None:
    for name, column in columns.items():
        if column is not None and len(column) != len(ids):
            raise ValueError(f"{what}: {len(ids)} ids but {len(column)} {name}")
    if len(set(ids)) != len(ids):
        repeated, times = Counter(ids).most_common(1)[0]
        raise ValueError(f"{what}: id {repeated!r} appears {times} times")


@dataclass(frozen=True)
class RetrievalCorpus:
    """Documents in file order. ``titles`` and ``groups`` are None when no document has one, else "" where a
    document lacks it. A group is what a split must not cut through, e.g. a debate."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    titles: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("ids", "texts", "titles", "groups"):
            _frozen_column(self, name, getattr(self, name))
        _check_ids("corpus", self.ids, texts=self.texts, titles=self.titles, groups=self.groups)

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def position(self) -> dict[str, int]:
        """Doc id -> its row."""
        return {doc_id: row for row, doc_id in enumerate(self.ids)}

    def subset(self, keep: Collection[str]) -> RetrievalCorpus:
        """The documents whose ids are in ``keep``, in corpus order."""
        rows = [row for row, doc_id in enumerate(self.ids) if doc_id in keep]

        def pick(column: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return None if column is None else tuple(column[row] for row in rows)

        return RetrievalCorpus(pick(self.ids), pick(self.texts), pick(self.titles), pick(self.groups))  # type: ignore[arg-type]


@dataclass(frozen=True)
class RetrievalQueries:
    """Queries in file order; ``groups`` as in ``RetrievalCorpus`` (None: none has one)."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    groups: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("ids", "texts", "groups"):
            _frozen_column(self, name, getattr(self, name))
        _check_ids("queries", self.ids, texts=self.texts, groups=self.groups)

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def text_of(self) -> dict[str, str]:
        """Query id -> its text."""
        return dict(zip(self.ids, self.texts))

    def subset(self, keep: Collection[str]) -> RetrievalQueries:
        """The queries whose ids are in ``keep``, in file order."""
        rows = [row for row, query_id in enumerate(self.ids) if query_id in keep]
        groups = None if self.groups is None else tuple(self.groups[row] for row in rows)
        return RetrievalQueries(tuple(self.ids[row] for row in rows), tuple(self.texts[row] for row in rows), groups)


@dataclass(frozen=True)
class Qrels:
    """Relevance judgements: query id -> {doc id: grade}. A grade above 0 is relevant (as in trec_eval); 0 or
    below is judged not relevant."""

    grades: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        grades = {str(query): {str(doc): int(grade) for doc, grade in docs.items()} for query, docs in self.grades.items()}
        object.__setattr__(self, "grades", grades)  # a copy: the caller's dicts may change later

    def __len__(self) -> int:
        """The (query, doc) judgements."""
        return sum(len(docs) for docs in self.grades.values())

    def relevant(self, query_id: str) -> dict[str, int]:
        """The query's relevant docs and their grades (above 0); {} for a query without any."""
        return {doc: grade for doc, grade in self.grades.get(query_id, {}).items() if grade > 0}

    @property
    def judged_query_ids(self) -> tuple[str, ...]:
        """Queries with at least one relevant doc: the ones a metric averages over."""
        return tuple(query for query, docs in self.grades.items() if any(grade > 0 for grade in docs.values()))


@dataclass(frozen=True)
class RetrievalSet:
    """One retrieval task: rank ``corpus`` for each of ``queries``, judged by ``qrels``. ``excluded`` names, per
    query, docs never to be ranked for it (in BEIR's ArguAna, the query's own argument). ``rejects`` and ``counts``
    record what the readers left out and why: per stream, read = kept + rejected."""

    corpus: RetrievalCorpus
    queries: RetrievalQueries
    qrels: Qrels
    excluded: Mapping[str, frozenset[str]] = field(default_factory=dict)
    rejects: tuple[Reject, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.qrels, Qrels):  # a plain {query: {doc: grade}}
            object.__setattr__(self, "qrels", Qrels(self.qrels))
        object.__setattr__(self, "excluded", {q: frozenset(docs) for q, docs in self.excluded.items() if docs})
        object.__setattr__(self, "rejects", tuple(self.rejects))
        query_ids, doc_ids = set(self.queries.ids), self.corpus.position
        for name, mapping in (("qrels", self.qrels.grades), ("excluded", self.excluded)):
            for query, docs in mapping.items():
                if query not in query_ids:
                    raise ValueError(f"{name}: query {query!r} is not among the queries")
                unknown = next((doc for doc in docs if doc not in doc_ids), None)
                if unknown is not None:
                    raise ValueError(f"{name}: query {query!r} names doc {unknown!r}, not in the corpus")

    @property
    def judged_queries(self) -> RetrievalQueries:
        """The queries with at least one relevant doc (the ones evaluated), in file order."""
        return self.queries.subset(set(self.qrels.judged_query_ids))


def keep_groups(rset: RetrievalSet, groups: Collection[str]) -> RetrievalSet:
    """The part of a task whose groups are in ``groups``: their documents, queries, qrels and exclusions only.

    A judgement or exclusion naming a doc of another group is dropped with it (that doc is not in this part).

    Args:
        rset: A task whose corpus and queries both have groups.
        groups: The groups to keep.

    Returns:
        The part, with ``counts`` ``groups`` (of ``groups``, those with a document or query here), ``documents``
        and ``queries``.

    Example:
        ::

            # ArguAna files some debates of validation under training too (another theme): hold them out
            train = read_arguana(root, "training")
            valid = read_arguana(root, "validation")
            valid = keep_groups(valid, set(valid.corpus.groups) - set(train.corpus.groups))
    """
    if rset.corpus.groups is None or rset.queries.groups is None:
        raise ValueError("keep_groups: the corpus and the queries need groups")
    keep = set(groups)
    corpus = rset.corpus.subset({d for d, g in zip(rset.corpus.ids, rset.corpus.groups) if g in keep})
    queries = rset.queries.subset({q for q, g in zip(rset.queries.ids, rset.queries.groups) if g in keep})
    ids, docs = set(queries.ids), corpus.position
    qrels = Qrels({q: {d: g for d, g in grades.items() if d in docs} for q, grades in rset.qrels.grades.items() if q in ids})
    excluded = {q: {d for d in banned if d in docs} for q, banned in rset.excluded.items() if q in ids}
    present = keep & (set(corpus.groups or ()) | set(queries.groups or ()))
    counts = {"groups": len(present), "documents": len(corpus), "queries": len(queries)}
    return RetrievalSet(corpus, queries, qrels, excluded, counts=counts)


def split_by_group(rset: RetrievalSet, seed: int, fraction: float = 0.5) -> tuple[RetrievalSet, RetrievalSet]:
    """Split a task into two disjoint tasks by group (e.g. ArguAna's validation debates into dev and test halves).

    The distinct groups (those with a document or query) are sorted and shuffled by ``seed``; the first
    ``round(fraction * groups)`` go to the first half. Each half is ``keep_groups`` of its groups, so no group (and
    no document) is in both halves, and each half ranks its own, smaller corpus.

    Args:
        rset: A task whose corpus and queries both have groups.
        seed: The shuffle's seed: the same seed gives the same halves, whatever the order the groups were read in.
        fraction: The share of groups (not of queries) in the first half, in (0, 1).

    Returns:
        (first half, second half), each with ``counts`` ``groups``, ``documents`` and ``queries``.

    Example:
        ::

            dev, test = split_by_group(read_arguana(data_dir / "arguana", "validation", "counter"), seed=42)
    """
    if rset.corpus.groups is None or rset.queries.groups is None:
        raise ValueError("split_by_group: the corpus and the queries need groups")
    if not 0 < fraction < 1:
        raise ValueError(f"split_by_group: fraction must be in (0, 1), got {fraction}")
    groups = sorted(set(rset.corpus.groups) | set(rset.queries.groups))
    order = np.random.default_rng(seed).permutation(len(groups))
    cut = int(round(fraction * len(groups)))
    first = {groups[i] for i in order[:cut]}
    return keep_groups(rset, first), keep_groups(rset, set(groups) - first)


def normalized_query(text: str) -> str:
    """The thesis's normalization of a conclusion: lower case, no punctuation, single spaces ("Abortion!" and
    "abortion" are one query)."""
    return " ".join(_PUNCTUATION.sub(" ", text.casefold()).split())


def distant_queries(
    corpus: RetrievalCorpus, *, source: Literal["first_line", "title"] = "first_line", query_prefix: str = "q:",
    merge_identical: bool = True, origin: str = "corpus",
) -> RetrievalSet:
    """Distant supervision from a corpus alone: a document's first line (a conclusion, a headline) or its title
    becomes a query, and the rest of it the relevant document (as the argument-retrieval thesis in seeds/ does).

    A document with no query (blank first line or title) or nothing after it is a counted reject and left out of
    both queries and corpus. With ``merge_identical``, documents whose queries are equal once lower-cased and
    stripped of punctuation give one query, and all their bodies are relevant to it (the thesis groups arguments
    by normalized conclusion): otherwise an identical query would be judged against another's answer.

    Args:
        corpus: Documents whose text's first line (``source="first_line"``) or title (``"title"``) is the query.
        source: Where the query comes from. With ``"first_line"`` the titles stay on the documents; with
            ``"title"`` they are dropped, since the title is the query.
        query_prefix: Put before the first document's id to make the query id (a query id equal to a doc id
            would be dropped by BEIR's ignore-identical-ids rule).
        merge_identical: One query per normalized query text (default), or one per document.
        origin: Names the corpus (e.g. its file) in rejects; the line of a reject is the document's row (1-based).

    Returns:
        A RetrievalSet of (query, body) pairs with grade 1, groups kept, no exclusions; ``counts``
        ``documents_read``, ``documents`` (kept), ``rejected`` and ``queries``.

    Example:
        ::

            pairs = distant_queries(read_corpus("my_corpus.jsonl").value)  # first line -> query, rest -> document
            len(pairs.queries), len(pairs.corpus)
    """
    if source == "title" and corpus.titles is None:
        raise ValueError(f"distant_queries: {origin} has no titles; use source='first_line'")
    kept: list[int] = []
    bodies: list[str] = []
    query_texts: list[str] = []
    rejects: list[Reject] = []
    for row, text in enumerate(corpus.texts):
        if source == "title":
            query, body, query_field = corpus.titles[row].strip(), text.strip(), "title"  # type: ignore[index]
        else:
            first, _, rest = text.partition("\n")  # literally the first line: a blank one is no query
            query, body, query_field = first.strip(), rest.strip(), "text"
        if is_blank(query):
            blank = "title" if source == "title" else "first line"
            rejects.append(Reject(origin, row + 1, query_field, f"no query (a blank {blank})", text[:200]))
        elif is_blank(body):
            rejects.append(Reject(origin, row + 1, "text", "no document after the query", text[:200]))
        else:
            kept.append(row)
            bodies.append(body)
            query_texts.append(query)
    ids = [corpus.ids[row] for row in kept]
    groups = None if corpus.groups is None else [corpus.groups[row] for row in kept]
    titles = None if corpus.titles is None or source == "title" else [corpus.titles[row] for row in kept]
    by_key: dict[str, int] = {}  # normalized query -> its query's index
    q_ids: list[str] = []
    q_texts: list[str] = []
    q_groups: list[str] = []
    grades: dict[str, dict[str, int]] = {}
    for i, (doc_id, query) in enumerate(zip(ids, query_texts)):
        key = normalized_query(query) if merge_identical else doc_id
        if key not in by_key:
            by_key[key] = len(q_ids)
            q_ids.append(query_prefix + doc_id)
            q_texts.append(query)
            q_groups.append("" if groups is None else groups[i])
        grades.setdefault(q_ids[by_key[key]], {})[doc_id] = 1
    counts = {"documents_read": len(corpus), "documents": len(ids), "rejected": len(rejects), "queries": len(q_ids)}
    return RetrievalSet(
        RetrievalCorpus(ids, bodies, titles, groups),
        RetrievalQueries(q_ids, q_texts, None if groups is None else q_groups),
        Qrels(grades), rejects=tuple(rejects), counts=counts,
    )


@dataclass(frozen=True)
class RetrievalRead(Generic[T]):
    """What one file gave: ``value`` (a corpus, queries or qrels), the records read, and the rejected ones; records
    read = ``kept`` + ``len(rejects)``."""

    value: T
    rows_read: int
    rejects: tuple[Reject, ...] = ()

    @property
    def kept(self) -> int:
        """Documents, queries or (query, doc) judgements kept."""
        return len(self.value)  # type: ignore[arg-type]
