"""What a labeling call is asked to do (``LabelJob``: the teacher and the settings that decide the labels, checked
before any pair is read) and what it did (``LabelResult``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from augsbert_ray.config import LabelingSpec, SpecError
from augsbert_ray.files import files_digest
from augsbert_ray.labeling.plan import Shard
from augsbert_ray.models import check_model, model_settings_digest
from augsbert_ray.scoring import Teacher, TeacherMember, single_output_error
from augsbert_ray.scoring.backend import check_max_length


@dataclass
class LabelResult:
    """What a labeling call did: the output directory, its shards (and how many an earlier call had labeled), the
    pair counts (pairs_in = labeled + rejected; truncated, tokens), the manifest and the merged rejects file.

    Example:
        >>> result = LabelResult(Path("silver"), 2, 1, {"pairs_in": 10, "labeled": 9, "rejected": 1, "truncated": 0},
        ...                      Path("silver/_manifest.json"), Path("silver/_rejects.jsonl"))
        >>> print(result.summary())
        pairs in 10 = labeled 9 + rejected 1 (truncated to max_seq_length: 0; shards: 2, 1 already done)
    """

    output: Path
    shards: int
    skipped: int
    totals: dict[str, int]
    manifest: Path
    rejects: Path

    @property
    def pairs_in(self) -> int:
        return self.totals["pairs_in"]

    @property
    def labeled(self) -> int:
        return self.totals["labeled"]

    def summary(self) -> str:
        t = self.totals
        return (
            f"pairs in {t['pairs_in']} = labeled {t['labeled']} + rejected {t['rejected']} "
            f"(truncated to max_seq_length: {t['truncated']}; shards: {self.shards}, {self.skipped} already done)"
        )


@dataclass
class LabelJob:
    """Everything that decides the labels; its key must match to resume into an existing output.

    Args:
        teacher: the model(s) that score each pair, e.g. ``Teacher.cross_encoder(model_dir)``.
        spec: batch size, actor pool, precision and shard size.
        labeler: the provenance written into every silver pair; default ``teacher.labeler``.
        text_columns: the two sentence columns of the input.
        strategy: the ``strategy`` value of pairs whose input has no such column.
        onnx_cache: where the teacher's fp32 ONNX export is kept, e.g. one directory for several outputs of the same
            teacher; default ``output/_onnx``. (An int8 export is calibrated on its input, so it stays in its output.)

    Example:
        ::

            job = LabelJob(Teacher.cross_encoder("runs/<run>/models/cross_encoder"), LabelingSpec(), strategy="bm25")
    """

    teacher: Teacher
    spec: LabelingSpec
    labeler: str = ""
    text_columns: tuple[str, str] = ("sentence1", "sentence2")
    strategy: str = "given"
    onnx_cache: Path | None = None

    def __post_init__(self) -> None:
        self.labeler = self.labeler or self.teacher.labeler
        for member in self.teacher.members:
            check_model(member.model)
            check_member(member, self.spec.max_seq_length)
        if self.spec.precision == "int8" and any(member.kind == "bi_encoder" for member in self.teacher.members):
            raise SpecError("labeling.precision int8 quantizes cross-encoders only; a teacher with a bi-encoder runs fp32, bf16 or fp16")

    def key(self, shards: list[Shard], output: Path) -> dict[str, Any]:
        """Input paths relative to ``output``, so that a run directory moved whole still resumes; the inputs' and
        the models' contents, so that an input edited in place or a model's changed config does not."""
        files = sorted({shard.path for shard in shards})
        return {
            "labeler": self.labeler,
            "teacher_settings": [model_settings_digest(member.model) for member in self.teacher.members],
            "precision": self.spec.precision,
            "max_seq_length": self.spec.max_seq_length,
            "text_columns": list(self.text_columns),
            "strategy": self.strategy,
            "inputs": [[os.path.relpath(path, output), Path(path).stat().st_size] for path in files],
            "input_digests": [files_digest([Path(path)])[:16] for path in files],
            "shard_rows": self.spec.shard_rows,
        }


def check_member(member: TeacherMember, max_seq_length: int | None) -> None:
    """Before any pair is read: a cross-encoder member must have its classification head (else each score would
    come from a random one) with one output (else the score would be the first class's logit), and a set
    max_seq_length must fit the model (else it fails at the first long pair)."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(member.model)
    architectures = config.architectures or []
    if member.kind == "cross_encoder" and not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise SpecError(f"{member.model}: not a cross-encoder: it has no classification head (architectures: "
                        f"{', '.join(architectures) or 'none'}), so every score would come from a random one")
    if member.kind == "cross_encoder" and config.num_labels != 1:
        raise SpecError(single_output_error(member.model, config.num_labels))
    try:
        check_max_length(member.model, max_seq_length, AutoTokenizer.from_pretrained(member.model), config)
    except ValueError as exc:
        raise SpecError(f"labeling.{exc}") from None
