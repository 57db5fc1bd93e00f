"""Any teacher: bi-encoder and ensemble teachers through the labeling engine, their calibration, resume with an
ensemble and the teacher gate (a whole run with an ensemble teacher: tests/test_pipeline.py)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from augsbert_ray.cli import main
from augsbert_ray.config import JobSpec, LabelingSpec, SpecError
from augsbert_ray.data import GoldData
from augsbert_ray.evaluation import UnusableScores, metrics_from_scores, spearman_x100
from augsbert_ray.labeling import LabelJob, Teacher, TeacherMember, label_files
from augsbert_ray.models import resolve_model
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.pipeline.teacher import check_teacher


@pytest.fixture(scope="session")
def tiny_bi_encoder(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with mean pooling, saved as a sentence-transformers bi-encoder dir."""
    from sentence_transformers import SentenceTransformer

    directory = tmp_path_factory.mktemp("tiny_bi_encoder")
    SentenceTransformer(str(tiny_model)).save(str(directory))
    return directory


def stsb_table(data_dir: Path, split: str, count: int) -> pa.Table:
    rows = [line.split("\t") for line in (data_dir / "stsb" / f"sts-{split}.csv").read_text(encoding="utf-8").splitlines()[:count]]
    return pa.table({
        "sentence1": [row[5] for row in rows], "sentence2": [row[6] for row in rows],
        "label": np.array([float(row[4]) / 5 for row in rows]), "pair_id": np.arange(len(rows)),
    })


def direct_scores(member: TeacherMember, pairs: pa.Table) -> np.ndarray:
    """A teacher model's raw scores computed with sentence-transformers alone, outside the engine."""
    from sentence_transformers import CrossEncoder, SentenceTransformer

    first, second = pairs.column("sentence1").to_pylist(), pairs.column("sentence2").to_pylist()
    if member.kind == "cross_encoder":
        return CrossEncoder(member.model).predict(list(zip(first, second)), batch_size=64)
    encoder = SentenceTransformer(member.model)
    a, b = encoder.encode(first, normalize_embeddings=True), encoder.encode(second, normalize_embeddings=True)
    return np.sum(a * b, axis=1)


@pytest.fixture(scope="module")
def raw_ensemble(minilm_with_trained_head: Path, data_dir: Path) -> tuple[Teacher, list[np.ndarray]]:
    """MiniLM as a cross-encoder (head fitted to STSb) and as a bi-encoder, unmapped, with each one's raw scores of
    the first 300 STSb dev pairs (computed once for the module)."""
    members = (TeacherMember("cross_encoder", str(minilm_with_trained_head)), TeacherMember("bi_encoder", resolve_model("minilm")))
    dev = stsb_table(data_dir, "dev", 300)
    return Teacher(members), [direct_scores(m, dev) for m in members]


@pytest.fixture(scope="module")
def ensemble(raw_ensemble: tuple[Teacher, list[np.ndarray]], data_dir: Path) -> Teacher:
    """The MiniLM ensemble calibrated on 300 dev pairs. Random tiny models score every pair nearly alike, and
    mapping such scores onto the gold scale would multiply float32 rounding by ~1e4."""
    raw, raw_scores = raw_ensemble
    return raw.calibrated(raw_scores, stsb_table(data_dir, "dev", 300).column("label").to_numpy())


