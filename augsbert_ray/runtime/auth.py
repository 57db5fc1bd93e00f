"""Internal: the Ray auth token file (check_token_file, read_token).

Created private (mode 600), and refused when another user owns it or may read it.
Ray takes the token from RAY_AUTH_TOKEN, else from the file RAY_AUTH_TOKEN_PATH, else from ~/.ray/auth_token.
Whoever can read that file can run code on the cluster.
"""

from __future__ import annotations

import os
import secrets
import stat
from contextlib import suppress
from pathlib import Path

DEFAULT_TOKEN_FILE = Path("~/.ray/auth_token")


class InsecureTokenError(ValueError):
    """A token file that another user owns, or that group or others may access."""


def token_file() -> Path | None:
    """The file Ray reads the token from: None when RAY_AUTH_MODE=disabled or RAY_AUTH_TOKEN holds the token,
    else RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" or os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return None
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or DEFAULT_TOKEN_FILE).expanduser()


def check_private(path: Path) -> None:
    """Refuse a token file owned by another user, or one that group or others may access.

    Args:
        path: the token file.

    Example:
        ::

            check_private(Path("/tmp/augsbert-cluster-me/auth_token"))
    """
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise InsecureTokenError(f"token file {path} is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}): use a token file of your own")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise InsecureTokenError(f"token file {path} has mode {mode:03o}: group or others may access it; chmod 600 {path}")


def read_token(path: Path) -> str:
    """The token in ``path``, after ``check_private``."""
    check_private(path)
    return path.read_text(encoding="utf-8").strip()


def check_token_file(create: bool = False) -> None:
    """Check the token file Ray will read (``token_file``), when there is one.

    Args:
        create: write a missing file with a new random token, mode 600, before an embedded Ray starts: Ray
            turns token authentication on for it and would write the file readable by everyone.

    Example:
        ::

            check_token_file(create=True)  # then ray.init() starts a local Ray with this token
    """
    path = token_file()
    if path is None:
        return
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with suppress(FileExistsError):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(secrets.token_hex(32))
    if path.is_symlink() and not path.exists():  # Ray would create the file at its target, readable by everyone
        raise InsecureTokenError(f"token file {path} is a symlink to {os.readlink(path)}, which does not exist (Ray would create it "
                                 "readable by everyone); create it there with chmod 600, or remove the link")
    if path.exists():
        check_private(path)
