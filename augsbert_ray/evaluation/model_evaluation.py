"""Score one model on a named dataset or on labeled pair files: what `augsbert evaluate` does.

The checks that a number can mean something (a usable model of the kind asked for, 0/1 labels for classification,
few enough rejects, two pairs and two labels in each split) come before any model is loaded. Errors name the
`augsbert evaluate` options (``--data``, ``--dev``, ``--kind``, ``--rejects``), as the rest of the package words its
errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from augsbert_ray.config import DataSpec, SourceSpec, SpecError, check_output_dir
from augsbert_ray.data import Reject, check_reject_fraction, load_gold, write_rejects
from augsbert_ray.data.usable import check_scorable
from augsbert_ray.evaluation import Evaluation
from augsbert_ray.evaluation import evaluate as score_and_measure
from augsbert_ray.evaluation.checks import check_class_labels, model_kind, saved_kind
from augsbert_ray.scoring import Teacher
from augsbert_ray.models import check_model, resolve_model

NAMED_DATASETS = ("stsb", "mrpc", "bws")
Notes = Callable[[str], None]


@dataclass(frozen=True)
class ModelEvaluation:
    """A model's scores on dev and test, with what was scored and how.

    Attributes:
        model: The resolved model (a directory or Hugging Face id), or the teacher file.
        kind: ``bi_encoder``, ``cross_encoder`` or ``teacher``.
        task: ``regression`` or ``classification``.
        evaluation: Spearman x100, or F1 x100 at the dev-chosen threshold with AUC(0.05), on dev and test.
        rows: Rows ``read``, ``accepted`` and ``rejected``, and the pairs of ``dev`` and ``test``.
        threshold_picked_on: For classification, the pairs the threshold was chosen on; else None.
    """

    model: str
    kind: str
    task: str
    evaluation: Evaluation
    rows: dict[str, int]
    threshold_picked_on: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What `augsbert evaluate` prints as JSON: model, kind, task, the metrics, threshold_picked_on, rows."""
        picked = {} if self.threshold_picked_on is None else {"threshold_picked_on": self.threshold_picked_on}
        return {"model": self.model, "kind": self.kind, "task": self.task, **self.evaluation.to_dict(), **picked, "rows": self.rows}


