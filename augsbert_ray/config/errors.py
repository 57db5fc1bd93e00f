"""Internal: SpecError, and check_output_dir, which raises it for an output directory that cannot be used."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class SpecError(ValueError):
    """A job spec, flag or input that cannot be used; the one-line message names the field, flag or file.

    Example:
        >>> try:
        ...     ar.load_spec(None, ["sampling.strategies=[bm25, magic]"])
        ... except SpecError as exc:
        ...     print(str(exc).splitlines()[1].split(":")[0].strip())
        sampling.strategies.1
    """


def check_output_dir(path: Path, field: str) -> None:
    """Refuse, with a SpecError naming ``field`` (a spec field or a flag) and the path, an output directory that
    cannot be made or written: its nearest existing part must be a directory that takes new files. Creates nothing,
    so a command refused later (by Ray's checks) leaves no directory behind."""
    # os.path, not Path: it answers False where a parent cannot be searched (the last part, '.' or '/', exists)
    existing = next(part for part in (path, *path.parents) if os.path.lexists(part))
    if not os.path.isdir(existing):
        what = "is" if existing == path else f"{existing} is"
        raise SpecError(f"{field} {path}: {what} a file, not a directory")
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise SpecError(f"{field} {path}: cannot write there ({exc.strerror})") from None
