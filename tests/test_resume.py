"""Resume that cannot be fooled: the run's fingerprint against spec.yaml edits, changed data and models; a moved
data directory or run directory still resumes; --force-resume reuses only the fits a change does not touch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from augsbert_ray.cli import main
from augsbert_ray.config import JobSpec, LabelingSpec, SpecError, dump_spec
from augsbert_ray.labeling import LabelJob, Teacher, label_files
from augsbert_ray.layout import PROGRESS_FILE, RunLayout
from augsbert_ray.models import model_fingerprint
from augsbert_ray.pipeline.resume import resume_run
from augsbert_ray.pipeline.resume import resume_spec as load_run_spec
from augsbert_ray.pipeline.fingerprint import FINGERPRINT_FILE, run_fingerprint, write_fingerprint


def started_run(tmp_path: Path, data_dir: Path, spec: JobSpec, fits: tuple[str, ...] = ()) -> Path:
    """A run directory as `augsbert run` leaves it when stopped after ``fits``: spec.yaml, fingerprint, progress."""
    run_dir = tmp_path / "run"
    (run_dir / "models").mkdir(parents=True)
    (run_dir / "spec.yaml").write_text(dump_spec(spec), encoding="utf-8")
    write_fingerprint(run_dir, run_fingerprint(spec, data_dir))
    (run_dir / PROGRESS_FILE).write_text(json.dumps({name: {"wall_seconds": 1.0, "trained_on": 10} for name in fits}))
    for name in fits:
        (run_dir / "models" / name).mkdir()
    return run_dir


def edit_spec(run_dir: Path, section: str, key: str, value: object) -> None:
    raw = yaml.safe_load((run_dir / "spec.yaml").read_text())
    raw[section][key] = value
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


def test_resume_refuses_an_edited_spec_yaml_and_names_the_field(tmp_path: Path, data_dir: Path, capsys) -> None:
    run_dir = started_run(tmp_path, data_dir, JobSpec(bi_encoder={"epochs": 1}), ("cross_encoder",))
    edit_spec(run_dir, "bi_encoder", "epochs", 7)
    assert main(["run", "--resume", str(run_dir), "--data-dir", str(data_dir)]) == 2
    error = capsys.readouterr().err
    assert "what the run computes from changed since it started: spec.bi_encoder.epochs (1 -> 7)" in error
    assert "--force-resume" in error


def test_resume_refuses_changed_data_but_not_a_moved_data_dir(tmp_path: Path, data_dir: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir / "stsb", copy / "stsb")
    run_dir = started_run(tmp_path, copy, JobSpec())
    moved = tmp_path / "elsewhere"
    shutil.move(copy, moved)
    assert resume_run(load_run_spec(run_dir), run_dir, moved, force=False).layout.root == run_dir.resolve()

    with (moved / "stsb" / "sts-dev.csv").open("a", encoding="utf-8") as handle:
        handle.write("main-captions\tMSRvid\t2012test\t9999\t5.000\tA man plays.\tA man plays.\n")
    with pytest.raises(SpecError, match=r"files\.data\.dev \('[0-9a-f]{16}' -> '[0-9a-f]{16}'\)"):
        resume_run(load_run_spec(run_dir), run_dir, moved, force=False)


def test_force_resume_keeps_only_the_fits_a_change_does_not_touch(tmp_path: Path, data_dir: Path) -> None:
    run_dir = started_run(tmp_path, data_dir, JobSpec(), ("cross_encoder", "sbert", "augsbert_bm25"))
    (run_dir / "silver" / "bm25").mkdir(parents=True)
    edit_spec(run_dir, "bi_encoder", "learning_rate", 1e-4)
    ctx = resume_run(load_run_spec(run_dir), run_dir, data_dir, force=True)
    assert list(ctx.ledger.finished) == ["cross_encoder"]  # SBERT and AugSBERT read bi_encoder; the teacher does not
    assert not (run_dir / "silver").exists() and not (run_dir / "models" / "sbert").exists()
    assert list(json.loads((run_dir / PROGRESS_FILE).read_text())) == ["cross_encoder"]
    # the fingerprint now records the edit: a plain resume goes on from here
    assert resume_run(load_run_spec(run_dir), run_dir, data_dir, force=False).ledger.finished.keys() == {"cross_encoder"}


def test_force_resume_drops_the_training_state_of_a_fit_a_change_touches(tmp_path: Path, data_dir: Path) -> None:
    """Before: an unfinished fit went on from its training state made under the old settings (the old learning
    rate's optimizer and schedule, its step count)."""
    run_dir = started_run(tmp_path, data_dir, JobSpec(training={"checkpoint_every": 50}), ("cross_encoder",))
    for fit in ("cross_encoder", "sbert"):
        (run_dir / "ray_train" / fit / "checkpoint_000001").mkdir(parents=True)
    edit_spec(run_dir, "bi_encoder", "learning_rate", 1e-4)
    resume_run(load_run_spec(run_dir), run_dir, data_dir, force=True)
    assert sorted(path.name for path in (run_dir / "ray_train").iterdir()) == ["cross_encoder"]  # SBERT's state is gone


def test_a_transfer_sources_fits_follow_the_targets_dev_and_test() -> None:
    """A transfer source's train is cleaned of the target's dev and test pairs. Before: --force-resume after the
    target's test (or its eval_limit) changed kept the teacher and SBERT-source, fitted on pairs now in that test."""
    from augsbert_ray.pipeline.fingerprint import fit_still_matches

    for change in ("files.target.test", "files.target.dev", "files.target.train", "spec.target.data.eval_limit", "spec.target.data.on_overlap"):
        changed = {change: ("old", "new")}
        assert not any(fit_still_matches(fit, changed) for fit in ("cross_encoder", "teacher_bi_encoder", "sbert_source", "sbert_target"))
    assert fit_still_matches("cross_encoder", {"files.target.sentences": ("old", "new")})  # unlabeled text: silver only


def test_a_run_stopped_while_writing_its_report_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.json marks a run finished. Before: it was written first, so a run stopped (or failing) while writing
    report.md or tuning.md was refused by --resume as finished, without its report."""
    import numpy as np

    from augsbert_ray.pipeline import result

    def stopped(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(result, "write_report", stopped)
    (tmp_path / "spec.yaml").write_text(dump_spec(JobSpec()), encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        result.write_outputs(result.RunResult(tmp_path, "regression", {}), JobSpec(), np.array([0.1, 0.5, 0.9]), {})
    assert not (tmp_path / "metrics.json").exists()
    assert load_run_spec(tmp_path) == JobSpec()  # resumable


def test_a_fit_ray_train_had_finished_is_counted_as_reused(tmp_path: Path) -> None:
    """A driver stopped after a fit's final model was saved and before progress.json recorded it: Ray Train reports
    that model again (ray_fit.report_finished_fit). Before: the ledger counted that as a fit of a few seconds, and
    metrics.json's reused_fits left it out."""
    from augsbert_ray.pipeline.context import FitLedger, Fitted

    layout = RunLayout(tmp_path)
    ledger = FitLedger(layout)
    again = {"train_loss": 0.1, "train_rows": 300, "steps": 20, "train_seconds": 812.5, "reused": True}
    record = ledger.fit_once("cross_encoder", True, lambda: Fitted.from_metrics(600, again))
    assert (record.trained_on, record.wall_seconds) == (600, 812.5)
    assert ledger.reused == {"cross_encoder": 812.5}
    fitted = ledger.fit_once("sbert", True, lambda: Fitted.from_metrics(300, {**again, "reused": False}))
    assert fitted.trained_on == 300 and fitted.wall_seconds < 60 and "sbert" not in ledger.reused
    assert json.loads(layout.progress.read_text()) == {"cross_encoder": {"trained_on": 600, "wall_seconds": 812.5},
                                                       "sbert": fitted.to_json()}


def test_a_tuning_edit_refits_sbert_only_where_sbert_is_tuned(tmp_path: Path, data_dir: Path) -> None:
    """Before: any tuning edit refit SBERT, even where its plain fit never reads the tuning section."""
    for models, refit in (["augsbert_bm25"], False), (["sbert"], True):
        tuning = {"seeds": 5, "models": models}
        run_dir = started_run(tmp_path / "_".join(models), data_dir, JobSpec(tuning=tuning), ("cross_encoder", "sbert"))
        edit_spec(run_dir, "tuning", "seeds", 3)
        assert ("sbert" in resume_run(load_run_spec(run_dir), run_dir, data_dir, force=True).ledger.finished) != refit


def test_a_setting_added_since_the_run_started_blocks_resume_only_off_its_default(
    tiny_model: Path, tmp_path: Path, data_dir: Path
) -> None:
    run_dir = started_run(tmp_path, data_dir, JobSpec(teacher={"bi_encoder": {"model": str(tiny_model)}}), ("cross_encoder",))
    fingerprint = json.loads((run_dir / FINGERPRINT_FILE).read_text())
    del fingerprint["spec.evaluation.teacher_bi_encoder"]  # as a run started by a version without the setting
    (run_dir / FINGERPRINT_FILE).write_text(json.dumps(fingerprint))
    assert resume_run(load_run_spec(run_dir), run_dir, data_dir, force=False).ledger.finished.keys() == {"cross_encoder"}
    (run_dir / FINGERPRINT_FILE).write_text(json.dumps(fingerprint))  # the resume recorded today's fingerprint
    with pytest.raises(SpecError, match=r"spec\.evaluation\.teacher_bi_encoder \(None -> True\)"):
        resume_run(load_run_spec(run_dir, ["evaluation.teacher_bi_encoder=true"]), run_dir, data_dir, force=False)


def test_a_given_teacher_whose_config_changed_blocks_resume_and_an_older_fingerprint_does_not(
    tiny_cross_encoder: Path, tmp_path: Path, data_dir: Path
) -> None:
    """Before, the fingerprint held the weights only: a trained cross-encoder whose activation changed resumed."""
    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_cross_encoder, teacher)
    run_dir = started_run(tmp_path, data_dir, JobSpec(cross_encoder={"trained": str(teacher)}), ("sbert",))
    fingerprint = json.loads((run_dir / FINGERPRINT_FILE).read_text())
    settings = [key for key in fingerprint if key.endswith(".settings")]
    assert "models.cross_encoder.settings" in settings
    for key in settings:  # as a run started by a version without these entries
        del fingerprint[key]
    (run_dir / FINGERPRINT_FILE).write_text(json.dumps(fingerprint))
    assert resume_run(load_run_spec(run_dir), run_dir, data_dir, force=False).ledger.finished.keys() == {"sbert"}

    config = teacher / "config_sentence_transformers.json"
    config.write_text(config.read_text().replace("torch.nn.modules.activation.Sigmoid", "torch.nn.modules.linear.Identity"))
    with pytest.raises(SpecError, match=r"models\.cross_encoder\.settings \('\w+' -> '\w+'\)"):
        resume_run(load_run_spec(run_dir), run_dir, data_dir, force=False)
    assert resume_run(load_run_spec(run_dir), run_dir, data_dir, force=True).ledger.finished.keys() == {"sbert"}


