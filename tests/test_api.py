"""The public API (augsbert_ray.__all__): `help(augsbert_ray)` shows it, every name is documented with an Example,
every function with Args and Returns, and the examples run (doctest) on the tiny models. ``run`` and ``tune``
examples are whole runs: tests/test_pipeline.py and tests/test_tuning.py run them through the CLI."""

from __future__ import annotations

import doctest
import inspect
import pydoc
from pathlib import Path

import numpy as np
import pytest

import augsbert_ray as ar
from augsbert_ray import pipeline, scoring

REPO = Path(__file__).resolve().parents[1]


def test_help_shows_the_api() -> None:
    text = pydoc.render_doc(ar, renderer=pydoc.plaintext)
    assert "The public API is the names in ``__all__``" in text
    for name in ar.__all__:
        assert name in text, name


@pytest.mark.parametrize("name", [name for name in ar.__all__ if callable(getattr(ar, name))])
def test_every_public_name_is_documented(name: str) -> None:
    public = getattr(ar, name)
    doc = inspect.getdoc(public) or ""
    assert "Example" in doc and ">>>" in doc, f"{name}: no runnable Example"
    if inspect.isfunction(public):
        assert "Returns:" in doc, f"{name}: no Returns"
        assert "Args:" in doc or not inspect.signature(public).parameters, f"{name}: no Args"


def test_the_examples_run(ray_session, label_as_a_fresh_process, tiny_cross_encoder: Path, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """label_files and label_sentences label in this process, as in a notebook where no Ray runs yet."""
    monkeypatch.chdir(REPO)  # the examples name jobs/ as a user in the checkout would
    globs = {"ar": ar, "np": np, "Path": Path, "cross_encoder_dir": str(tiny_cross_encoder), "tmp_dir": tmp_path}
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    documented = [ar, *(getattr(ar, name) for name in ar.__all__ if callable(getattr(ar, name))), scoring.scorer_for, scoring.base.PairScorer,
                  pipeline.steps.Step, pipeline.context.FitRecord]
    for public in documented:
        module = inspect.getmodule(public)
        for test in finder.find(public, getattr(public, "__name__", "augsbert_ray"), globs={**vars(module), **globs}):
            runner.run(test)
    assert runner.failures == 0
    assert runner.tries >= 25
