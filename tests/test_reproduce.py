"""`python -m bench.reproduce` tabulates a seed made as --part runs as one run."""

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from augsbert_ray.report import MODEL_TITLES
from bench import reproduce
from bench.reproduce import main

ROOT = Path(__file__).resolve().parents[1]


def write_run(run_dir: Path, strategies: list[str], test: dict[str, float], seconds: float, teacher: dict | None = None) -> None:
    run_dir.mkdir(parents=True)
    spec = {"seed": 43, "sampling": {"strategies": strategies}, **({"teacher": teacher} if teacher else {})}
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec))
    metrics = {"test": test, "details": {row: {"test": value} for row, value in test.items()},
               "wall_seconds": {"total": seconds}, "reused_fits": {"cross_encoder": 5.0}}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))


def test_a_seed_made_as_two_parts_is_merged_into_one_run(tmp_path: Path) -> None:
    shared = {"jaccard": 40.0, "zero_shot": 45.0, "cross_encoder": 52.0}
    write_run(tmp_path / "bws_in_topic-full-seed43_rest-20261123-190000", ["bm25", "random", "semantic", "bm25+semantic"],
              {**shared, "sbert": 60.0, "augsbert_bm25": 62.0, "augsbert_rs": 61.0, "augsbert_ss": 61.5, "augsbert_bm25_ss": 61.7}, 100.0)
    assert reproduce.seed_result("bws_in_topic", 43, tmp_path) is None  # one part alone is not a result
    write_run(tmp_path / "bws_in_topic-full-seed43_kde-20261123-210000", ["kde"],
              {**shared, "cross_encoder": 52.5, "sbert": 59.0, "augsbert_kde": 58.0}, 200.0)

    metrics, spec, _ = reproduce.seed_result("bws_in_topic", 43, tmp_path)
    assert set(metrics["test"]) == {*shared, "sbert", "augsbert_bm25", "augsbert_rs", "augsbert_ss", "augsbert_bm25_ss", "augsbert_kde"}
    assert metrics["test"]["augsbert_kde"] == 58.0 and metrics["details"]["augsbert_kde"] == {"test": 58.0}
    assert metrics["test"]["sbert"] == 60.0 and metrics["test"]["cross_encoder"] == 52.0  # shared rows: the rest part's
    assert metrics["parts"]["kde"]["test_gap_of_shared_rows"] == {"jaccard": 0.0, "zero_shot": 0.0, "cross_encoder": 0.5}
    assert reproduce.run_seconds(metrics) == 100.0 + 5.0 + 200.0 + 5.0
    assert sorted(spec["sampling"]["strategies"]) == ["bm25", "bm25+semantic", "kde", "random", "semantic"]

    # a whole run of the seed wins over its parts (and the rest + kde split over the lexical + semantic + kde one)
    write_run(tmp_path / "bws_in_topic-full-seed43-20261123-230000", ["bm25"], {**shared, "sbert": 1.0}, 10.0)
    assert reproduce.seed_result("bws_in_topic", 43, tmp_path)[0]["test"]["sbert"] == 1.0


def test_a_seed_made_as_three_parts_is_merged_into_one_run(tmp_path: Path) -> None:
    shared = {"jaccard": 80.0, "zero_shot": 81.0, "cross_encoder": 84.0}
    write_run(tmp_path / "mrpc-full-seed44_lexical-20261124-220000", ["bm25", "random"],
              {**shared, "sbert": 83.0, "augsbert_bm25": 84.0, "augsbert_rs": 82.0}, 100.0)
    write_run(tmp_path / "mrpc-full-seed44_kde-20261125-010000", ["kde"], {**shared, "sbert": 82.0, "augsbert_kde": 83.5}, 50.0)
    assert "augsbert_ss" not in reproduce.seed_result("mrpc", 44, tmp_path)[0]["test"]  # lexical + kde, for now
    write_run(tmp_path / "mrpc-full-seed44_semantic-20261125-030000", ["semantic", "bm25+semantic"],
              {**shared, "cross_encoder": 84.25, "sbert": 82.5, "augsbert_ss": 81.0, "augsbert_bm25_ss": 82.0}, 70.0)

    metrics, spec, _ = reproduce.seed_result("mrpc", 44, tmp_path)
    assert metrics["test"] == {**shared, "sbert": 83.0, "augsbert_bm25": 84.0, "augsbert_rs": 82.0, "augsbert_kde": 83.5,
                               "augsbert_ss": 81.0, "augsbert_bm25_ss": 82.0}  # SBERT: the seed-optimized one
    assert metrics["parts"]["semantic"]["test_gap_of_shared_rows"]["cross_encoder"] == 0.25
    assert reproduce.run_seconds(metrics) == 100.0 + 5.0 + 50.0 + 5.0 + 70.0 + 5.0
    assert sorted(spec["sampling"]["strategies"]) == ["bm25", "bm25+semantic", "kde", "random", "semantic"]


