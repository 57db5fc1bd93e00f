"""Writing files so that a reader, or a run resumed after a kill, never sees a half-written one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``. The temporary name is
    unique, so that concurrent writers (a retried labeling task beside a dying one) never share it."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