def test_calibration_maps_each_member_onto_the_gold_scale(
    ensemble: Teacher, raw_ensemble: tuple[Teacher, list[np.ndarray]], data_dir: Path
) -> None:
    labels = stsb_table(data_dir, "dev", 300).column("label").to_numpy()
    raw, raw_scores = raw_ensemble  # the same models' scores: direct_scores reads a member's kind and model only
    assert [(m.kind, m.model) for m in raw.members] == [(m.kind, m.model) for m in ensemble.members]
    least_squares = ensemble.calibrated(raw_scores, labels, "least-squares")  # refits each member's map
    for member, fitted, scores in zip(ensemble.members, least_squares.members, raw_scores, strict=True):
        assert not member.is_identity
        mapped = member.mapped(scores)  # moments, the default: the gold labels' mean and spread
        assert float(np.mean(mapped)) == pytest.approx(float(np.mean(labels)), abs=1e-4)
        assert float(np.std(mapped)) == pytest.approx(float(np.std(labels)), abs=1e-4)
        regressed = fitted.mapped(scores)
        assert float(np.mean(regressed)) == pytest.approx(float(np.mean(labels)), abs=1e-4)  # least squares keeps the mean
        assert abs(float(np.sum((labels - regressed) * scores))) < 1e-2  # its residual is orthogonal to the scores
        correlation = float(np.corrcoef(scores, labels)[0, 1])
        assert float(np.std(regressed)) == pytest.approx(correlation * float(np.std(labels)), rel=1e-3)  # and shrinks the spread
    assert ensemble.kind == "ensemble"
    assert ensemble.labeler.startswith("ensemble(minilm_trained_head") and " + model@" in ensemble.labeler
    one_mapped = Teacher(ensemble.members[:1])  # the provenance names the member's kind, with its map
    assert one_mapped.labeler.startswith("cross-encoder(minilm_trained_head") and "*" in one_mapped.labeler


@pytest.mark.parametrize("kind", ["bi-encoder", "ensemble"])
def test_engine_scores_equal_direct_scores(kind: str, ensemble: Teacher, ray_session, data_dir: Path, tmp_path: Path,
                                           request: pytest.FixtureRequest) -> None:
    """The ensemble on the actor pool; a bi-encoder alone labeled in this process, as `augsbert label` does."""
    teacher = Teacher(ensemble.members[1:]) if kind == "bi-encoder" else ensemble
    if kind == "bi-encoder":
        request.getfixturevalue("label_as_a_fresh_process")
    pairs = stsb_table(data_dir, "train", 400).drop_columns(["label"])
    pq.write_table(pairs, tmp_path / "pairs.parquet", row_group_size=100)
    spec = LabelingSpec(batch_size=32, shard_rows=100)
    result = label_files(str(tmp_path / "pairs.parquet"), tmp_path / "silver", LabelJob(teacher, spec))
    silver = pq.read_table(tmp_path / "silver").sort_by("pair_id")

    assert (result.pairs_in, result.labeled, result.shards) == (400, 400, 4)
    assert set(silver.column("labeler").to_pylist()) == {teacher.labeler}
    assert teacher.kind == kind
    direct = teacher.combine([direct_scores(m, pairs).astype(np.float32) for m in teacher.members])
    assert np.ptp(direct) > 0.01
    assert np.max(np.abs(silver.column("score").to_numpy() - direct)) < 1e-5
    assert result.totals["tokens"] > 0


@pytest.mark.slow
def test_an_ensemble_labeling_job_resumes_and_refuses_another_calibration(
    ensemble: Teacher, ray_session, data_dir: Path, tmp_path: Path, capsys
) -> None:
    pairs = stsb_table(data_dir, "train", 400).drop_columns(["label"])
    pq.write_table(pairs, tmp_path / "pairs.parquet", row_group_size=100)
    output = tmp_path / "silver"
    spec = LabelingSpec(batch_size=32, shard_rows=100)
    label_files(str(tmp_path / "pairs.parquet"), output, LabelJob(ensemble, spec))
    first = pq.read_table(output).sort_by("pair_id")
    shards = sorted(output.glob("part-*.parquet"))
    lost = shards[1:3]  # as if the run died before these two shards were written
    for path in lost:
        path.unlink()
    kept = {path.name: path.stat().st_mtime_ns for path in shards if path not in lost}

    # the CLI's --model takes the teacher as a run saves it (models/teacher.json)
    teacher_file = ensemble.save(tmp_path)
    assert main(["label", "--model", str(teacher_file), "--input", str(tmp_path / "pairs.parquet"), "--output", str(output),
                 "--shard-rows", "100", "--batch-size", "32"]) == 0
    assert "pairs in 400 = labeled 400 + rejected 0" in capsys.readouterr().out
    assert {path.name: path.stat().st_mtime_ns for path in output.glob("part-*.parquet") if path.name in kept} == kept
    assert sorted(path.name for path in output.glob("part-*.parquet")) == [path.name for path in shards]
    again = pq.read_table(output).sort_by("pair_id")
    assert again.column("score").to_pylist() == first.column("score").to_pylist()

    other = Teacher(tuple(TeacherMember(m.kind, m.model, m.scale * 2, m.shift) for m in ensemble.members))
    with pytest.raises(SpecError, match=r"holds labels from other settings \(labeler differ\)"):
        label_files(str(tmp_path / "pairs.parquet"), output, LabelJob(other, spec))


