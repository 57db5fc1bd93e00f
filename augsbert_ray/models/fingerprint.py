"""Short ids of a model's weights and of its settings, recorded with what it scores and in a run's fingerprint."""

from __future__ import annotations

import hashlib
from pathlib import Path

from augsbert_ray.files import files_digest


def model_fingerprint(model: str) -> str:
    """A short id of a model's weights, recorded as the `labeler` of every silver pair it scores."""
    path = Path(model)
    if not path.is_dir():
        return model
    return f"{path.name}@{files_digest(sorted(path.glob('*.safetensors')) + sorted(path.glob('*.bin')))[:12]}"


# What besides its weights decides a model's outputs: configs (activation, pooling, labels) and tokenizer files
SETTINGS_SUFFIXES = (".json", ".txt", ".model")


def model_settings_digest(model: str) -> str:
    """A short id of a model's configs and tokenizer files, which decide its scores as much as its weights (a changed
    activation, pooling or vocabulary scores the same pairs differently); hidden folders (an ONNX cache) are left
    out. '' for a Hugging Face id.

    Example:
        ::

            model_settings_digest("runs/<run>/models/cross_encoder")  # '5c0e9b1d2a47'
    """
    path = Path(model)
    if not path.is_dir():
        return ""
    files = sorted(file for file in path.rglob("*") if file.suffix in SETTINGS_SUFFIXES and file.is_file()
                   and not any(part.startswith(".") for part in file.relative_to(path).parts))
    names = "\n".join(str(file.relative_to(path)) for file in files)
    return hashlib.sha256(names.encode() + bytes.fromhex(files_digest(files))).hexdigest()[:12]
