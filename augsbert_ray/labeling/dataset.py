"""Labeling a Ray Dataset in a user's own pipeline: a lazy ``map_batches`` over an actor pool that adds the
teacher's ``score`` and ``labeler`` to every pair, for a training script or a notebook. (``label_files`` writes
resumable Parquet shards with a manifest instead.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import ray.data

from augsbert_ray.config import LabelingSpec, SpecError
from augsbert_ray.labeling.job import LabelJob
from augsbert_ray.labeling.scorer import is_sentence
from augsbert_ray.models import resolve_model
from augsbert_ray.runtime import configure_torch_threads
from augsbert_ray.scoring import Teacher, TeacherScorer


class PairLabeler:
    """Ray Data class UDF: the teacher's models loaded once per actor; each batch gets ``score`` (NaN for a pair
    without two non-empty sentences) and ``labeler`` columns."""

    def __init__(self, job: LabelJob) -> None:
        spec = job.spec
        threads = spec.threads_per_actor or max(1, int(spec.cpus_per_actor))
        configure_torch_threads(threads)
        self.scorer = TeacherScorer(job.teacher, batch_size=spec.batch_size, precision=spec.precision, threads=threads,
                                    max_seq_length=spec.max_seq_length, gpu=spec.gpus_per_actor > 0, runtime=spec.runtime)
        self.labeler, self.text_columns = job.labeler, job.text_columns

    def __call__(self, batch: pa.Table) -> pa.Table:
        first, second = (batch.column(name).to_pylist() for name in self.text_columns)
        valid = np.array([is_sentence(a) and is_sentence(b) for a, b in zip(first, second)], dtype=bool)
        scores = np.full(batch.num_rows, np.nan, dtype=np.float32)
        if valid.any():
            rows = np.flatnonzero(valid)
            scores[rows] = self.scorer.score([first[i] for i in rows], [second[i] for i in rows])
        for name in ("score", "labeler"):
            if name in batch.column_names:
                batch = batch.drop_columns([name])
        batch = batch.append_column("score", pa.array(scores, pa.float32()))
        return batch.append_column("labeler", pa.array([self.labeler] * batch.num_rows, pa.string()))


def load_teacher(teacher: Teacher | str | Path) -> Teacher:
    """A ``Teacher``; a teacher.json (a run's models/teacher.json); or a cross-encoder's directory, id or alias."""
    if isinstance(teacher, Teacher):
        return teacher
    path = Path(teacher).expanduser()
    return Teacher.load(path) if path.is_file() else Teacher.cross_encoder(resolve_model(str(teacher)))


def label(
    pairs: ray.data.Dataset, teacher: Teacher | str | Path, settings: LabelingSpec | None = None,
    text_columns: tuple[str, str] = ("sentence1", "sentence2"), labeler: str = "",
) -> ray.data.Dataset:
    """Score every pair of a Ray Dataset with a teacher on an autoscaling actor pool, lazily.

    A pair whose two sentences are not both non-empty text gets a NaN score, so that nothing is dropped: count them
    with ``filter``. For resumable labeling into Parquet shards with a manifest and rejects, use ``label_files``.

    Args:
        pairs: A dataset with the two text columns (other columns are kept).
        teacher: A ``Teacher``, a teacher.json, or a cross-encoder's directory, Hugging Face id or alias.
        settings: Batch size, actor pool, CPUs/GPUs per actor, precision and runtime (default ``LabelingSpec()``:
            one CPU actor, fp32). int8 calibrates on a file's first pairs, so it is ``label_files``' alone.
        text_columns: The two sentence columns.
        labeler: The provenance written into ``labeler``; default the teacher's fingerprint.

    Returns:
        A lazy ``ray.data.Dataset``: the input's columns plus ``score`` (float32) and ``labeler``.

    Example:
        >>> import ray, augsbert_ray as ar
        >>> pairs = ray.data.from_items([{"sentence1": "A man plays.", "sentence2": "A man is playing."},
        ...                              {"sentence1": "A cat sleeps.", "sentence2": ""}])
        >>> silver = ar.label(pairs, cross_encoder_dir)  # a trained cross-encoder's directory
        >>> rows = {row["sentence1"]: row for row in silver.take_all()}
        >>> sorted(rows["A man plays."]), bool(np.isnan(rows["A cat sleeps."]["score"]))
        (['labeler', 'score', 'sentence1', 'sentence2'], True)
    """
    settings = settings or LabelingSpec()
    if settings.precision == "int8":
        raise SpecError("labeling.precision int8 calibrates on the input's first pairs: use label_files for it")
    job = LabelJob(load_teacher(teacher), settings, labeler, text_columns)
    missing = [name for name in text_columns if name not in (pairs.columns() or [])]
    if missing:
        raise SpecError(f"the dataset has no column {', '.join(missing)} (its columns: {', '.join(pairs.columns() or [])}); "
                        "give text_columns")
    return pairs.map_batches(
        PairLabeler,
        fn_constructor_kwargs={"job": job},
        batch_size=settings.batch_size * 16,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(min_size=settings.min_actors, max_size=settings.max_actors),
        num_cpus=settings.cpus_per_actor,
        num_gpus=settings.gpus_per_actor,
    )