def test_a_seed_of_lexical_and_kde_parts_keeps_a_bi_encoder_teachers_rows(tmp_path: Path) -> None:
    """Without the semantic part a seed is lexical + kde; once the semantic part finishes, the whole split wins."""
    shared = {"jaccard": 40.0, "zero_shot": 45.0, "teacher_bi_encoder": 58.8}  # a bi-encoder teacher: no cross-encoder
    write_run(tmp_path / "bws_cross_topic-full-seed42_lexical-20261126-074522", ["bm25", "random"],
              {**shared, "sbert": 54.1, "augsbert_bm25": 54.6, "augsbert_rs": 54.7}, 100.0)
    assert reproduce.seed_result("bws_cross_topic", 42, tmp_path) is None
    write_run(tmp_path / "bws_cross_topic-full-seed42_kde-20261127-010000", ["kde"], {**shared, "sbert": 53.0, "augsbert_kde": 55.0}, 50.0)
    metrics, spec, _ = reproduce.seed_result("bws_cross_topic", 42, tmp_path)
    assert metrics["test"] == {**shared, "sbert": 54.1, "augsbert_bm25": 54.6, "augsbert_rs": 54.7, "augsbert_kde": 55.0}
    assert metrics["parts"]["kde"]["test_gap_of_shared_rows"] == {"jaccard": 0.0, "zero_shot": 0.0, "teacher_bi_encoder": 0.0}
    assert sorted(spec["sampling"]["strategies"]) == ["bm25", "kde", "random"]
    write_run(tmp_path / "bws_cross_topic-full-seed42_semantic-20261127-030000", ["semantic", "bm25+semantic"],
              {**shared, "sbert": 53.5, "augsbert_ss": 54.0, "augsbert_bm25_ss": 54.2}, 70.0)
    assert reproduce.seed_result("bws_cross_topic", 42, tmp_path)[0]["test"]["augsbert_ss"] == 54.0


def test_parts_run_the_strategies_a_whole_run_runs() -> None:
    from augsbert_ray.config import load_spec

    for name in ("bws_cross_topic", "bws_in_topic", "mrpc"):
        job = ROOT / reproduce.EXPERIMENTS[name][0]
        whole = load_spec(job, reproduce.overrides_for(name, quick=False, gpu=False)).sampling.strategies
        for split in reproduce.SPLITS:
            parts = [load_spec(job, reproduce.overrides_for(name, quick=False, gpu=False, part=part)) for part in split]
            semantic = {"semantic", "bm25+semantic"} if "semantic" not in split and "rest" not in split else set()
            assert sorted(s for part in parts for s in part.sampling.strategies) == sorted(set(whole) - semantic)
            # SBERT is seed-optimized where a part gives its row or retrieves with it (semantic_model: gold), so that
            # a semantic part draws a whole run's pools (before: with an SBERT fitted once); kde trains it once
            assert [part.tuning is not None for part in parts] == [p != "kde" for p in split]
            assert all(part.sampling.semantic_model == "gold" for part in parts)


def test_results_page_says_how_sbert_was_seed_optimized() -> None:
    """Read from the runs' specs; it said "5 seeds, all but the best culled at 20%" whatever --set changed."""
    tuning = {"seeds": 5, "models": ["sbert"], "keep": 1, "cull_at": 0.2}
    assert reproduce.seed_optimization({"stsb_1k": {"tuning": tuning}, "mrpc": {"tuning": tuning}}) == (
        " In-domain, SBERT is seed-optimized: 5 seeds, all but the best culled at 20% of the steps, chosen on dev "
        "(`tuning` in the specs linked below).")
    assert reproduce.seed_optimization({"stsb_1k": {"tuning": {**tuning, "seeds": [1, 2, 3], "scheduler": "asha", "cull_at": 0.3}},
                                        "mrpc": {"tuning": None}}) == (
        " In-domain, SBERT is stsb_1k: seed-optimized: 3 seeds, ASHA at 30% of the steps, chosen on dev; mrpc: not "
        "seed-optimized (`tuning` in the specs linked below).")
    assert "all but the best 2 culled" in reproduce.seed_optimization({"mrpc": {"tuning": {**tuning, "keep": 2}}})
    assert reproduce.seed_optimization({}) == ""


