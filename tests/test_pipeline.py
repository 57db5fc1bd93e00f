import json
import math
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from scipy.stats import spearmanr

from augsbert_ray.cli import main
from augsbert_ray.config import JobSpec
from augsbert_ray.resume import comparable_spec

STRATEGIES = {"bm25": "augsbert_bm25", "random": "augsbert_rs", "kde": "augsbert_kde", "semantic": "augsbert_ss"}
MODELS = ("cross_encoder", "sbert", *STRATEGIES.values(), "zero_shot", "jaccard")


@pytest.mark.slow
def test_whole_run_on_a_tiny_model(ray_session, tiny_model: Path, data_dir: Path, tmp_path: Path, capsys) -> None:
    overrides = [
        "data.train_limit=300",
        f"cross_encoder.model={tiny_model}",
        f"bi_encoder.model={tiny_model}",
        f"evaluation.zero_shot_model={tiny_model}",
        "cross_encoder.epochs=1",
        f"output_dir={tmp_path}",
        "name=tiny",
        "sampling.strategies=[bm25, random, kde, semantic]",
        "sampling.kde_pool=3000",
    ]
    args = ["run", "jobs/stsb_indomain_bm25.yaml", "--data-dir", str(data_dir)]
    for override in overrides:
        args += ["--set", override]
    assert main(args) == 0
    (run_dir,) = tmp_path.glob("tiny-*")

    for name in ("spec.yaml", "metrics.json", "report.md", "score_density.png", "rejects.jsonl"):
        assert (run_dir / name).is_file(), name
    for name in ("cross_encoder", "sbert", *STRATEGIES.values()):
        assert (run_dir / "models" / name / "model.safetensors").is_file(), name
    assert yaml.safe_load((run_dir / "spec.yaml").read_text())["data"]["train_limit"] == 300

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["test"]) == set(MODELS) and set(metrics["dev"]) == set(MODELS)
    test_gold = pq.read_table(run_dir / "gold" / "test.parquet").to_pydict()
    words = [[set(re.findall(r"\w+", text.lower())) for text in test_gold[column]] for column in ("sentence1", "sentence2")]
    jaccard = [len(a & b) / len(a | b) if a | b else 0.0 for a, b in zip(*words)]
    assert metrics["test"]["jaccard"] == pytest.approx(100 * spearmanr(jaccard, test_gold["label"]).statistic, abs=1e-9)
    assert len(set(metrics["test"].values())) == len(MODELS)  # every model scored on its own
    counts = metrics["counts"]
    assert counts["rows_read"] == counts["accepted"] + counts["rejected"] == 8628
    assert counts["gold_train"] == 300
    for strategy, model in STRATEGIES.items():
        labeled = pq.read_table(run_dir / "silver" / ("kde_pool" if strategy == "kde" else strategy))
        assert counts["candidates"][strategy] == counts["labeled"][strategy] == labeled.num_rows > 0
        assert set(labeled.column("strategy").to_pylist()) == {strategy}
        assert labeled.column("score").null_count == 0
        diagnostics = metrics["sampling"][strategy]
        assert diagnostics["candidates"] == counts["candidates"][strategy]
        assert diagnostics["kept"] == counts["kept"][strategy] == counts["trained_on"][model] - 300
        kept = pq.read_table(run_dir / "silver" / strategy, columns=["score"],
                             filters=[("accepted", "=", True)] if strategy == "kde" else None).column("score").to_numpy()
        assert diagnostics["high_similarity_share"] == pytest.approx(np.mean(kept >= 0.6), abs=1 / len(kept))
        assert math.isfinite(diagnostics["kl_gold_silver"]) and diagnostics["kl_gold_silver"] > 0
    kde = pq.read_table(run_dir / "silver" / "kde")
    assert kde.num_rows == counts["labeled"]["kde"] == 3000  # selection marks rows, never drops them
    assert sum(kde.column("accepted").to_pylist()) == counts["kept"]["kde"] < 3000
    assert counts["kept"]["bm25"] == counts["labeled"]["bm25"]  # no selection for BM25
    assert counts["candidates"]["random"] == counts["candidates"]["bm25"]  # RS matches BM25's size by default
    trained = counts["trained_on"]
    assert trained["sbert"] == 300 and trained["cross_encoder"] == 600
    assert set(metrics["wall_seconds"]) >= {"read gold data", "train cross-encoder", "sample and label candidates", "total"}
    assert "AugSBERT-KDE" in (run_dir / "report.md").read_text() and "KL(gold, silver)" in (run_dir / "report.md").read_text()
    report = (run_dir / "report.md").read_text()
    for title in ("Cross-encoder", "SBERT (gold only)", "AugSBERT-BM25", "AugSBERT-RS", "Zero-shot", "Jaccard"):
        assert title in report
    assert "run directory" in capsys.readouterr().out

    # Resume after a kill: the KDE and SS fits and everything after them never happened.
    progress = json.loads((run_dir / "progress.json").read_text())
    assert set(progress) == {"cross_encoder", "sbert", *STRATEGIES.values()}
    assert {name: record["trained_on"] for name, record in progress.items()} == trained
    for name in ("augsbert_kde", "augsbert_ss"):
        del progress[name]
    (run_dir / "progress.json").write_text(json.dumps(progress))
    (run_dir / "metrics.json").unlink()
    modified = {name: (run_dir / "models" / name / "model.safetensors").stat().st_mtime_ns for name in ("cross_encoder", "augsbert_kde")}
    assert main(["run", str(run_dir / "spec.yaml"), "--resume", str(run_dir)]) == 2  # the spec comes from the run
    # training states and resources may change for the rest of the run: they do not change what it computes
    resume_settings = ["training.checkpoint_every=20", "labeling.threads_per_actor=1"]
    assert main(["run", "--resume", str(run_dir), "--data-dir", str(data_dir), *(f"--set={s}" for s in resume_settings)]) == 0
    assert list(tmp_path.glob("tiny-*")) == [run_dir]
    resumed = json.loads((run_dir / "metrics.json").read_text())
    assert set(resumed["reused_fits"]) == {"cross_encoder", "sbert", "augsbert_bm25", "augsbert_rs"}
    assert (run_dir / "models" / "cross_encoder" / "model.safetensors").stat().st_mtime_ns == modified["cross_encoder"]
    assert (run_dir / "models" / "augsbert_kde" / "model.safetensors").stat().st_mtime_ns != modified["augsbert_kde"]
    assert resumed["counts"] == counts  # gold and silver made again are the first attempt's; nothing labeled twice
    assert pq.read_table(run_dir / "silver" / "kde").num_rows == 3000
    snapshot = json.loads((run_dir / "ray_train" / "augsbert_kde" / "checkpoint_manager_snapshot.json").read_text())
    assert snapshot["current_report_index"] > 1  # training states were saved before the final model ...
    assert len(snapshot["checkpoint_results"]) == 1  # ... and deleted: only the final model is kept
    assert resumed["test"]["cross_encoder"] == metrics["test"]["cross_encoder"]
    assert main(["run", "--resume", str(run_dir)]) == 2  # finished now
    assert "has finished" in capsys.readouterr().err

    # A later run that takes this run's teacher (cross_encoder.trained) fits none and labels as this run did.
    teacher = ["--set", f"cross_encoder.trained={run_dir / 'models' / 'cross_encoder'}", "--set", "name=tiny_teacher",
               "--set", "sampling.strategies=[bm25]"]
    assert main([*args, *teacher]) == 0
    (taught_dir,) = tmp_path.glob("tiny_teacher-*")
    assert not (taught_dir / "ray_train" / "cross_encoder").exists()
    taught = json.loads((taught_dir / "metrics.json").read_text())
    assert taught["counts"]["trained_on"]["cross_encoder"] == 600  # from the teacher's run
    assert taught["test"]["cross_encoder"] == metrics["test"]["cross_encoder"]

    def bm25_scores(directory: Path) -> list:
        return sorted(pq.read_table(directory / "silver" / "bm25", columns=["sentence1", "sentence2", "score"]).to_pylist(),
                      key=lambda row: (row["sentence1"], row["sentence2"]))

    assert bm25_scores(taught_dir) == bm25_scores(run_dir)


def test_a_resumed_run_may_change_resources_but_not_what_it_computes() -> None:
    first = JobSpec()
    more_resources = JobSpec.model_validate({"labeling": {"cpus_per_actor": 2, "max_actors": 4}, "evaluation": {"cpus": 2}})
    assert comparable_spec(more_resources) == comparable_spec(first)
    for changed in ({"labeling": {"precision": "bf16"}}, {"labeling": {"shard_rows": 10}}, {"training": {"num_workers": 2}}):
        assert comparable_spec(JobSpec.model_validate(changed)) != comparable_spec(first), changed
