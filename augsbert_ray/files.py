"""Writing files so that a reader, or a run resumed after a kill, never sees a half-written one; and the digest of
files' bytes, which tells a run whether its inputs changed."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_text", "files_digest"]


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed over ``path`` when the block ends, removed when it
    raises. The temporary name is unique, so that concurrent writers (a retried labeling task beside a dying one,
    two actors exporting one model) never share it, and starts with ``.<name>.`` and ends with ``.tmp``.

    Example:
        ::

            with atomic_path(Path("out/part-00000.parquet")) as tmp:
                pq.write_table(table, tmp)
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through ``atomic_path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def files_digest(paths: Iterable[Path]) -> str:
    """The SHA-256 (hex) of the files' bytes, one file after another, read 1 MiB at a time."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
