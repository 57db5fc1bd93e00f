"""Seed optimization on Ray Tune with the tiny BERT: culling, exact resume, step accounting, ASHA, top-k, CLI."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors.torch import load_file

from augsbert_ray.cli import main
from augsbert_ray.config import JobSpec, SpecError, TuningSpec, load_spec
from augsbert_ray.data import load_gold
from augsbert_ray.tuning.report import tuning_markdown, tuning_summary
from augsbert_ray.tuning.search import (
    asha_schedule, asha_scheduler, concurrent_trials, holds_every_trial, record, run_phase, search, trial_config,
)
from augsbert_ray.tuning.trial_loop import CullBoard, cull_step, dev_score, eval_steps, score_key, total_steps
from augsbert_ray.tuning.trials import Outcome, SearchSetup, Trial, plan_trials

TRAIN_ROWS, BATCH, EPOCHS = 40, 8, 4  # 5 steps per epoch, 20 in all
SEEDS = [11, 12, 13]


@pytest.mark.parametrize(
    ("tuning", "message"),
    [
        ("{cull_at: 0}", r"tuning\.cull_at: .*strictly between 0 and 1"),
        ("{cull_at: 1}", r"tuning\.cull_at: .*strictly between 0 and 1"),
        ("{cull_at: 1.5}", r"tuning\.cull_at: .*strictly between 0 and 1"),
        ("{seeds: []}", r"tuning\.seeds: .*seed list is empty"),
        ("{seeds: 0}", r"tuning\.seeds: .*at least one seed"),
        ("{seeds: [1, 1]}", r"tuning\.seeds: .*repeat"),
        ("{seeds: 3, keep: 4}", r"tuning: .*keep \(4\) exceeds the number of trials of sbert \(3\)"),
        ("{seeds: [1, 2], top_k: [2, 3], keep: 4, models: [augsbert_bm25]}", None),
        ("{seeds: [1, 2], top_k: [2, 3], keep: 5, models: [augsbert_bm25]}", r"keep \(5\) exceeds .* augsbert_bm25 \(4\)"),
        ("{models: [augsbert_kde]}", r"tuning: .*augsbert_kde.* not among the bi-encoders"),
        ("{top_k: []}", r"tuning\.top_k: .*non-empty"),
    ],
)
def test_bad_tuning_spec_names_the_field(tuning: str, message: str | None) -> None:
    if message is None:
        assert load_spec(None, [f"tuning={tuning}"]).tuning.keep == 4
        return
    with pytest.raises(SpecError, match=message):
        load_spec(None, [f"tuning={tuning}"])


def test_step_arithmetic() -> None:
    assert total_steps(rows=85, batch_size=8, epochs=2) == 20  # the partial batch is dropped
    assert eval_steps(total=20, cull=4, every=0.5) == [4, 10, 20]
    for total in range(5, 300):
        # n trials to the cull step plus one to the end never cost more than n*cull_at + (1 - cull_at) fits
        assert 5 * cull_step(total, 0.2) + total - cull_step(total, 0.2) <= 1.8 * total
    assert cull_step(10, 0.3) == 3 and cull_step(5, 0.2) == 1
    with pytest.raises(ValueError, match="too short to cull at 0.2: it needs at least 5 steps"):
        cull_step(4, 0.2)


def test_only_as_many_trials_run_at_once_as_the_cluster_holds() -> None:
    def tuning(**fields: object) -> TuningSpec | None:
        return load_spec(None, [f"tuning={json.dumps(fields)}"]).tuning

    two_cpus = [{"CPU": 2.0}]
    # Tune alone would start all 15 trial actors (0.15 CPU); one worker would fit beside them, 14 would time out
    assert concurrent_trials(tuning(seeds=15), two_cpus) == 2
    assert concurrent_trials(tuning(cpus_per_trial=0.5), two_cpus) == 4
    assert concurrent_trials(tuning(cpus_per_trial=4), two_cpus) == 1  # one still runs, and waits for CPUs
    assert concurrent_trials(tuning(gpus_per_trial=0.2), [{"CPU": 16.0, "GPU": 1.0}]) == 5
    assert concurrent_trials(tuning(max_concurrent_trials=3), two_cpus) == 3
    # a trial is placed whole on one node, a fraction of a GPU within one GPU: the pooled totals (10 CPUs / 2.5;
    # 2 GPUs / 0.4) said 4 and 5, and the in-place search waited for ever on the trial that could not start
    assert concurrent_trials(tuning(cpus_per_trial=2.5), [{"CPU": 4.0}, {"CPU": 4.0}, {"CPU": 2.0}]) == 2
    assert concurrent_trials(tuning(gpus_per_trial=0.4), [{"CPU": 16.0, "GPU": 2.0}]) == 4


def test_the_in_place_cull_runs_only_where_every_trial_can_run_at_once() -> None:
    """Before: max_concurrent_trials at or above the trials chose the in-place cull even where the cluster could not
    hold them, and the trials at the cull waited for ever for those that could not start."""
    def tuning(**fields: object) -> TuningSpec:
        return load_spec(None, [f"tuning={json.dumps({'seeds': 3, 'cpus_per_trial': 1, **fields})}"]).tuning

    two_cpus = [{"CPU": 2.0}]
    assert not holds_every_trial(tuning(max_concurrent_trials=3), 3, two_cpus, {})  # two at a time: from checkpoints
    assert not holds_every_trial(tuning(), 3, two_cpus, {})
    assert holds_every_trial(tuning(), 2, two_cpus, {})
    # an autoscaler whose node groups reach 8 CPUs: the trials may wait for its nodes, as the setting asks
    assert holds_every_trial(tuning(max_concurrent_trials=3), 3, two_cpus, {"CPU": 8.0})
    assert not holds_every_trial(tuning(), 3, two_cpus, {"CPU": 8.0})  # unset: what runs now


def test_a_diverged_trial_scores_nan_in_classification_too(tiny_model: Path) -> None:
    """Before: its F1 threshold refused the NaN scores, the trial failed and stopped the whole search; in regression
    the same fit was ranked last (score_key)."""
    import pyarrow as pa
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model), device="cpu")
    dev = pa.table({"sentence1": ["a cat", "a dog", "rain"], "sentence2": ["a cat sat", "the sun", "rain falls"], "label": [1.0, 0.0, 1.0]})
    assert np.isfinite(dev_score(model, dev, "classification"))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    for task in ("classification", "regression"):
        assert np.isnan(dev_score(model, dev, task)) and score_key(dev_score(model, dev, task)) < score_key(-100.0)


@pytest.fixture(scope="module")
def gold_files(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    spec = load_spec(None, [f"data.train_limit={TRAIN_ROWS}"])
    gold = load_gold(spec.data, spec.seed, data_dir)
    directory = tmp_path_factory.mktemp("tuning_gold")
    pq.write_table(gold.train, directory / "train.parquet")
    pq.write_table(gold.dev.slice(0, 150), directory / "dev.parquet")
    return str(directory / "train.parquet"), str(directory / "dev.parquet")


@pytest.fixture(scope="module")
def uninterrupted_fits() -> dict[int, Trial]:
    """The exact-resume test's reference, by seed: the chosen seed's fit with no cull, run once for the module."""
    return {}


def tiny_spec(tiny_model: Path, tuning: str, epochs: int = EPOCHS) -> JobSpec:
    return load_spec(None, [
        f"bi_encoder.model={tiny_model}", f"bi_encoder.batch_size={BATCH}", f"bi_encoder.epochs={epochs}",
        "bi_encoder.learning_rate=0.001",  # large enough that seeds part ways within a few steps
        f"tuning={tuning}",
    ])


@pytest.mark.slow
@pytest.mark.parametrize(("at_once", "phases"), [(None, ["search"]), (2, ["phase1", "phase2"])], ids=["in_place", "from_checkpoints"])
def test_only_the_best_goes_on_and_resumes_exactly(
    ray_session, tiny_model: Path, gold_files, uninterrupted_fits: dict[int, Trial], tmp_path: Path, at_once: int | None,
    phases: list[str]
) -> None:
    train, dev = gold_files
    # cull_at 0.3 of 20 steps = step 6, in the second epoch: resuming must restore the epoch's data order too.
    # 3 trials of 0.6 CPUs all run at once on 2 CPUs (in place: the survivor's threads stay at 1, as in the
    # uninterrupted reference); two at a time, the cull goes through checkpoints.
    tuning = f"{{seeds: {SEEDS}, cull_at: 0.3, keep: 1, eval_every: 0.25, cpus_per_trial: 0.6, max_concurrent_trials: {json.dumps(at_once)}}}"
    spec = tiny_spec(tiny_model, tuning)
    setup = SearchSetup(spec, "sbert", str(tiny_model), dev, tmp_path / "tune")
    # What a stopped attempt left behind (a resumed run starts an unfinished search over): removed, not restored
    (tmp_path / "tune" / f"sbert-{phases[0]}" / "leftover").mkdir(parents=True)
    outcome = search(setup, {None: [(train, "label")]}, tmp_path / "models" / "sbert")
    assert sorted(path.name for path in (tmp_path / "tune").iterdir() if path.is_dir()) == [f"sbert-{phase}" for phase in phases]
    assert not (tmp_path / "tune" / f"sbert-{phases[0]}" / "leftover").exists()

    total, cull = 20, 6
    trials = {trial.seed: trial for trial in outcome.trials}
    cull_scores = {seed: trial.cull_score for seed, trial in trials.items()}
    assert len(set(cull_scores.values())) == len(SEEDS), cull_scores  # seeds differ, so the choice means something
    best = max(cull_scores, key=cull_scores.get)
    for seed, trial in trials.items():
        steps = [step for step, _ in trial.history]
        if seed == best:
            assert trial.status == "survived" and steps == [5, 6, 10, 15, 20] and trial.steps == total
            assert trial.final_score is not None and outcome.chosen == trial.name
        else:  # culled: never trained past the cull step
            assert trial.status == "culled" and steps == [5, 6] and trial.steps == cull and trial.final_score is None
    # steps are accounted for: what the workers ran, against training every trial fully
    assert outcome.steps_spent == len(SEEDS) * cull + (total - cull)
    assert outcome.steps_full == len(SEEDS) * total

    survivor = trials[best]
    if best not in uninterrupted_fits:  # fitted once: both ways of culling must resume to this same fit
        reference = next(t for t in plan_trials(setup, {None: [(train, "label")]}) if t.seed == best)
        results = run_phase(setup, [trial_config(setup, reference, "uninterrupted", None, None)], "uninterrupted")
        record(reference, results[reference.name], cull)
        uninterrupted_fits[best] = reference
    reference = uninterrupted_fits[best]
    assert reference.steps == total and reference.history == survivor.history
    resumed = load_file(str(tmp_path / "models" / "sbert" / "model.safetensors"))
    uninterrupted = load_file(str(Path(reference.checkpoint) / "model.safetensors"))
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in resumed)
    initial = load_file(str(tiny_model / "model.safetensors"))
    assert not torch.equal(resumed["embeddings.word_embeddings.weight"], initial["embeddings.word_embeddings.weight"])


@pytest.mark.slow
def test_asha_stops_trials_at_the_cull_rung(ray_session, tiny_model: Path, gold_files, tmp_path: Path) -> None:
    train, dev = gold_files
    # One trial at a time, so that the order in which trials reach the rung is the plan order.
    tuning = f"{{seeds: {SEEDS}, scheduler: asha, eval_every: 1.0, max_concurrent_trials: 1, cpus_per_trial: 0.5}}"
    spec = tiny_spec(tiny_model, tuning, epochs=10)
    setup = SearchSetup(spec, "sbert", str(tiny_model), dev, tmp_path / "tune")
    outcome = search(setup, {None: [(train, "label")]}, tmp_path / "models" / "sbert")

    total, rung = 50, 10
    scores = [trial.cull_score for trial in outcome.trials]
    for i, trial in enumerate(outcome.trials):
        # Tune's ASHA (reduction factor = number of trials): the cutoff is the (1 - 1/3) quantile of the scores
        # recorded at the rung *before* this trial's; the first trial always goes on
        goes_on = i == 0 or scores[i] >= np.nanpercentile(scores[:i], (1 - 1 / len(SEEDS)) * 100)
        steps = [step for step, _ in trial.history]
        if goes_on:
            assert trial.status == "survived" and steps == [rung, total] and trial.steps == total
        else:  # Tune stops it at the rung; the fit may run on a little before it sees that, and counts those steps
            assert trial.status == "culled" and steps == [rung] and rung <= trial.steps <= total
    assert outcome.trials[0].status == "survived"  # ASHA lets the first trial through every rung
    assert outcome.chosen == max((t for t in outcome.trials if t.final_score is not None), key=lambda t: t.final_score).name


def test_asha_scores_every_trial_at_its_one_rung(tmp_path: Path) -> None:
    """Before: ASHA compared the trials at the longest fit's cull step, while each trial scored dev (and tuning.md
    showed the score) at its own cull step: a shorter top_k fit was compared at a step it never scored."""
    spec = load_spec(None, ["tuning={seeds: [1], top_k: [1, 3], scheduler: asha, eval_every: 0.5, keep: 1}"])
    setup = SearchSetup(spec, "augsbert_bm25", "unused", "unused", tmp_path)
    short, long = Trial("k1", 1, 1, [], 30, final_score=70.0), Trial("k3", 1, 3, [], 100, final_score=71.0)
    rung, reduction = asha_schedule(100, 2, 1, spec.tuning.cull_at)
    assert (rung, reduction) == (20, 2)
    assert [trial_config(setup, trial, "asha", None, None, rung=rung)["loop"]["eval_steps"] for trial in (short, long)] \
        == [[15, 20, 30], [20, 50, 100]]
    assert trial_config(setup, short, "search", None, None)["loop"]["eval_steps"] == [6, 15, 30]  # its own cull step
    outcome = Outcome("augsbert_bm25", "asha", spec.tuning.cull_at, 1, [short, long], "k3", 1.0)
    markdown = tuning_markdown("t", tuning_summary({"augsbert_bm25": outcome}, {"augsbert_bm25": 69.0}, "spearman"))
    assert ("Scheduler `asha`: ASHA compares every trial's dev score at step 20 (20% of the longest fit; a shorter fit "
            "runs to its end) with those recorded there before it, and stops it below their 50% quantile (reduction "
            "factor 2, trials / keep); it lets the first trial through, so more than 1 may finish (steps per fit: 30, 100).") in markdown
    outcome = Outcome("augsbert_bm25", "asha", spec.tuning.cull_at, 2, [short, long], "k3", 1.0)
    markdown = tuning_markdown("t", tuning_summary({"augsbert_bm25": outcome}, {"augsbert_bm25": 69.0}, "spearman"))
    assert "Scheduler `asha`: with keep = trials (2) ASHA culls none: every trial trains to its end (steps per fit: 30, 100)." in markdown


def test_asha_culls_once_at_the_rung_and_keeps_keep() -> None:
    """Before: reduction factor = trials whatever tuning.keep, and max_t at the longest fit, where ASHA adds a rung
    at every reduction factor's multiple of the grace period: 3 trials culled at 20% were culled again at 60%, and
    the best at the cull step stopped there."""
    from types import SimpleNamespace

    def finishers(keep: int, scores: dict) -> list[str]:
        scheduler = asha_scheduler(*asha_schedule(100, len(scores), keep, 0.2))
        if scheduler is None:
            return sorted(scores)
        scheduler.set_search_properties("rank_score", "max")  # as run_phase sets it
        trials = {name: SimpleNamespace(trial_id=name) for name in scores}
        for trial in trials.values():
            scheduler.on_trial_add(None, trial)
        going = set(scores)
        for step in eval_steps(100, 20, 0.1):  # every 10 steps, as tuning.eval_every 0.1 reports
            for name in sorted(going):
                if scheduler.on_trial_result(None, trials[name], {"step": step, "rank_score": score_key(scores[name](step))}) == "STOP":
                    going.discard(name)
        return sorted(going)

    # at step 20: s42 54, s43 60, s44 40; s42 overtakes s43 later, which is no second cull
    scores = {"s42": lambda step: 50 + step / 5, "s43": lambda step: 59.5 + step / 40, "s44": lambda step: 40.0}
    assert finishers(2, scores) == ["s42", "s43"]  # the best two at the rung; s44 is below their 33% quantile
    assert finishers(1, scores) == ["s42", "s43"]  # s42 went first and passed (ASHA lets the first through); s44 stopped
    assert finishers(3, scores) == ["s42", "s43", "s44"]  # keep = trials: no scheduler, nothing culled
    # Before: a diverged fit's NaN passed the rung (NaN < cutoff is false) and was left out of later cutoffs
    diverged = {**scores, "s43": lambda step: float("nan")}
    assert finishers(2, diverged) == ["s42", "s44"]
    assert finishers(2, {**scores, "s42": lambda step: float("nan")}) == ["s42", "s43", "s44"]  # the first passes
    # a finite floor: with -inf there, the cutoff interpolated after s43 was -inf and s44 (0.0) passed
    assert finishers(1, {"s42": lambda step: 60.0, "s43": lambda step: float("nan"), "s44": lambda step: 0.0}) == ["s42"]


@pytest.mark.slow
def test_tune_command_searches_top_k_with_silver_made_once(
    ray_session, tiny_model: Path, tiny_cross_encoder: Path, data_dir: Path, tmp_path: Path, capsys
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: tiny-tune\noutput_dir: {tmp_path}\n"
        f"data: {{train_limit: {TRAIN_ROWS}}}\n"
        f"bi_encoder: {{model: {tiny_model}, batch_size: {BATCH}, learning_rate: 0.001}}\n"
        "sampling: {strategies: [bm25], top_k: 1}\n"
        "training: {num_workers: 0}\n"  # SBERT's plain fit (for the teacher gate) in this process: the trials are tested here
        "tuning: {seeds: [1, 2], top_k: [1, 2], keep: 1, models: [augsbert_bm25], eval_every: 0.5, cpus_per_trial: 0.45}\n"
    )
    args = ["tune", str(job), "--data-dir", str(data_dir), "--cross-encoder", str(tiny_cross_encoder)]
    assert main(args) == 0
    (run_dir,) = tmp_path.glob("tiny-tune-*")
    assert (run_dir / "models" / "cross_encoder" / "config.json").is_file() and not (run_dir / "ray_train" / "cross_encoder").exists()  # copied
    assert yaml.safe_load((run_dir / "spec.yaml").read_text())["cross_encoder"]["trained"] == str(tiny_cross_encoder)
    summary = json.loads((run_dir / "tuning.json").read_text())
    result = summary["models"]["augsbert_bm25"]
    trials = result["trials"]
    assert sorted((t["top_k"], t["seed"]) for t in trials) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    # each k's silver was labeled once, and all seeds of that k trained on the very same files
    silver = {k: sorted(run_dir.glob(f"tuning_silver/top_k{k}/silver/bm25/*.parquet")) for k in (1, 2)}
    for k, files in silver.items():
        assert files and all(sorted(t["train_files"][1:]) == [str(f) for f in files] for t in trials if t["top_k"] == k)
    labeled = {k: summary["counts"]["tuning_silver"][f"top_k={k}"]["labeled"]["bm25"] for k in (1, 2)}
    assert labeled[1] == sum(pq.ParquetFile(f).metadata.num_rows for f in silver[1]) < labeled[2]
    assert sorted(t["status"] for t in trials) == ["culled", "culled", "culled", "survived"]
    assert result["steps_spent"] == sum(t["steps"] for t in trials) < result["steps_full"]
    assert result["chosen"] in {t["name"] for t in trials if t["status"] == "survived"}
    assert isinstance(result["chosen_test"], float)
    assert (run_dir / "models" / "augsbert_bm25" / "model.safetensors").is_file()
    report = (run_dir / "tuning.md").read_text()
    assert "(chosen)" in report and "culled" in report and "dev at cull point" in report
    # the teacher gate ran before labeling, as in `augsbert run` (before: tune labeled without it)
    assert summary["teacher"]["student"] == "sbert" and "Teacher gate (before labeling): cross-encoder teacher dev" in report
    assert "tuning.md" not in capsys.readouterr().err

    # Stopped before its report, the run resumes in place: the search and the silver are reused, nothing is fitted
    # or labeled again, and the report is the same.
    assert main(["tune", "--resume", str(run_dir)]) == 2 and "has finished (tuning.json exists)" in capsys.readouterr().err

    def labeled_shards() -> dict[Path, int]:  # candidates are drawn again from the seed; labeled shards are kept
        return {path: path.stat().st_mtime_ns for path in sorted(run_dir.glob("tuning_silver/*/silver/bm25/*.parquet"))}

    written = labeled_shards()
    (run_dir / "tuning.json").unlink()
    assert main(["tune", "--resume", str(run_dir), "--data-dir", str(data_dir)]) == 0
    resumed = json.loads((run_dir / "tuning.json").read_text())
    assert resumed["models"] == summary["models"] and sorted(resumed["reused_fits"]) == ["augsbert_bm25", "cross_encoder", "sbert"]
    assert written and labeled_shards() == written


@pytest.mark.slow
def test_a_trial_that_fails_for_good_stops_the_others_at_once(ray_session, tiny_model: Path, gold_files, tmp_path: Path) -> None:
    """Before: the others trained to the end (hours, in a real search), and then the search failed all the same."""
    from dataclasses import replace

    train, dev = gold_files
    spec = tiny_spec(tiny_model, "{seeds: 2, eval_every: 0.02, cpus_per_trial: 0.6}", epochs=400)  # 2,000 steps
    setup = SearchSetup(spec, "sbert", str(tiny_model), dev, tmp_path / "tune")
    good, bad = plan_trials(setup, {None: [(train, "label")]})
    bad = replace(bad, train_files=[(str(tmp_path / "missing.parquet"), "label")])
    with pytest.raises(RuntimeError, match=rf"tuning sbert phase: 1 trial\(s\) failed: {bad.name}$"):
        run_phase(setup, [trial_config(setup, trial, "phase", None, None) for trial in (good, bad)], "phase")
    reported = [json.loads(line)["step"] for path in (tmp_path / "tune" / "sbert-phase").glob(f"{good.name}-phase/result.json")
                for line in path.read_text().splitlines()]  # none when it was stopped before its first evaluation
    assert max(reported, default=0) < good.total_steps == 2000


def test_tune_command_needs_a_tuning_section(capsys) -> None:
    assert main(["tune", "jobs/stsb_indomain_bm25.yaml"]) == 2
    assert "needs a 'tuning' section" in capsys.readouterr().err


def test_the_cull_board_waits_for_every_trial_or_its_failure(ray_session) -> None:
    import ray

    board = CullBoard.remote(["a", "b", "c", "d"], 2)
    waiting = [board.goes_on.remote("a", 80.0), board.goes_on.remote("b", float("nan")), board.goes_on.remote("c", 81.0)]
    ready, _ = ray.wait(waiting, timeout=1.0)
    assert ready == []  # "d" has neither posted nor failed
    board.trial_failed.remote("d")
    assert ray.get(waiting, timeout=30) == [True, False, True]  # a NaN score ranks last
    # a trial restarted after a failure posts again: its first score stands, and the verdict comes at once
    assert ray.get(board.goes_on.remote("a", 0.0), timeout=30) is True
    ray.kill(board)

    # a trial that posted the best score and then failed for good takes no place among the best (before: with
    # keep 1, every live trial was culled)
    lost = CullBoard.remote(["p", "q", "r"], 1)
    posted = [lost.goes_on.remote("p", 90.0), lost.goes_on.remote("q", 70.0)]
    ray.get(lost.trial_failed.remote("p"), timeout=30)  # an async actor may run calls out of order: "r" must come after
    assert ray.get([*posted, lost.goes_on.remote("r", 60.0)], timeout=30) == [False, True, False]
    ray.kill(lost)

    tied = CullBoard.remote(["x", "y"], 1)
    assert ray.get([tied.goes_on.remote("y", 1.0), tied.goes_on.remote("x", 1.0)], timeout=30) == [False, True]  # plan order
    ray.kill(tied)