def test_a_bi_encoder_scored_beside_the_teacher_is_fingerprinted(tiny_model: Path, data_dir: Path) -> None:
    """evaluation.teacher_bi_encoder fits teacher.bi_encoder beside a cross-encoder teacher: a resume must see its
    model change; an ensemble has that model as its member already."""
    bi_encoder = {"bi_encoder": {"model": str(tiny_model)}}
    plain, compared = (JobSpec(teacher=bi_encoder, evaluation={"teacher_bi_encoder": flag}) for flag in (False, True))
    assert compared.compares_teacher_bi_encoder and not plain.compares_teacher_bi_encoder
    assert not JobSpec(teacher={**bi_encoder, "kind": "ensemble"}, evaluation={"teacher_bi_encoder": True}).compares_teacher_bi_encoder
    assert "models.teacher.bi_encoder" not in run_fingerprint(plain, data_dir)
    assert run_fingerprint(compared, data_dir)["models.teacher.bi_encoder"] == model_fingerprint(str(tiny_model))


def test_a_moved_run_directory_resumes_its_labeling(ray_session, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path) -> None:
    from test_labeling import pair_table, stsb_pairs

    run_dir = tmp_path / "run"
    (run_dir / "candidates").mkdir(parents=True)
    pq.write_table(pair_table(stsb_pairs(data_dir, 300)), run_dir / "candidates" / "bm25.parquet", row_group_size=100)
    job = LabelJob(Teacher.cross_encoder(str(tiny_cross_encoder)), LabelingSpec(shard_rows=100))
    first = label_files(str(run_dir / "candidates" / "bm25.parquet"), run_dir / "silver" / "bm25", job)
    assert (first.shards, first.skipped) == (3, 0)

    moved = tmp_path / "moved"
    shutil.move(run_dir, moved)
    again = label_files(str(moved / "candidates" / "bm25.parquet"), moved / "silver" / "bm25", job)
    assert (again.shards, again.skipped, again.labeled) == (3, 3, 300)
