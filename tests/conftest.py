"""Shared fixtures: one local Ray per session (2 CPUs), a tiny BERT, and the shared data directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, str(Path(__file__).parent))

from tiny_model import build_tiny_bert  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    assert SHARED_DATA.is_dir(), f"tests read STSb/MRPC/BWS from {SHARED_DATA}"
    return SHARED_DATA


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory: pytest.TempPathFactory):
    import ray

    from augsbert_ray.runtime import init_ray

    os.environ["RAY_TMPDIR"] = str(tmp_path_factory.mktemp("ray"))
    init_ray(num_cpus=2)  # as `augsbert run` starts its embedded Ray
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with a fresh one-logit head, saved as a sentence-transformers CrossEncoder dir."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny_cross_encoder")
    CrossEncoder(str(tiny_model), num_labels=1).save_pretrained(str(directory))
    return directory
