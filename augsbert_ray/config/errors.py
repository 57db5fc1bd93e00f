"""Internal: SpecError, and check_output_dir, which raises it for an output directory that cannot be used."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Literal


class SpecError(ValueError):
    """A job spec, flag or input that cannot be used; the one-line message names the field, flag or file.

    Example:
        >>> try:
        ...     ar.load_spec(None, ["sampling.strategies=[bm25, magic]"])
        ... except SpecError as exc:
        ...     print(str(exc).splitlines()[1].split(":")[0].strip())
        sampling.strategies.1
    """


NAME_MAX = 255  # bytes in one name of a path (Linux and macOS file systems)
PATH_MAX = 4096  # bytes in a whole path (Linux)
PathKind = Literal["file", "dir", "any"]


def path_problem(path: Path | str, kind: PathKind = "any") -> str | None:
    """Why ``path`` cannot be read as a ``kind``, in a few words, or None: the one check behind every path a job spec
    or a flag takes (a name over 255 bytes, a symlink loop, nothing there, no permission, a directory for a file).

    Args:
        path: The path as given.
        kind: ``file``, ``dir`` (a directory) or ``any``.

    Example:
        >>> path_problem("/no/such/file.csv", "file")
        'file not found: /no/such/file.csv'
        >>> path_problem("x" * 300)
        'a name of 300 bytes; a file name has at most 255'
    """
    if problem := name_problem(Path(path)):
        return problem
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path}: a symlink loop"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"{'file' if kind == 'file' else 'directory' if kind == 'dir' else 'path'} not found: {path}"
        return f"{path}: {exc.strerror}"
    if kind == "file" and stat.S_ISDIR(info.st_mode):
        return "a directory, not a file"
    if kind == "dir" and not stat.S_ISDIR(info.st_mode):
        return "a file, not a directory"
    if not os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(info.st_mode) else 0)):
        return f"{path}: not readable (permission denied)"
    return None


def name_problem(path: Path) -> str | None:
    """A name in ``path`` longer than a file system takes, or a whole path longer than Linux takes; else None."""
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        return f"a name of {longest} bytes; a file name has at most {NAME_MAX}"
    if len(os.fsencode(path)) >= PATH_MAX:
        return f"a path of {len(os.fsencode(path))} bytes; a path has fewer than {PATH_MAX}"
    return None


def check_output_dir(path: Path, field: str) -> None:
    """Refuse, with a SpecError naming ``field`` (a spec field or a flag) and the path, an output directory that
    cannot be made or written: its nearest existing part must be a directory that takes new files. Creates nothing,
    so a command refused later (by Ray's checks) leaves no directory behind."""
    if problem := name_problem(path):
        raise SpecError(f"{field} {path}: {problem}")
    # os.path, not Path: it answers False where a parent cannot be searched (the last part, '.' or '/', exists)
    existing = next(part for part in (path, *path.parents) if os.path.lexists(part))
    if os.path.islink(existing) and not os.path.exists(existing):  # a link to nowhere, or a loop
        loop = path_problem(existing) or ""
        raise SpecError(f"{field} {path}: {loop if 'loop' in loop else f'{existing} is a link to nothing'}")
    if not os.path.isdir(existing):
        what = "is" if existing == path else f"{existing} is"
        raise SpecError(f"{field} {path}: {what} a file, not a directory")
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise SpecError(f"{field} {path}: cannot write there ({exc.strerror})") from None