def evaluate(
    model: str | Path,
    data: str | Path,
    *,
    dev: str | Path | None = None,
    format: str | None = None,
    task: str | None = None,
    score_range: tuple[float, float] | list[float] | None = None,
    kind: str = "auto",
    rejects: str | Path | None = None,
    max_reject_fraction: float = 0.01,
    data_dir: str | Path | None = None,
    seed: int = 42,
    threads: int = 2,
    notes: Notes | None = None,
) -> ModelEvaluation:
    """Score a bi-encoder, a cross-encoder or a run's teacher on a named dataset or on pair files: Spearman x100
    for regression; F1 x100 at the threshold best on dev, and AUC(0.05), for classification.

    Args:
        model: A model directory, 'minilm', 'mpnet', a Hugging Face id, or a run's models/teacher.json.
        data: A named dataset (stsb, mrpc, bws), scored on its dev and test splits, or a labeled pair file.
        dev: The pair file that picks the classification threshold; default: ``data`` itself.
        format: The pair files' format (csv, tsv, jsonl, parquet, stsb, mrpc, bws); default: from the suffix.
        task: ``regression`` or ``classification``; default: the dataset's or format's own, else regression.
        score_range: The raw (low, high) range of regression labels in the pair files, scaled to [0, 1].
        kind: ``auto`` (teacher for a teacher file, cross_encoder for a CrossEncoder directory, else bi_encoder),
            ``bi_encoder``, ``cross_encoder`` or ``teacher``.
        rejects: A file to write the rejected rows to (JSON lines); without it they are listed in ``notes``.
        max_reject_fraction: Fail when more than this share of the rows read is rejected.
        data_dir: Where the named datasets live.
        seed: Seeds the splits carved from train.
        threads: Torch threads.
        notes: Takes each line of the report on the data (rows read, rejects, repeated pairs removed) and each
            warning (a line starting ``warning: ``); default: printed on stderr.

    Returns:
        The ModelEvaluation: the Evaluation, the model and kind scored, the task, the rows, and for classification
        where the threshold was picked.

    Example:
        >>> rows = [f"A man plays {game}.,A man is playing {game}.,{i % 5}\\n" for i, game in enumerate(["chess", "golf", "go"])]
        >>> _ = (tmp_dir / "pairs.csv").write_text("sentence1,sentence2,label\\n" + "".join(rows))
        >>> result = evaluate(cross_encoder_dir, tmp_dir / "pairs.csv", score_range=(0, 4), notes=lambda line: None)
        >>> result.kind, result.task, result.rows
        ('cross_encoder', 'regression', {'read': 3, 'accepted': 3, 'rejected': 0, 'dev': 3, 'test': 3})

        A run's SBERT on STSb's dev and test splits: ``evaluate("runs/<run>/models/sbert", "stsb").evaluation.test``.
    """
    note = notes or _to_stderr
    data, dev = str(data), None if dev is None else str(dev)
    rejects_path = Path(rejects) if rejects is not None else None
    if rejects_path is not None and (not rejects or rejects_path.is_dir()):
        raise SpecError(f"--rejects {rejects or repr(rejects)}: a directory; give a file to write the rejected rows to")
    if rejects_path is not None:
        check_output_dir(rejects_path.parent, "--rejects")  # before the data is read, not after
    model, kind = _model_and_kind(str(model), kind)
    spec = _evaluation_data(data, dev, format, task, score_range, max_reject_fraction)
    resolved_task = spec.resolved_task
    gold = load_gold(spec, seed=seed, data_dir=data_dir)
    if resolved_task == "classification":
        check_class_labels(gold.rejects, gold.rows_read)
    _report_rejects(gold.rows_read, gold.rejects, rejects_path, spec.max_reject_fraction, note)
    repeats = [f"{split} {gold.duplicates[split]} ({gold.label_conflicts[split]} with another label)"
               for split in ("dev", "test") if gold.duplicates[split]]
    if repeats:
        note(f"repeated pairs removed (either order, the first kept): {', '.join(repeats)}")
    origin = {"test": data, "dev": dev or data}
    for split in ("test", "dev"):
        check_scorable(resolved_task, gold.split(split).column("label").to_numpy(), f"{origin[split]} ({split} split)")
    if task is None and resolved_task == "regression" and set(np.unique(gold.test.column("label").to_numpy())) <= {0.0, 1.0}:
        note(f"warning: the labels of {data} are all 0 or 1, scored as regression (Spearman); "
             "--task classification gives F1 and AUC(0.05)")
    result = score_and_measure(kind, model, resolved_task, gold.dev, gold.test, threads=threads)  # type: ignore[arg-type]
    rows = {"read": gold.rows_read, "accepted": gold.rows_read - len(gold.rejects), "rejected": len(gold.rejects),
            "dev": gold.dev.num_rows, "test": gold.test.num_rows}
    picked = None
    if resolved_task == "classification":  # the F1 threshold: on dev pairs, or, without dev, on the scored pairs themselves
        picked = f"{data}'s dev split" if data in NAMED_DATASETS else dev or f"{data} itself (no --dev)"
    return ModelEvaluation(model, kind, resolved_task, result, rows, picked)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _model_and_kind(model: str, kind: str) -> tuple[str, str]:
    """The model to load and the kind to score it as, each checked to load."""
    if Path(model).is_file():  # a run's models/teacher.json: the whole teacher, its maps applied
        if kind not in ("auto", "teacher"):
            raise SpecError(f"{model} is a teacher file; --kind {kind} takes a model directory")
        for member in Teacher.load(Path(model)).members:
            check_model(member.model)
        return model, "teacher"
    if kind == "teacher":
        raise SpecError(f"--kind teacher takes a teacher file (a run's models/teacher.json); {model} is not a file")
    resolved = resolve_model(model)
    check_model(resolved)
    found = model_kind(resolved)
    if kind != "auto" and saved_kind(resolved) not in (None, kind):
        raise SpecError(f"--kind {kind}: {model} is a {found.replace('_', '-')} (scored as the other, it would get a fresh, random part)")
    return resolved, found if kind == "auto" else kind


def _evaluation_data(
    data: str, dev: str | None, format: str | None, task: str | None, score_range: Any, max_reject_fraction: float
) -> DataSpec:
    """The named dataset, or the ``data`` (and ``dev``) pair files, as a data section without train."""
    if score_range and task == "classification":
        raise SpecError("--score-range scales regression scores; --task classification takes 0/1 labels")
    if data in NAMED_DATASETS:
        for option, given in (("--score-range", score_range), ("--dev", dev), ("--format", format)):
            if given:
                raise SpecError(f"{option} is for pair files; the named dataset {data} has its own")
        return DataSpec(dataset=data, task=task, max_reject_fraction=max_reject_fraction)  # type: ignore[arg-type]

    def source(option: str, path: str) -> SourceSpec:
        try:
            return SourceSpec(path=Path(path), format=format, score_range=score_range)  # type: ignore[arg-type]
        except ValidationError as exc:
            reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
            raise SpecError(f"{option} {path}: {reasons}") from None

    test = source("--data", data)
    dev_source = source("--dev", dev) if dev else test
    return DataSpec(dataset=None, dev=dev_source, test=test, task=task, max_reject_fraction=max_reject_fraction)  # type: ignore[arg-type]


def _report_rejects(rows_read: int, rejects: list[Reject], rejects_path: Path | None, max_fraction: float, note: Notes) -> None:
    """The counts, then each reject in ``rejects_path``, else as lines of ``note`` once their share passed
    ``max_fraction``."""
    if rejects_path is not None:
        write_rejects(rejects, rejects_path)
    where = f" (see {rejects_path})" if rejects_path is not None and rejects else ""
    rows = "row" if rows_read == 1 else "rows"
    note(f"read {rows_read} {rows}: {rows_read - len(rejects)} accepted, {len(rejects)} rejected{where}")
    if rows_read:  # an empty file is reported by check_scorable, which names it
        check_reject_fraction(rows_read, rejects, max_fraction, rejects_path, "--max-reject-fraction")
    if rejects_path is None:
        for reject in rejects:
            note(f"  rejected {reject}")