def test_evaluate_scores_a_teacher_file_as_the_teacher_labels(ensemble: Teacher, data_dir: Path, tmp_path: Path, capsys) -> None:
    pairs = stsb_table(data_dir, "test", 120)
    keys = [frozenset(pair) for pair in zip(pairs["sentence1"].to_pylist(), pairs["sentence2"].to_pylist())]
    pairs = pairs.filter(pa.array([keys.index(key) == i for i, key in enumerate(keys)]))  # evaluate scores a repeat once
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in pairs.drop_columns(["pair_id"]).to_pylist()))
    teacher_file = ensemble.save(tmp_path)
    assert main(["evaluate", str(teacher_file), "--data", str(data)]) == 0
    result = json.loads(capsys.readouterr().out)
    direct = ensemble.combine([direct_scores(m, pairs).astype(np.float32) for m in ensemble.members])
    expected = metrics_from_scores("regression", direct, pairs.column("label").to_numpy(), direct, pairs.column("label").to_numpy())
    assert result["kind"] == "teacher"
    assert result["test"] == pytest.approx(expected.test, abs=1e-3)
    # an ensemble is not a mean of raw scores: its maps matter
    unmapped = np.mean([direct_scores(m, pairs) for m in ensemble.members], axis=0)
    assert abs(spearman_x100(unmapped, pairs.column("label").to_numpy()) - result["test"]) > 0.01

    assert main(["evaluate", str(teacher_file), "--data", str(data), "--kind", "bi_encoder"]) == 2
    assert "is a teacher file; --kind bi_encoder takes a model directory" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path), "--data", str(data), "--kind", "teacher"]) == 2
    assert "--kind teacher takes a teacher file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{}", r"\(members: Field required\)"),
        ('{"members": []}', r"members: List should have at least 1 item"),
        ('{"members": [{"kind": "cross_encoder"}]}', r"members\.0\.model: Field required"),
        ('{"members": [{"kind": "cross", "model": "m"}]}', r"members\.0\.kind: Input should be 'cross_encoder' or 'bi_encoder'"),
        ('{"members": [\n{"kind": "bi_encoder", "model": "m",}]}', r"Invalid JSON: trailing comma at line 2"),
    ],
    ids=["no-members", "empty", "no-model", "unknown-kind", "not-json"],
)
def test_a_malformed_teacher_file_is_one_line_naming_the_file_and_field(body: str, reason: str, tmp_path: Path, capsys) -> None:
    teacher_file = tmp_path / "teacher.json"
    teacher_file.write_text(body)
    assert main(["label", "--model", str(teacher_file), "--input", str(tmp_path / "pairs.jsonl"), "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert error.startswith(f"augsbert label: error: {teacher_file}: not a teacher file (")
    assert re.search(reason, error)
    assert not (tmp_path / "out").exists()


def test_a_saved_teacher_loads_back_with_its_paths_and_maps(tmp_path: Path) -> None:
    (tmp_path / "models" / "cross_encoder").mkdir(parents=True)
    members = (TeacherMember("cross_encoder", str(tmp_path / "models" / "cross_encoder"), 0.5, 0.25),
               TeacherMember("bi_encoder", "/elsewhere/bi", 2.0, -1.0))
    loaded = Teacher.load(Teacher(members).save(tmp_path / "models"))
    assert loaded.members == (replace(members[0], model=str((tmp_path / "models" / "cross_encoder").resolve())), members[1])


def gate_setup(tmp_path: Path, data_dir: Path, require: bool) -> tuple[RunContext, GoldData]:
    spec = JobSpec(labeling={"require_better_teacher": require})
    dev = stsb_table(data_dir, "dev", 200)
    (tmp_path / "models").mkdir()
    return RunContext.open(spec, tmp_path), GoldData("regression", dev, dev, dev, dev.num_rows)


@pytest.mark.parametrize("require", [False, True])
def test_gate_warns_or_stops_when_the_teacher_is_not_better(
    require: bool, tiny_bi_encoder: Path, ray_session, data_dir: Path, tmp_path: Path, caplog
) -> None:
    ctx, gold = gate_setup(tmp_path, data_dir, require)
    teacher = Teacher((TeacherMember("bi_encoder", str(tiny_bi_encoder)),))  # the student itself: never better
    if require:
        with pytest.raises(SpecError, match=r"teacher gate: teacher \(bi-encoder\) dev (-?\d+\.\d\d) vs tiny_bi_encoder\d* "
                                            r"\(gold only\) dev \1: NOT better by \+0\.00.*require_better_teacher"):
            check_teacher(ctx, teacher, gold, tiny_bi_encoder, gold.dev)
        return
    gate = check_teacher(ctx, teacher, gold, tiny_bi_encoder, gold.dev).record
    (warning,) = [record for record in caplog.records if record.levelname == "WARNING" and "teacher gate" in record.message]
    assert "NOT better by +0.00" in warning.message and "unlikely to help" in warning.message
    assert gate["better"] is False and gate["teacher_dev"] == gate["student_dev"]
    assert Teacher.load(tmp_path / "models" / "teacher.json").labeler == gate["labeler"]


def test_gate_passes_a_better_teacher(tiny_bi_encoder: Path, ray_session, data_dir: Path, tmp_path: Path, caplog) -> None:
    ctx, gold = gate_setup(tmp_path, data_dir, require=True)
    teacher = Teacher((TeacherMember("bi_encoder", resolve_model("minilm")),))  # MiniLM against a random tiny BERT
    gate = check_teacher(ctx, teacher, gold, tiny_bi_encoder, gold.dev).record
    assert gate["better"] is True and gate["teacher_dev"] > gate["student_dev"] + 20
    assert not [record for record in caplog.records if record.levelname == "WARNING"]


def test_gate_stops_a_teacher_whose_scores_are_all_equal(tiny_cross_encoder: Path, tiny_bi_encoder: Path, ray_session, data_dir: Path,
                                                         tmp_path: Path) -> None:
    """A cross-encoder whose head ignores its input (a fit that collapsed). Before: its dev Spearman was NaN, the
    gate logged `NOT better by +nan` and the run labeled with it."""
    import torch
    from safetensors.torch import load_file, save_file

    collapsed = tmp_path / "collapsed"
    shutil.copytree(tiny_cross_encoder, collapsed)
    weights = load_file(collapsed / "model.safetensors")
    save_file({**weights, "classifier.weight": torch.zeros_like(weights["classifier.weight"])}, collapsed / "model.safetensors")
    ctx, gold = gate_setup(tmp_path, data_dir, require=False)
    with pytest.raises(UnusableScores, match=rf"^teacher gate: {collapsed}: dev split: all 200 scores are [\d.]+ \(a fit that collapsed\?\)$"):
        check_teacher(ctx, Teacher.cross_encoder(str(collapsed)), gold, tiny_bi_encoder, gold.dev)


def test_a_trained_teacher_is_linked_into_the_run_not_copied(tiny_bi_encoder: Path, tmp_path: Path) -> None:
    from augsbert_ray.pipeline.teacher import copy_trained_model

    run_models = tmp_path / "models"
    run_models.mkdir()
    assert copy_trained_model(tiny_bi_encoder, run_models / "teacher_bi_encoder", "teacher_bi_encoder").trained_on is None
    given = sorted(path.relative_to(tiny_bi_encoder) for path in tiny_bi_encoder.rglob("*") if path.is_file())
    assert given == sorted(path.relative_to(run_models / "teacher_bi_encoder") for path in (run_models / "teacher_bi_encoder").rglob("*") if path.is_file())
    assert all((tiny_bi_encoder / name).stat().st_ino == (run_models / "teacher_bi_encoder" / name).stat().st_ino for name in given)


def test_a_trained_teacher_from_an_earlier_run_reports_what_it_was_trained_on(tiny_bi_encoder: Path, tmp_path: Path) -> None:
    """An earlier run's SBERT as this run's teacher bi-encoder: that run's progress.json says under "sbert" what it
    was trained on. Before: it was looked up as "teacher_bi_encoder", the earlier run's other model (or None)."""
    import json

    from augsbert_ray.layout import PROGRESS_FILE
    from augsbert_ray.pipeline.teacher import copy_trained_model

    earlier = tmp_path / "earlier"
    shutil.copytree(tiny_bi_encoder, earlier / "models" / "sbert")
    (earlier / PROGRESS_FILE).write_text(json.dumps({"teacher_bi_encoder": {"trained_on": 11498}, "sbert": {"trained_on": 5749}}))
    (tmp_path / "run" / "models").mkdir(parents=True)
    given = copy_trained_model(earlier / "models" / "sbert", tmp_path / "run" / "models" / "teacher_bi_encoder", "teacher_bi_encoder")
    assert given.trained_on == 5749


def test_a_member_or_labels_without_spread_cannot_be_calibrated() -> None:
    """Before: float noise around one score (a collapsed model) got a scale of -3e7 and a random sign, and labels
    that are all equal gave a constant teacher without a word."""
    teacher = Teacher((TeacherMember("cross_encoder", "/runs/a/models/cross_encoder"), TeacherMember("bi_encoder", "/runs/a/models/bi")))
    labels = np.linspace(0, 1, 50)
    spread = np.linspace(0.1, 0.9, 50)
    collapsed = np.full(50, 0.999, dtype=np.float32)
    collapsed[0] = np.nextafter(np.float32(0.999), np.float32(1))
    with pytest.raises(ValueError, match=r"cannot calibrate /runs/a/models/bi: it gives every calibration pair the same score \(standard deviation 8"):
        teacher.calibrated([spread, collapsed], labels)
    with pytest.raises(ValueError, match="cannot calibrate onto 50 labels that are all 0.6: a constant teacher"):
        teacher.calibrated([spread, spread], np.full(50, 0.6))
    assert teacher.calibrated([spread, spread[::-1]], labels).members[1].scale < 0  # an anti-correlated member is flipped


def test_non_finite_or_constant_scores_are_an_error_not_a_nan_metric() -> None:
    """Before: a NaN score became the threshold, and F1 on dev and test dropped to 0; scores all equal gave a NaN
    Spearman, written into metrics.json (and the teacher gate let such a teacher label: `NOT better by +nan`)."""
    labels = np.array([1, 1, 1, 0])
    with pytest.raises(UnusableScores, match=r"^dev split: 1 of 4 scores are NaN or infinite"):
        metrics_from_scores("classification", np.array([np.nan, 0.8, 0.2, 0.1]), labels, np.array([0.9, 0.1]), np.array([1, 0]))
    with pytest.raises(UnusableScores, match=r"^models/sbert: test split: all 2 scores are 0.5 \(a fit that collapsed\?\)$"):
        metrics_from_scores("regression", np.array([0.9, 0.8, 0.2, 0.1]), labels, np.array([0.5, 0.5]), np.array([1, 0]), "models/sbert")