@pytest.mark.parametrize("quick", [False, True])
def test_every_experiment_runs_results_mds_minilm_teacher_whatever_its_jobs_default(quick: bool) -> None:
    """RESULTS.md's command must keep its teacher when a job's default becomes a stronger one (BWS in-topic's)."""
    from augsbert_ray.config import load_spec

    for name, (job, _) in reproduce.EXPERIMENTS.items():
        spec = load_spec(ROOT / job, reproduce.overrides_for(name, quick=quick, gpu=False))
        assert (spec.teacher.kind, spec.cross_encoder.model, spec.cross_encoder.learning_rate) == ("cross-encoder", "minilm", 1e-4), name
    assert load_spec(ROOT / reproduce.EXPERIMENTS["bws_in_topic"][0]).teacher.kind == "ensemble"

def test_a_part_takes_a_finished_sibling_parts_teacher(tmp_path: Path) -> None:
    base = "mrpc-full-seed43"
    assert reproduce.shared_teacher(tmp_path, base, "kde", None) == []  # no rest part yet: the kde part fits its own
    rest = tmp_path / f"{base}_rest-20261124-010000"
    write_run(rest, ["bm25"], {"sbert": 60.0}, 100.0)
    assert reproduce.shared_teacher(tmp_path, base, "kde", None) == []  # finished, but its models are gone
    (rest / "models" / "cross_encoder").mkdir(parents=True)
    teacher = [f"cross_encoder.trained={rest / 'models' / 'cross_encoder'}"]
    assert reproduce.shared_teacher(tmp_path, base, "kde", None) == teacher
    assert reproduce.shared_teacher(tmp_path, base, "semantic", None) == teacher  # any part of the seed
    assert reproduce.shared_teacher(tmp_path, base, "rest", None) == reproduce.shared_teacher(tmp_path, base, None, None) == []
    # a stopped kde part resumes with the teacher it started with, even after a newer rest part has finished
    stopped = tmp_path / f"{base}_kde-20261124-020000"
    stopped.mkdir()
    (stopped / "spec.yaml").write_text(yaml.safe_dump({"cross_encoder": {"trained": "/elsewhere/cross_encoder"}}))
    assert reproduce.shared_teacher(tmp_path, base, "kde", stopped) == ["cross_encoder.trained=/elsewhere/cross_encoder"]
    # an ensemble teacher's two models, and a bi-encoder teacher's one
    (rest / "models" / "teacher_bi_encoder").mkdir()
    assert reproduce.shared_teacher(tmp_path, base, "kde", None) == [*teacher, f"teacher.bi_encoder.trained={rest / 'models' / 'teacher_bi_encoder'}"]
    (rest / "models" / "cross_encoder").rmdir()
    assert reproduce.shared_teacher(tmp_path, base, "kde", None) == [f"teacher.bi_encoder.trained={rest / 'models' / 'teacher_bi_encoder'}"]
    (stopped / "spec.yaml").write_text(yaml.safe_dump({"cross_encoder": {}, "teacher": {"bi_encoder": {"trained": "/elsewhere/bi"}}}))
    assert reproduce.shared_teacher(tmp_path, base, "kde", stopped) == ["teacher.bi_encoder.trained=/elsewhere/bi"]
    (stopped / "spec.yaml").write_text(yaml.safe_dump({"cross_encoder": {"epochs": 1}}))  # it fitted its own
    assert reproduce.shared_teacher(tmp_path, base, "kde", stopped) == []


def linked_files(page: Path) -> list[Path]:
    """The local files a markdown page links to, resolved from the page's folder."""
    return [(page.parent / target).resolve() for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text(encoding="utf-8"))]


