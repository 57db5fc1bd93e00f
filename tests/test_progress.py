"""A fit shows one readable progress line (steps done / total, rate, ETA, loss) instead of raw log dicts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from augsbert_ray.config import BiEncoderSpec
from augsbert_ray.training.bi_encoder import bi_encoder_loss
from augsbert_ray.training.ray_fit import format_seconds, training_arguments, with_progress_line


def test_a_fit_prints_progress_lines_and_no_log_dicts(tiny_model: Path, tmp_path: Path, capsys) -> None:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    spec = BiEncoderSpec(batch_size=8)
    pairs = pa.table({"sentence1": [f"a cat number {i}" for i in range(120)], "sentence2": [f"a dog {i}" for i in range(120)],
                      "label": [i / 120 for i in range(120)]})
    model = SentenceTransformer(str(tiny_model))
    args = training_arguments(SentenceTransformerTrainingArguments, spec, 0, str(tmp_path), True, distributed=False)
    args.logging_steps = 5
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset(pairs), loss=bi_encoder_loss(model, spec))
    with_progress_line(trainer, "sbert", every_seconds=0)  # a line at every step
    trainer.train()

    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert not [line for line in lines if line.lstrip().startswith("{")]  # no raw {'loss': ...} dicts
    progress = [line for line in lines if line.startswith("fit sbert: ")]
    assert len(progress) == 15  # 120 pairs / 8 per batch
    pattern = r"fit sbert: step (\d+)/15 \((\d+)%\), \d+\.\d\d steps/s, ETA \d+m\d\ds(, loss \d+\.\d{4})?"
    steps = [int(re.fullmatch(pattern, line).group(1)) for line in progress]
    assert steps == list(range(1, 16))
    assert progress[-1].startswith("fit sbert: step 15/15 (100%)") and ", loss " in progress[-1] and "ETA 0m00s" in progress[-1]


def test_time_left_reads_in_minutes_or_hours() -> None:
    assert [format_seconds(s) for s in (0, 59.6, 61, 3600 * 2 + 61, float("inf"))] == ["0m00s", "1m00s", "1m01s", "2h01m", "unknown"]


FIT_IN_A_NEW_RAY = """
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from augsbert_ray.config import BiEncoderSpec, TrainingSpec
from augsbert_ray.runtime import init_ray
from augsbert_ray.training import fit_bi_encoder

model, work = sys.argv[1], Path(sys.argv[2])
pairs = pa.table({"sentence1": [f"a cat number {i}" for i in range(64)], "sentence2": [f"a dog {i}" for i in range(64)],
                  "label": pa.array([i / 64 for i in range(64)], pa.float32())})
pq.write_table(pairs, work / "pairs.parquet")
init_ray(num_cpus=2)
fit_bi_encoder(BiEncoderSpec(model=model, batch_size=8), model, [(str(work / "pairs.parquet"), "label")],
               TrainingSpec(cpus_per_worker=1), 0, work / "ray_train", "sbert", work / "model")
"""


@pytest.mark.slow
def test_a_fit_on_ray_prints_each_progress_line_once(tiny_model: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Ray Train copies a worker's print() into its logger, and Hugging Face datasets' hashing printed a bytecode
    listing: the console of a fit in an embedded Ray (as `augsbert run` starts it) shows neither."""
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path_factory.mktemp("ray")), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run([sys.executable, "-c", FIT_IN_A_NEW_RAY, str(tiny_model), str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    console = (result.stdout + result.stderr).splitlines()
    final = [line for line in console if "fit sbert: step 8/8 (100%)" in line]
    assert len(final) == 1, final
    assert not [line for line in console if "RETURN_VALUE" in line or "LOAD_GLOBAL" in line]
