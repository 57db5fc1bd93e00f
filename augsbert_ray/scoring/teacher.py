"""The teacher that makes silver labels: a cross-encoder, a bi-encoder (cosine of two embeddings), or an
ensemble of both.

A bi-encoder's cosine and a cross-encoder's sigmoid live on different scales, and a student trained on gold +
silver needs silver on the gold scale. So every member of a bi-encoder or ensemble teacher is put on the gold
scale by an affine map ``scale * score + shift``, fitted on gold pairs (dev by default: the members were trained on
train, whose scores are over-confident). ``moments`` (the default) gives the mapped scores the gold labels' mean and
spread; ``least-squares`` regresses the labels on the scores, which shrinks the spread by the correlation (to 0.56x
the gold's on BWS cross-topic, where the student then learned less from the silver than from gold alone). An
ensemble's score is the mean of its members' mapped scores. A plain cross-encoder, trained on the gold scale
already, is used as is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from augsbert_ray.config import CalibrationMap
from augsbert_ray.files import atomic_write_text
from augsbert_ray.models import model_fingerprint

MemberKind = Literal["cross_encoder", "bi_encoder"]
TEACHER_FILE = "teacher.json"


@dataclass(frozen=True)
class TeacherMember:
    """One model of a teacher and its affine map onto the gold scale.

    Args:
        kind: ``cross_encoder`` or ``bi_encoder`` (cosine of the two embeddings).
        model: The model's directory or Hugging Face id.
        scale: Multiplies the model's raw score; with ``shift``, the map ``scale * score + shift``.
        shift: Added after scaling; scale 1 and shift 0 (the defaults) leave scores as they come.

    Example:
        ::

            member = TeacherMember("bi_encoder", "runs/<run>/models/bi_encoder", scale=1.8, shift=-0.4)
            member.mapped(np.array([0.5]))  # array([0.5], dtype=float32)
    """

    kind: MemberKind
    model: str
    scale: float = 1.0
    shift: float = 0.0

    @property
    def is_identity(self) -> bool:
        return self.scale == 1.0 and self.shift == 0.0

    def mapped(self, scores: np.ndarray) -> np.ndarray:
        return scores if self.is_identity else (self.scale * scores.astype(np.float64) + self.shift).astype(np.float32)


@dataclass(frozen=True)
class Teacher:
    """The models that score candidate pairs, and how their scores are combined.

    Args:
        members: one cross-encoder, one bi-encoder, or several (an ensemble: the mean of mapped scores).

    Example:
        >>> teacher = Teacher.cross_encoder(cross_encoder_dir)  # a trained cross-encoder's directory
        >>> teacher.kind, teacher.combine([np.array([0.25, 0.75])])
        ('cross-encoder', array([0.25, 0.75]))
        >>> teacher.labeler == Teacher.load(teacher.save(tmp_dir)).labeler  # its fingerprint, in every silver pair
        True
    """

    members: tuple[TeacherMember, ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a teacher needs at least one model")

    @classmethod
    def cross_encoder(cls, model: str) -> "Teacher":
        return cls((TeacherMember("cross_encoder", model),))

    @property
    def kind(self) -> str:
        if len(self.members) > 1:
            return "ensemble"
        return self.members[0].kind.replace("_", "-")

    @property
    def is_plain(self) -> bool:
        """One model whose scores are used as they come (the labeling engine's original path)."""
        return len(self.members) == 1 and self.members[0].is_identity

    @property
    def labeler(self) -> str:
        """The silver provenance: each model's weights fingerprint, with its map when it has one."""
        parts = [
            model_fingerprint(m.model) + ("" if m.is_identity else f"*{m.scale:.6g}{m.shift:+.6g}") for m in self.members
        ]
        if self.is_plain and self.members[0].kind == "cross_encoder":
            return parts[0]
        return f"{self.kind}({' + '.join(parts)})"

    def combine(self, member_scores: Sequence[np.ndarray]) -> np.ndarray:
        """The teacher's score from each member's raw scores (in ``members`` order)."""
        if self.is_plain:
            return member_scores[0]
        mapped = [member.mapped(scores) for member, scores in zip(self.members, member_scores, strict=True)]
        return np.mean(mapped, axis=0).astype(np.float32)

    def calibrated(self, member_scores: Sequence[np.ndarray], labels: np.ndarray, method: CalibrationMap = "moments") -> "Teacher":
        """Each member mapped onto the gold scale of ``labels``: its mapped scores get their mean and standard
        deviation (``moments``, with the sign of the correlation), or the least-squares fit (``least-squares``)."""
        labels = np.asarray(labels, dtype=np.float64)
        if np.ptp(labels) == 0:
            raise ValueError(f"cannot calibrate onto {len(labels)} labels that are all {labels[0]:g}: a constant teacher")
        members = []
        for member, scores in zip(self.members, member_scores, strict=True):
            scores = np.asarray(scores, dtype=np.float64)
            # float noise around one value (a collapsed model) would get a huge scale and a random sign
            if scores.std() <= 1e-6 * max(1.0, float(np.abs(scores).max())):
                raise ValueError(f"cannot calibrate {member.model}: it gives every calibration pair the same score "
                                 f"(standard deviation {scores.std():.2g})")
            if method == "least-squares":
                scale, shift = np.polyfit(scores, labels, 1)
            else:
                scale = np.sign(np.corrcoef(scores, labels)[0, 1]) * labels.std() / scores.std()
                shift = labels.mean() - scale * scores.mean()
            members.append(replace(member, scale=float(scale), shift=float(shift)))
        return Teacher(tuple(members))

    def save(self, directory: Path) -> Path:
        """Write teacher.json into ``directory``; member paths inside it are stored relative to it."""
        path = directory / TEACHER_FILE
        members = [
            {**asdict(m), "model": _relative_to(m.model, directory)} for m in self.members
        ]
        atomic_write_text(path, json.dumps({"kind": self.kind, "labeler": self.labeler, "members": members}, indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> "Teacher":
        """A teacher.json written by ``save`` (e.g. a run's models/teacher.json). A file that is not one raises a
        ValueError naming the file and the field."""
        try:
            body = TeacherFile.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            reasons = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'the file'}: {error['msg']}" for error in exc.errors())
            raise ValueError(f"{path}: not a teacher file ({reasons}); a run writes one as models/teacher.json") from None
        members = []
        for item in body.members:
            model = Path(item.model)
            members.append(TeacherMember(item.kind, str(model if model.is_absolute() else (path.parent / model).resolve()),
                                         item.scale, item.shift))
        return cls(tuple(members))


class TeacherFileMember(BaseModel):
    """One model of a teacher.json (its path relative to the file, or absolute)."""

    kind: MemberKind
    model: str
    scale: float = 1.0
    shift: float = 0.0


class TeacherFile(BaseModel):
    """What Teacher.load reads; ``kind`` and ``labeler``, written for the reader, are derived again on load."""

    members: list[TeacherFileMember] = Field(min_length=1)


def _relative_to(model: str, directory: Path) -> str:
    path = Path(model)
    if path.is_absolute() and path.resolve().is_relative_to(directory.resolve()):
        return str(path.resolve().relative_to(directory.resolve()))
    return model


def single_output_error(model: str, outputs: int) -> str:
    """Why a cross-encoder with several outputs cannot be a teacher."""
    return (f"{model}: a cross-encoder with {outputs} outputs (e.g. a paraphrase or NLI classifier): a teacher scores "
            "similarity with one (num_labels 1), and the first output of several may even be 'not similar'; fit one on "
            "gold instead (leave cross_encoder.trained unset)")


class TeacherScorer:
    """A teacher as a ``PairScorer``: each member's scorer (cross-encoder or cached bi-encoder, loaded once), their
    scores mapped and combined (``Teacher.combine``). The first member's tokenization is what ``stats`` counts.

    Args:
        teacher: The teacher.
        settings: What each member's scorer takes (batch_size, precision, threads, max_seq_length, gpu; a
            cross-encoder's runtime, cache_dir, calibration).

    Example:
        ::

            TeacherScorer(Teacher.load(Path("runs/<run>/models/teacher.json"))).score(["A man plays."], ["A man is playing."])
    """

    def __init__(self, teacher: Teacher, **settings: Any) -> None:
        from augsbert_ray.scoring.bi_encoder import BiEncoderScorer
        from augsbert_ray.scoring.cross_encoder import CrossEncoderScorer

        embedding_settings = {key: value for key, value in settings.items() if key not in ("runtime", "cache_dir", "calibration")}
        self.teacher = teacher
        self.scorers: list[Any] = [
            CrossEncoderScorer(m.model, **settings) if m.kind == "cross_encoder" else BiEncoderScorer(m.model, **embedding_settings, cache=True)
            for m in teacher.members
        ]

    def reset(self) -> None:
        for scorer in self.scorers:
            scorer.reset()

    def score(self, first: list[str], second: list[str], stats: dict[str, Any] | None = None) -> np.ndarray:
        counted = [stats, *(None for _ in self.scorers[1:])]
        return self.teacher.combine([scorer.score(first, second, c) for scorer, c in zip(self.scorers, counted)])
