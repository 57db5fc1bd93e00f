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

    def __str__(self) -> str:
        return f"{self.file}:{self.line} field {self.field!r}: {self.reason}"


class TooManyRejectsError(ValueError):
    pass


def write_rejects(rejects: list[Reject], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for reject in rejects:
            out.write(json.dumps(asdict(reject), ensure_ascii=False) + "\n")


def check_reject_fraction(
    rows_read: int, rejects: list[Reject], max_fraction: float, rejects_path: Path | None,
    setting: str = "data.max_reject_fraction", scope: str = "",
) -> None:
    """Fail the job when bad rows pass the configured share (``setting`` names it) of the rows read: of everything
    read, or of one split's file when ``scope`` names that split."""
    if rows_read == 0:
        raise TooManyRejectsError("no gold rows were read: check the data files")
    fraction = len(rejects) / rows_read
    if fraction > max_fraction:
        by_reason: dict[str, int] = {}
        for reject in rejects:
            by_reason[reject.reason] = by_reason.get(reject.reason, 0) + 1
        summary = ", ".join(f"{reason}: {count}" for reason, count in sorted(by_reason.items(), key=lambda kv: -kv[1]))
        listed = f"; all listed in {rejects_path}" if rejects_path is not None else ""
        raise TooManyRejectsError(
            f"{scope + ': ' if scope else ''}{len(rejects)} of {rows_read} rows rejected ({fraction:.2%}), above {setting}="
            f"{max_fraction:.2%} ({summary}); first at {rejects[0]}{listed}"
        )