def test_results_page_links_each_tabulated_runs_spec_instead_of_inlining_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shared = {"jaccard": 40.0, "zero_shot": 45.0, "cross_encoder": 52.0}
    whole = {**shared, "sbert": 60.0, "augsbert_bm25": 62.0, "augsbert_rs": 61.0}
    write_run(runs / "bws_in_topic-full-seed42-20261123-190000", ["bm25", "random"], whole, 100.0)
    write_run(runs / "bws_in_topic-full-seed43_rest-20261123-190000", ["bm25", "random", "semantic", "bm25+semantic"],
              {**whole, "augsbert_ss": 61.5, "augsbert_bm25_ss": 61.7}, 100.0)
    write_run(runs / "bws_in_topic-full-seed43_kde-20261123-210000", ["kde"], {**shared, "sbert": 59.0, "augsbert_kde": 58.0}, 200.0)
    write_run(runs / "bws_in_topic-full-seed44_rest-20261123-220000", ["bm25"], whole, 100.0)  # its kde part never ran
    write_run(runs / "mrpc-full-seed42-20261123-230000", ["bm25"], whole, 100.0, {"kind": "bi-encoder", "bi_encoder": {"model": "mpnet"}})
    page = tmp_path / "docs" / "RESULTS.md"
    page.parent.mkdir()
    command = ["--collect", "--only", "bws_in_topic", "mrpc", "--runs", str(runs), "--results", str(page),
               "--json", str(tmp_path / "reproduce.json")]
    assert main(command) == 0

    text = page.read_text(encoding="utf-8")
    assert "```yaml" not in text and "<details>" not in text
    assert "| AugSBERT-BM25 | not run | not run | 62.00 ± 0.00 | 62.00 (1 seed) |" in text  # the tables stay
    assert "Runs: 3, seeds [42, 43];" in text  # the seeds tabulated, not those asked for
    assert "Teacher: bws_in_topic: cross-encoder from minilm; mrpc: bi-encoder mpnet fine-tuned on gold." in text
    links = sorted(path for path in linked_files(page) if path.name == "spec.yaml")
    assert links == sorted(run / "spec.yaml" for run in runs.iterdir() if "seed44" not in run.name)
    assert "../runs/bws_in_topic-full-seed43_kde-20261123-210000/spec.yaml" in text  # relative to the page
    assert "| bws_in_topic | 43 | kde |" in text and "| bws_in_topic | 42 | whole |" in text
    assert f"Command: `.venv/bin/python -m bench.reproduce {' '.join(command)}`" in text


def test_results_page_keeps_its_hand_written_notes_when_written_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "mrpc-full-seed42-20261123-230000", ["bm25"],
              {"jaccard": 40.0, "zero_shot": 45.0, "cross_encoder": 52.0, "sbert": 60.0, "augsbert_bm25": 59.0, "augsbert_rs": 61.0}, 100.0)
    page = tmp_path / "RESULTS.md"
    command = ["--collect", "--only", "mrpc", "--runs", str(runs), "--results", str(page), "--json", str(tmp_path / "r.json")]
    assert main(command) == 0
    assert reproduce.NOTES_HEADING not in page.read_text(encoding="utf-8")
    notes = f"{reproduce.NOTES_HEADING}\n\n- mrpc: BM25 missed by 1.00; tried more silver.\n  Second line.\n"
    page.write_text(page.read_text(encoding="utf-8").replace("## Hyperparameters", notes + "\n## Hyperparameters"), encoding="utf-8")
    write_run(runs / "mrpc-full-seed43-20261123-230000", ["bm25"],
              {"jaccard": 40.0, "zero_shot": 45.0, "cross_encoder": 52.0, "sbert": 62.0, "augsbert_bm25": 61.0, "augsbert_rs": 61.0}, 100.0)
    assert main(command) == 0

    text = page.read_text(encoding="utf-8")
    assert "- mrpc: AugSBERT-BM25 - SBERT = -1.00 (target >= +0.0: missed)" in text  # the effects of both seeds
    assert f"(target >= +0.0: missed); AugSBERT-RS - AugSBERT-BM25 = +1.00 (target <= +0.0: missed)\n\n{notes}\n## Hyperparameters" in text
    assert text.count(reproduce.NOTES_HEADING) == 1


