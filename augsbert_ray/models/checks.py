"""Check before Ray starts that a resolved model loads, and read its settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

from augsbert_ray.config import SpecError, path_problem


# The files transformers loads a model's weights from (whole, or an index of shards).
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def check_model(model: str) -> None:
    """A resolved model must load: a local directory whose config.json transformers reads, or a model id that
    loads (from the cache when offline). Checked before Ray starts, so a typo fails in a second, not in an actor.

    Args:
        model: a resolved model name (see ``resolve_model``): a local directory or a Hugging Face id.

    Example:
        ::

            check_model("runs/stsb-20261124/models/sbert")
    """
    from transformers import AutoConfig

    path = Path(model)
    if os.path.lexists(path) and (problem := path_problem(path, "dir")):  # a loop, a file, no permission
        raise SpecError(f"model {model}: {problem}")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SpecError(f"model {model}: not a model directory (no config.json)")
        json_object(path / "config.json", model)
    elif path.is_absolute() or model.startswith((".", "~")):
        raise SpecError(f"model path not found: {model}")
    try:
        AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as exc:
        what = "config.json is not a model config" if path.is_dir() else "no such directory, and not a loadable model id"
        raise SpecError(f"model {model}: {what} ({str(exc).splitlines()[0]})") from None
    if path.is_dir() and not any((path / name).is_file() for name in WEIGHT_FILES):
        raise SpecError(f"model {model}: no weights in the directory ({' or '.join(WEIGHT_FILES[:2])})")


def model_outputs(model: str) -> int:
    """The outputs of a model's classification head (``num_labels`` in its config.json)."""
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(model).num_labels)


def json_object(path: Path, model: str) -> dict:
    """A model's JSON settings file, read as an object; a SpecError naming the model and the file otherwise."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SpecError(f"model {model}: {path.name} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(settings, dict):
        raise SpecError(f"model {model}: {path.name} is not a JSON object")
    return settings
