"""A fit shows one readable progress line (steps done / total, rate, ETA, loss) instead of raw log dicts."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

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