def test_another_teachers_runs_are_tabulated_beside_the_pages_own(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Each set's own teacher row (a cross-encoder here, an ensemble there), its fine-tuned bi-encoder where it has
    one, and the students: this page's mean / the other set's, with the other's seeds where fewer."""
    minilm, mpnet = tmp_path / "minilm_runs", tmp_path / "mpnet_runs"
    for seed, sbert in ((42, 60.0), (43, 62.0)):
        write_run(minilm / f"bws_in_topic-full-seed{seed}-20261123-190000", ["bm25", "random"],
                  {"cross_encoder": 52.0, "sbert": sbert, "augsbert_bm25": 60.0, "augsbert_rs": 59.0}, 100.0)
    ensemble = {"kind": "ensemble", "bi_encoder": {"model": "mpnet"}}
    write_run(mpnet / "bws_in_topic-full-seed42-20261127-190000", ["bm25", "random"],
              {"cross_encoder": 65.0, "teacher_bi_encoder": 68.0, "teacher": 70.0, "sbert": 61.0, "augsbert_bm25": 67.0,
               "augsbert_rs": 68.0}, 100.0, ensemble)
    write_run(mpnet / "transfer_stsb_bws-full-seed42-20261127-190000", ["bm25"],
              {"teacher": 60.0, "sbert_source": 59.0, "augsbert": 60.5, "sbert_target": 65.0}, 100.0, ensemble)
    page = tmp_path / "RESULTS.md"
    assert main(["--collect", "--only", "bws_in_topic", "transfer_stsb_bws", "--runs", str(minilm), "--results", str(page),
                 "--json", str(tmp_path / "r.json"), "--beside", str(mpnet)]) == 0

    text = page.read_text(encoding="utf-8")
    beside = text.split(f"## Beside the runs in `{mpnet.as_posix()}`")[1].split("## Effects")[0]
    assert main(["--collect", "--runs", str(minilm), "--results", str(page), "--beside", str(tmp_path / "nothing")]) == 2
    assert f"--beside {tmp_path / 'nothing'}: no such directory of runs" in capsys.readouterr().err
    assert "bws_in_topic: ensemble of cross-encoder from minilm and bi-encoder mpnet fine-tuned on gold" in beside
    assert "| model | BWS in-topic, Spearman |\n" in beside and "| model | STSb → BWS in-topic, Spearman |\n" in beside  # --only's
    assert "| Teacher (each set's own) | 52.00 / 70.00 (1 seed) |" in beside
    assert "| teacher.bi_encoder fine-tuned on gold (its SBERT) | - / 68.00 (1 seed) |" in beside
    assert "| SBERT (gold only) | 61.00 / 61.00 (1 seed) |" in beside
    assert "| AugSBERT-BM25 | 60.00 / 67.00 (1 seed) |" in beside and "AugSBERT-KDE" not in beside
    assert "| AugSBERT (target silver) | - / 60.50 (1 seed) |" in beside


@pytest.mark.parametrize("page, runs", [("RESULTS.md", "reproduce_runs"), ("RESULTS_BEST_TEACHER.md", "reproduce_best_teacher_runs")])
def test_committed_results_pages_link_committed_specs(page: str, runs: str) -> None:
    page_path = ROOT / "docs" / page
    text = page_path.read_text(encoding="utf-8")
    assert "## Effects against the targets" in text and "```yaml" not in text
    assert "missed)" not in text or reproduce.NOTES_HEADING in text  # a missed target: what was tried
    specs = [path for path in linked_files(page_path) if path.name == "spec.yaml"]
    assert specs and all(path.is_file() for path in specs)
    assert all(path.parent.parent == ROOT / "bench" / "results" / runs for path in specs)
    assert len(specs) == len({path.parent for path in specs})  # one row per run directory


def test_a_bi_encoder_teachers_row_and_effects_are_tabulated() -> None:
    entry = lambda mean: {"mean": mean, "std": 0.0, "n_seeds": 1}  # noqa: E731
    results = {"stsb_1k": {"teacher_bi_encoder": entry(85.0), "sbert": entry(83.0), "augsbert_bm25": entry(84.0),
                           "augsbert_rs": entry(83.5)},
               "mrpc": {"sbert": entry(83.31), "augsbert_bm25": entry(83.38), "augsbert_rs": entry(83.69)}}
    specs = {"stsb_1k": {"teacher": {"kind": "bi-encoder", "bi_encoder": {"model": "mpnet"}}, "cross_encoder": {"model": "minilm"}}}
    lines = reproduce.table(results, ["stsb_1k"], reproduce.IN_DOMAIN_ROWS, ["STSb"])
    assert f"| {MODEL_TITLES['teacher_bi_encoder']} | 85.00 (1 seed) |" in lines
    assert not [line for line in lines if "Cross-encoder" in line or "Ensemble" in line]  # no run scored them
    effects = reproduce.deltas(results, specs)
    assert "- stsb_1k: teacher - SBERT = +2.00 (target > 0: met)" in effects
    assert f"- stsb_1k: AugSBERT-BM25 / teacher = {100 * 84 / 85:.1f}% (target >= 97%: met)" in effects
    assert "- stsb_1k: AugSBERT-BM25 - SBERT = +1.00 (target >= +1.5: missed)" in effects[2]
    assert "- mrpc: AugSBERT-BM25 - SBERT = +0.07 (target >= +0.0: met)" in effects[-1]  # MRPC's target: F1 no lower
    assert reproduce.describe_teacher(specs["stsb_1k"]) == "bi-encoder mpnet fine-tuned on gold"


def test_every_set_of_reproduce_counts() -> None:
    """Before: a second --set replaced the first (`augsbert run`'s --set is repeated the same way)."""
    assert reproduce.parse_options(["--set", "a=1", "b=2", "--set", "c=3"]).settings == ("a=1", "b=2", "c=3")


@pytest.mark.parametrize(("arguments", "message"), [
    (["--seeds", "43", "43"], "--seeds: 43 repeats"),  # before: one run tabulated as two seeds, std 0
    (["--seeds", "-1"], "--seeds: must be >= 0"),
    (["--cpus", "0"], "--cpus 0: must be > 0 (leave it out for all CPUs)"),  # before: all CPUs, silently
    (["--set", "seed=7"], "--set seed=7: reproduce sets seed in every run from --seeds"),  # before: silently overridden
    (["--set", "output_dir=/elsewhere"], "--set output_dir=/elsewhere: reproduce sets output_dir in every run from --runs"),
    (["--results", "{tmp}"], "--results '{tmp}': a directory; give a file"),  # before: a traceback after every run
    (["--json", "{tmp}/no/r.json"], "--json {tmp}/no/r.json: its directory {tmp}/no does not exist"),
    (["--runs", "{tmp}/nothing"], "--runs {tmp}/nothing: no such directory of runs"),  # before: 'no finished seed', exit 0
    # before: ignored, and the page's command line claimed them
    (["--set", "teacher.kind=ensemble", "--gpu", "--data-dir", "{tmp}"],
     "--set, --gpu, --data-dir: --collect runs nothing, and tabulates the finished runs whatever they were made with"),
    (["--only", "stsb_1k", "--part", "kde", "--cpus", "1"],
     "--part, --cpus: --collect runs nothing, and tabulates the finished runs whatever they were made with"),
])
def test_reproduce_refuses_bad_options_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture, arguments: list[str], message: str) -> None:
    (tmp_path / "runs").mkdir()
    defaults = ["--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json")]
    assert main(["--collect", *defaults, *(argument.format(tmp=tmp_path) for argument in arguments)]) == 2
    assert capsys.readouterr().err == f"bench.reproduce: error: {message.format(tmp=tmp_path)}\n"


