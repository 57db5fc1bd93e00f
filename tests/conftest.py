"""Shared fixtures: one local Ray per session (2 CPUs), a tiny BERT, and the shared data directory."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from augsbert_ray.models import build_tiny_bert

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def sigint_handler_left_alone() -> Iterator[None]:
    """A test leaves this process's SIGINT handler as it found it. Ray Train's handler, left by a direct
    ``TorchTrainer.fit()``, keeps that fit's controller actor alive in this session's Ray; when it went, minutes
    later, the session's driver (pytest) died on a failed check in Ray's pubsub."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left SIGINT's handler changed: {after!r} (was {before!r})")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    assert SHARED_DATA.is_dir(), f"tests read STSb/MRPC/BWS from {SHARED_DATA}"
    return SHARED_DATA


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from augsbert_ray.runtime import init_ray

    # AF_UNIX socket paths must stay under 108 bytes: pytest's temp dirs (per xdist worker, too) are too deep
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    init_ray(num_cpus=2)  # as `augsbert run` starts its embedded Ray
    yield ray
    ray.shutdown()
    shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


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


@pytest.fixture(scope="session")
def tiny_two_label_cross_encoder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with a two-logit head, as a paraphrase classifier has."""
    from sentence_transformers import CrossEncoder

    directory = tmp_path_factory.mktemp("tiny_two_label_cross_encoder")
    CrossEncoder(str(tiny_model), num_labels=2).save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="session")
def minilm_with_trained_head(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM with its one-logit head fitted in closed form (ridge, lambda 10, on the pooled output) to STSb labels:
    scores that vary like a trained cross-encoder's. A random head on a random tiny BERT scores every pair
    within ~1e-5 of the others, which no int8 path can rank."""
    import torch
    from sentence_transformers import CrossEncoder

    from augsbert_ray.models import resolve_model

    torch.manual_seed(0)
    model = CrossEncoder(resolve_model("minilm"), num_labels=1)
    lines = (data_dir / "stsb" / "sts-dev.csv").read_text(encoding="utf-8").splitlines()[:256]
    pairs, labels = [tuple(line.split("\t")[5:7]) for line in lines], np.array([float(line.split("\t")[4]) / 5 for line in lines])
    hf_model = model[0].auto_model
    with torch.inference_mode():
        features = model.tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")
        pooled = hf_model.bert(**features).pooler_output.double().numpy()
    centered = pooled - pooled.mean(0)
    weights = np.linalg.solve(centered.T @ centered + 10 * np.eye(centered.shape[1]), centered.T @ (labels - labels.mean()))
    with torch.no_grad():
        hf_model.classifier.weight.copy_(torch.from_numpy(weights * 4).float()[None])
        hf_model.classifier.bias.fill_(float(-(pooled.mean(0) @ weights) * 4))
    directory = tmp_path_factory.mktemp("minilm_trained_head")
    model.save_pretrained(str(directory))
    return directory


@pytest.fixture
def label_as_a_fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """`augsbert label` in a process of its own finds no Ray running and labels in that process (``labels_here``);
    the session's Ray would send it to an actor pool, whose start adds ~16 s to a test. Tests of the pool itself
    (actor failures, scores on actors) do not take this."""
    from augsbert_ray.labeling import engine

    monkeypatch.setattr(engine, "labels_here", engine.labels_in_process)
