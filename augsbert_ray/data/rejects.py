"""Rows that cannot be used are counted and written out, never silently dropped."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Reject:
    file: str
    line: int
    field: str
    reason: str
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line} field {self.field!r}: {self.reason}"


RECORD = "(line)"  # the field of a reject for a record that could not be read at all
EMPTY = "empty sentence"
NUL = "a NUL character (\\x00) inside the text: a binary file, or one cut short?"  # no tokenizer or text file keeps it
# whitespace, control and format characters (a zero-width space, a BOM, a soft hyphen): a sentence of these alone
# reaches the model as an empty one
INVISIBLE = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf"})


def is_blank(text: str) -> bool:
    """Whether ``text`` has no visible character (``"\u200b "`` has none)."""
    return all(unicodedata.category(char) in INVISIBLE for char in text)


def bad_utf8(file: str | Path, line: int, raw: bytes) -> Reject:
    """The reject of a record or line whose bytes are not UTF-8, with its first 200 bytes as text."""
    return Reject(str(file), line, RECORD, "bad UTF-8", raw[:200].decode("utf-8", errors="replace"))


class TooManyRejectsError(ValueError):
    pass


def write_rejects(rejects: list[Reject], path: Path) -> None:
    """Write each reject as one JSON line (file, line, field, reason, text), making the parent directory; no
    rejects write an empty file.

    Args:
        rejects: The rows rejected, e.g. ``gold.rejects``.
        path: The JSON Lines file, replaced if it exists.

    Example:
        ::

            write_rejects(gold.rejects, Path("runs/stsb-20261125-101500/rejects.jsonl"))
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for reject in rejects:
            out.write(json.dumps(asdict(reject), ensure_ascii=False) + "\n")


def reason_summary(rejects: list[Reject], shown: int = 3, width: int = 80) -> str:
    """The commonest ``shown`` reasons with their counts, each cut to ``width`` characters, and how many more: a
    reason often quotes its bad value, and one entry per value made lines of thousands of characters.

    Example:
        >>> reason_summary([Reject("f", n, "label", f"non-numeric score 'x{n % 5}'") for n in range(9)], shown=2)
        "non-numeric score 'x0': 2, non-numeric score 'x1': 2 and 3 more reasons (5 rows)"
    """
    by_reason: dict[str, int] = {}
    for reject in rejects:
        by_reason[reject.reason] = by_reason.get(reject.reason, 0) + 1
    ranked = sorted(by_reason.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{reason if len(reason) <= width else reason[:width - 1] + '…'}: {count}" for reason, count in ranked[:shown])
    rest = ranked[shown:]
    if rest:
        rows = sum(count for _, count in rest)
        text += f" and {len(rest)} more reason{'' if len(rest) == 1 else 's'} ({rows} row{'' if rows == 1 else 's'})"
    return text


def check_reject_fraction(
    rows_read: int, rejects: list[Reject], max_fraction: float, rejects_path: Path | None,
    setting: str = "data.max_reject_fraction", scope: str = "",
) -> None:
    """Fail the job when bad rows pass the configured share (``setting`` names it) of the rows read: of everything
    read, or of one split's file when ``scope`` names that split. No rows read at all fails it too.

    Args:
        rows_read: Rows read, accepted and rejected.
        rejects: The rejected ones among them.
        max_fraction: The largest share of rejected rows allowed, in [0, 1] (0.01: 1%).
        rejects_path: The file the rejects were written to, named in the error; None names none.
        setting: The setting that holds ``max_fraction``, named in the error.
        scope: What was read, at the start of the error, e.g. ``"gold dev split"``; default "": everything.

    Example:
        ::

            check_reject_fraction(read.rows_read, read.rejects, 0.01, Path("rejects.jsonl"))  # or TooManyRejectsError
    """
    if rows_read == 0:
        raise TooManyRejectsError(f"{scope + ': ' if scope else ''}no rows were read: check the data files")
    fraction = len(rejects) / rows_read
    if fraction > max_fraction:
        summary = reason_summary(rejects)
        listed = f"; all listed in {rejects_path}" if rejects_path is not None else ""
        raise TooManyRejectsError(
            f"{scope + ': ' if scope else ''}{len(rejects)} of {rows_read} rows rejected ({fraction:.2%}), above {setting}="
            f"{max_fraction:.2%} ({summary}); first at {rejects[0]}{listed}"
        )