@pytest.mark.parametrize(("content", "message"), [
    ('{"test": {"sbert": 6', "metrics.json: cannot read: Expecting ',' delimiter"),  # before: no file named
    ('[1, 2]', "metrics.json: not a mapping but list"),  # before: a traceback (AttributeError)
    ('{"test": {"sbert": "high"}, "details": {"sbert": {}}}', "metrics.json: no 'test' scores (numbers) with a 'details' entry for each"),
    ('{"details": {}}', "metrics.json: no 'test' scores (numbers) with a 'details' entry for each"),  # before: KeyError
    ('{"test": {"sbert": NaN}, "details": {"sbert": {}}}', "metrics.json: the test score of sbert is nan, not a number a mean can take"),
])  # NaN: before, statistics.stdev's AttributeError, a traceback
def test_a_broken_run_file_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture, content: str, message: str) -> None:
    run_dir = tmp_path / "runs" / "mrpc-full-seed42-20261123-230000"
    write_run(run_dir, ["bm25"], {"sbert": 60.0}, 100.0)
    (run_dir / "metrics.json").write_text(content)
    assert main(["--collect", "--only", "mrpc", "--seeds", "42", "--runs", str(tmp_path / "runs"),
                 "--results", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json")]) == 2
    assert capsys.readouterr().err.startswith(f"bench.reproduce: error: {run_dir / message}")


def test_a_run_without_random_sampling_and_a_row_of_fewer_seeds_are_tabulated(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: `KeyError: 'augsbert_rs'` (a traceback) for runs of BM25 alone, and a row of 2 of 3 seeds read as a
    mean over all 3."""
    for seed, extra in ((42, {"augsbert_ss": 61.0}), (43, {"augsbert_ss": 63.0}), (44, {})):
        write_run(tmp_path / "runs" / f"mrpc-full-seed{seed}-20261123-230000", ["bm25"], {"sbert": 60.0, "augsbert_bm25": 61.0, **extra}, 1.0)
    assert main(["--collect", "--only", "mrpc", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "r.md"),
                 "--json", str(tmp_path / "r.json")]) == 0
    page = (tmp_path / "r.md").read_text()
    assert "| 62.00 ± 1.41 (2 of 3 seeds) |" in page and "| 61.00 ± 0.00 |" in page
    assert "- mrpc: AugSBERT-BM25 - SBERT = +1.00 (target >= +0.0: met)\n" in page


@pytest.mark.parametrize(("arguments", "whole"), [
    ([], True), (["--quick"], False), (["--only", "mrpc"], False), (["--seeds", "42"], False), (["--part", "kde", "--only", "mrpc"], False),
])
def test_only_the_whole_reproduction_writes_the_committed_page_by_default(arguments: list[str], whole: bool) -> None:
    """Before: `--only bws_in_topic --seeds 43 --part kde` (this module's own example) replaced docs/RESULTS.md, of
    six experiments and three seeds, with a page of one seed."""
    options = reproduce.parse_options(["--runs", "runs/elsewhere", *arguments])
    expected = ((reproduce.ROOT / "docs" / "RESULTS.md", reproduce.ROOT / "bench" / "results" / "reproduce.json") if whole
                else (Path("runs/elsewhere/RESULTS.md"), Path("runs/elsewhere/reproduce.json")))
    assert (options.results, options.json) == expected


def test_a_finished_run_made_with_other_settings_is_not_reused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: `--set teacher.kind=bi-encoder` reused the finished cross-encoder run and tabulated it as asked for."""
    from augsbert_ray.config import dump_spec, load_spec

    runs = tmp_path / "runs"
    run_dir = runs / "mrpc-full-seed42_kde-20261123-230000"
    write_run(run_dir, ["kde"], {"sbert": 60.0}, 1.0)
    overrides = [*reproduce.overrides_for("mrpc", False, False, "kde"), "seed=42", f"output_dir={runs}", "name=mrpc-full-seed42_kde"]
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "config.json").write_text("{}")
    spec = load_spec(reproduce.ROOT / "jobs" / "mrpc_indomain.yaml", [*overrides, f"cross_encoder.trained={tmp_path / 'sibling'}"])
    (run_dir / "spec.yaml").write_text(dump_spec(spec))
    shutil.rmtree(tmp_path / "sibling")  # the part's teacher was copied from a sibling part that is gone since
    arguments = ["--only", "mrpc", "--seeds", "42", "--part", "kde", "--runs", str(runs), "--results", str(tmp_path / "r.md"),
                 "--json", str(tmp_path / "r.json")]
    assert main(arguments) == 0  # the same settings: reused, nothing run
    assert main([*arguments, "--set", "teacher.kind=bi-encoder"]) == 2
    assert capsys.readouterr().err == (f"bench.reproduce: error: {run_dir} finished with other settings than asked for: teacher.kind "
                                       "('cross-encoder' -> 'bi-encoder'); give another --runs, or move the run away to run it again\n")


def test_a_verdict_agrees_with_the_difference_it_prints() -> None:
    """Before: 64.02 - 62.52 (1.4999999999999929 in floats) was printed as +1.50 and judged 'missed'."""
    from bench.reproduce import deltas, summarize

    results = {"bws_cross_topic": {"sbert": summarize([62.52] * 3), "augsbert_bm25": summarize([64.02] * 3), "augsbert_rs": summarize([64.02] * 3)},
               "transfer_stsb_bws": {"sbert_source": summarize([59.02] * 3), "augsbert": summarize([64.02] * 3)}}
    lines = deltas(results, {"bws_cross_topic": {}, "transfer_stsb_bws": {}})
    assert "AugSBERT-BM25 - SBERT = +1.50 (target >= +1.5: met)" in lines[0]
    assert lines[1] == "- transfer_stsb_bws: AugSBERT - SBERT-source = +5.00 (target >= +5.0: met)"
