"""Rows that cannot be used are counted and written out, never silently dropped."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Reject:
    file: str
    line: int
    field: str
    reason: str
    text: str = ""


class TooManyRejectsError(ValueError):
    pass


def write_rejects(rejects: list[Reject], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for reject in rejects:
            out.write(json.dumps(asdict(reject), ensure_ascii=False) + "\n")


def check_reject_fraction(rows_read: int, rejects: list[Reject], max_fraction: float, rejects_path: Path) -> None:
    """Fail the job when bad rows pass the configured share of everything read."""
    if rows_read == 0:
        raise TooManyRejectsError("no gold rows were read: check the data files")
    fraction = len(rejects) / rows_read
    if fraction > max_fraction:
        by_reason: dict[str, int] = {}
        for reject in rejects:
            by_reason[reject.reason] = by_reason.get(reject.reason, 0) + 1
        summary = ", ".join(f"{reason}: {count}" for reason, count in sorted(by_reason.items(), key=lambda kv: -kv[1]))
        first = rejects[0]
        raise TooManyRejectsError(
            f"{len(rejects)} of {rows_read} rows rejected ({fraction:.2%}), above data.max_reject_fraction="
            f"{max_fraction:.2%} ({summary}); first at {first.file}:{first.line} field {first.field!r}: "
            f"{first.reason}; all listed in {rejects_path}"
        )
