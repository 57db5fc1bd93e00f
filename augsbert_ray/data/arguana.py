"""The ArguAna counterargs corpus (Wachsmuth et al., ACL 2018) as retrieval tasks, read from its released tree
SPLIT/THEME/DEBATE/{pro,con}/ (see SOURCE.txt beside the data):

- ``counter``: a point's full text (conclusion and premise) is the query, its counter the relevant document, among
  all points and counters of the split; the query's own point is never ranked for it (BEIR's protocol).
- ``premise``: a point's conclusion is the query, its premise the relevant document, among all premises of the
  split (distant supervision, as in the argument-retrieval thesis in seeds/).

A debate is filed under up to three themes, in copies whose folder names differ (211 validation folders hold 193
debates). Copies of one argument are the same text under other doc ids: left in, a copy of the answer would be
judged wrong and a copy of the query would be ranked first. So by default each debate is read once (the copy
with the most argument files; ``theme_copies="keep"`` reads all), every debate's group is its URL (one for all of its
copies, so that a split by group keeps them together), a document whose text equals a relevant one's is relevant
too, and one whose text equals the query's is excluded as the query's own point is.

Copies also cross the released splits: 76 of validation's 164 debates with arguments are filed under training as
well (574 of its 1,287 counter queries are word for word in training). Hold them out of one side with
``keep_groups`` (data.retrieval) when a model fits on training and is scored on validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Literal

from augsbert_ray.config import SpecError
from augsbert_ray.data.rejects import RECORD, Reject, bad_utf8, is_blank
from augsbert_ray.data.retrieval import Qrels, RetrievalCorpus, RetrievalQueries, RetrievalSet

ArguanaTask = Literal["counter", "premise"]
_ARGUMENT_FILE = re.compile(r"(?P<side>pro|con)(?P<number>\d+)(?P<kind>a-point|b-counter)\.txt")
_URL_PREFIX = "https://idebate.org/debatabase/"


@dataclass(frozen=True)
class _Argument:
    doc_id: str  # THEME/DEBATE/pro01a-point
    group: str
    path: Path
    text: str  # the file's text, LF line ends; its first line is a point's conclusion
    counter_id: str | None = None  # a point's counter's doc id, if it has one

    @property
    def full(self) -> str:
        """The whole argument as a document or query."""
        return self.text.strip()


def _debate_key(folder: Path, theme_debate: str) -> str:
    """The debate's URL after idebate's prefix (the same for all copies of it), else THEME/DEBATE."""
    metadata = folder / "metadata.txt"
    if metadata.is_file():
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("\t")
            if key == "url" and value.strip():
                return value.strip().removeprefix(_URL_PREFIX)
    return theme_debate


def _read_text(path: Path) -> tuple[str, Reject | None]:
    raw = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    try:
        return raw.decode("utf-8").replace("\r\n", "\n"), None
    except UnicodeDecodeError:
        return "", bad_utf8(path, 1, raw)


def split_point(text: str) -> tuple[str, str]:
    """(conclusion, premise) of a point's text: its first line, and the rest after the blank line that follows it
    (a first line that is blank is an empty conclusion, not a missing line)."""
    first, _, rest = text.partition("\n")
    return first.strip(), rest.strip()


def _arguments(
    root: Path, theme_copies: Literal["drop", "keep"], with_counters: bool,
) -> tuple[list[_Argument], list[_Argument], list[Reject], dict[str, int]]:
    """(points, counters, rejects of unreadable files, counts) of a split, in sorted path order; counters are
    counted but not read unless ``with_counters`` (a task without them should not reject them). Of a debate's
    copies, ``drop`` reads the one with the most argument files (the first in sorted order of those): some
    folders of a debate hold no arguments at all (33 of validation's 211)."""
    debates: dict[str, list[tuple[Path, list[Path]]]] = {}  # group -> its folders and their argument files
    for folder in sorted(path for path in root.glob("*/*") if path.is_dir()):
        files = sorted(path for side in ("pro", "con") for path in (folder / side).glob("*.txt")
                       if _ARGUMENT_FILE.fullmatch(path.name))
        debates.setdefault(_debate_key(folder, f"{folder.parent.name}/{folder.name}"), []).append((folder, files))
    points: list[_Argument] = []
    counters: list[_Argument] = []
    rejects: list[Reject] = []
    counts = {"debates_read": 0, "debate_copies_dropped": 0, "points_read": 0, "counters_read": 0,
              "points_in_dropped_copies": 0, "counters_in_dropped_copies": 0}
    for group, copies in debates.items():
        read = max(range(len(copies)), key=lambda i: (len(copies[i][1]), -i))
        for i, (folder, files) in enumerate(copies):
            counts["debates_read"] += 1
            dropped = theme_copies == "drop" and i != read
            counts["debate_copies_dropped"] += dropped
            theme_debate = f"{folder.parent.name}/{folder.name}"
            for path in files:
                kind = "points" if path.name.endswith("a-point.txt") else "counters"
                counts[f"{kind}_read"] += 1
                if dropped:
                    counts[f"{kind}_in_dropped_copies"] += 1
                    continue
                if kind == "counters" and not with_counters:
                    continue
                text, reject = _read_text(path)
                if reject is not None:
                    rejects.append(reject)
                    continue
                doc_id = f"{theme_debate}/{path.stem}"
                if kind == "counters":
                    counters.append(_Argument(doc_id, group, path, text))
                else:
                    counter = path.with_name(path.name.replace("a-point.txt", "b-counter.txt"))
                    counter_id = f"{theme_debate}/{counter.stem}" if counter.is_file() else None
                    points.append(_Argument(doc_id, group, path, text, counter_id))
    by_id = attrgetter("doc_id")  # sorted path order, as in the tree
    return sorted(points, key=by_id), sorted(counters, key=by_id), rejects, counts


def _same_text(ids: list[str], texts: list[str]) -> dict[str, list[str]]:
    """Doc id -> the ids of all documents with its text (itself included)."""
    by_text: dict[str, list[str]] = {}
    for doc_id, text in zip(ids, texts):
        by_text.setdefault(text, []).append(doc_id)
    return {doc_id: by_text[text] for doc_id, text in zip(ids, texts)}


def read_arguana(
    root: Path | str, split: str = "validation", task: ArguanaTask = "counter",
    theme_copies: Literal["drop", "keep"] = "drop",
) -> RetrievalSet:
    """Read one split of the ArguAna counterargs tree as a retrieval task (see the module's doc).

    Doc ids are ``THEME/DEBATE/pro01a-point`` and ``.../pro01b-counter`` (task ``counter``; a query's id is its
    point's), or ``.../pro01a-premise`` with query ``.../pro01a-conclusion`` (task ``premise``). Groups are debates.
    A file that is not UTF-8 or holds no text is a counted reject; so is, in ``premise``, a point with an empty
    conclusion (an empty query). Points without a counter file (3 in validation) are no query in ``counter``:
    counted, not rejected, since the corpus ships them so.

    Args:
        root: The corpus folder (holding ``training/`` and ``validation/``), e.g. ``../shared/data/arguana``.
        split: ``training`` or ``validation`` (the test split is held back).
        task: ``counter`` (point -> its counter) or ``premise`` (conclusion -> its premise).
        theme_copies: ``drop`` (default) reads each debate once though it is filed under several themes; ``keep``
            reads every folder as released (validation: 1,290 points, 1,287 counters).

    Returns:
        The task, with ``counts``: ``debates_read``, ``points_read``, ``counters_read`` (every file, as SOURCE.txt
        counts them), ``debate_copies_dropped`` and the points and counters in them, ``documents``, ``queries``,
        ``document_rejects``, ``query_rejects``, ``unreadable_files`` and, for ``counter``,
        ``points_without_counter``. They add up: the files read less those in dropped copies are the documents
        made of them (a point, a counter, or in ``premise`` a point's premise) plus the unreadable files and the
        document rejects; and the points kept as documents are the queries plus the query rejects (plus, in
        ``counter``, the points without a counter).

    Example:
        ::

            task = read_arguana("../shared/data/arguana", "validation", "counter", theme_copies="keep")
            len(task.queries), len(task.corpus)  # (1287, 2577)
    """
    folder = Path(root) / split
    if not folder.is_dir():
        present = sorted(path.name for path in Path(root).iterdir() if path.is_dir()) if Path(root).is_dir() else []
        raise SpecError(f"ArguAna {folder}: no such folder (splits in {root}: {', '.join(present) or 'none'}); see SOURCE.txt")
    if task not in ("counter", "premise"):
        raise SpecError(f"ArguAna task must be 'counter' or 'premise', got {task!r}")
    points, counters, rejects, counts = _arguments(folder, theme_copies, with_counters=task == "counter")
    unreadable = len(rejects)
    if not points:
        raise SpecError(f"ArguAna {folder}: no point files (THEME/DEBATE/{{pro,con}}/proNNa-point.txt); see SOURCE.txt")
    doc_ids: list[str] = []
    doc_texts: list[str] = []
    doc_groups: list[str] = []
    q_ids: list[str] = []
    q_texts: list[str] = []
    q_groups: list[str] = []
    relevant: dict[str, str] = {}  # query id -> its answer's doc id
    own: dict[str, str] = {}  # query id -> its own document's id (task counter)

    def add_doc(argument: _Argument, doc_id: str, text: str, field: str) -> bool:
        if is_blank(text):
            rejects.append(Reject(str(argument.path), 1, field, "empty text", argument.text[:200]))
            return False
        doc_ids.append(doc_id)
        doc_texts.append(text)
        doc_groups.append(argument.group)
        return True

    if task == "counter":
        kept_counters = {c.doc_id for c in counters if add_doc(c, c.doc_id, c.full, "text")}
        points_kept = [p for p in points if add_doc(p, p.doc_id, p.full, "text")]
        counts["points_without_counter"] = 0
        for point in points_kept:
            if point.counter_id is None:
                counts["points_without_counter"] += 1
            elif point.counter_id in kept_counters:  # a counter rejected above leaves its point no answer
                q_ids.append(point.doc_id)
                q_texts.append(point.full)
                q_groups.append(point.group)
                relevant[point.doc_id] = point.counter_id
                own[point.doc_id] = point.doc_id
            else:
                reason = "its counter was rejected: no relevant document"
                rejects.append(Reject(str(point.path), 1, RECORD, reason, point.text[:200]))
    else:
        for point in points:
            conclusion, premise = split_point(point.text)
            base = point.doc_id.removesuffix("-point")
            if not add_doc(point, f"{base}-premise", premise, "premise"):
                continue
            if is_blank(conclusion):
                reason = "empty query text (a blank conclusion)"
                rejects.append(Reject(str(point.path), 1, "conclusion", reason, point.text[:200]))
                continue
            q_ids.append(f"{base}-conclusion")
            q_texts.append(conclusion)
            q_groups.append(point.group)
            relevant[q_ids[-1]] = f"{base}-premise"

    copies = _same_text(doc_ids, doc_texts)
    qrels = {query: dict.fromkeys(copies[answer], 1) for query, answer in relevant.items()}
    # the query's own point, and its copies (the same text: the query itself, filed under another theme)
    excluded = {query: set(copies[doc]) - qrels[query].keys() for query, doc in own.items()}
    counts |= {"documents": len(doc_ids), "queries": len(q_ids), "document_rejects": 0, "query_rejects": 0,
               "unreadable_files": unreadable}
    for reject in rejects[unreadable:]:
        counts["query_rejects" if reject.field in ("conclusion", RECORD) else "document_rejects"] += 1
    return RetrievalSet(
        RetrievalCorpus(doc_ids, doc_texts, None, doc_groups),
        RetrievalQueries(q_ids, q_texts, q_groups),
        Qrels(qrels), excluded, tuple(rejects), counts,
    )
