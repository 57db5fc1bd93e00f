"""Seed (and top-k) search on Ray Tune. Each Tune trial is one bi-encoder fit in the trial's own process.

- ``sync`` (default): every trial trains to the cull step; only the best ``keep`` by dev score train to the end.
  When the cluster holds every trial at once, the trials meet at the cull step (a CullBoard actor) and the
  survivors go on in place, on the CPUs the culled ones free. Otherwise in two Tune phases: phase one trains
  every trial to the cull step and checkpoints its full training state; the best resume from it to the end.
- ``asha``: one Tune run with an ASHAScheduler of one rung, at the longest fit's cull step, where every trial
  scores dev; reduction factor = trials / keep. ASHA compares a trial with those that reached the rung before it
  and lets the first through, so more than ``keep`` may finish.
"""

from __future__ import annotations

import math
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune import Callback, Stopper
from ray.tune.schedulers import ASHAScheduler

from augsbert_ray.config import TuningSpec
from augsbert_ray.runtime import autoscaler_resources, log
from augsbert_ray.training.ray_fit import TrainFile, sigint_restored
from augsbert_ray.tuning.trial_loop import CullBoard, cull_step, eval_steps, score_key, tuning_train_loop
from augsbert_ray.tuning.trials import Outcome, SearchSetup, Trial, plan_trials


def trial_resources(tuning: TuningSpec) -> dict[str, float]:
    return {"CPU": tuning.cpus_per_trial, **({"GPU": tuning.gpus_per_trial} if tuning.gpus_per_trial > 0 else {})}


def torch_threads(cpus: float) -> int:
    """Threads for a trial's share of CPUs: at least one (float-safe: 0.4 * 5 must give 2)."""
    return max(1, math.floor(cpus + 1e-9))


def concurrent_trials(tuning: TuningSpec, nodes: list[dict[str, float]]) -> int:
    """``tuning.max_concurrent_trials``, else as many trials as the nodes' CPUs (and GPUs) hold at once: the
    in-place cull needs every trial running, so the search must know whether they all fit. A trial runs on one
    node, and a fraction of a GPU within one GPU: 2 GPUs hold 4 trials of 0.4 GPU, not 5 (those waiting at the cull
    for a trial that never starts would wait for ever).

    Args:
        tuning: The tuning settings (cpus_per_trial, gpus_per_trial, max_concurrent_trials).
        nodes: Each live node's resources, e.g. ``{"CPU": 16.0, "GPU": 2.0}`` (``live_node_resources``).

    Example:
        ::

            concurrent_trials(spec.tuning, live_node_resources())  # 5 trials of 0.2 GPU on one GPU node
    """
    if tuning.max_concurrent_trials is not None:
        return tuning.max_concurrent_trials
    return max(1, trial_capacity(tuning, nodes))


def trial_capacity(tuning: TuningSpec, nodes: list[dict[str, float]]) -> int:
    """How many trials ``nodes`` hold at once: a trial runs on one node, a fraction of a GPU within one GPU."""

    def on_node(resources: dict[str, float]) -> int:
        fits = math.floor(resources.get("CPU", 0.0) / tuning.cpus_per_trial + 1e-9)  # 1.0 / 0.2 must give 5
        if tuning.gpus_per_trial > 0:
            fits = min(fits, math.floor(resources.get("GPU", 0.0) + 1e-9) * math.floor(1 / tuning.gpus_per_trial + 1e-9))
        return fits

    return sum(on_node(resources) for resources in nodes)


def holds_every_trial(tuning: TuningSpec, trials: int, nodes: list[dict[str, float]], autoscaler: dict[str, float]) -> bool:
    """Whether all ``trials`` can run at once, as the in-place cull needs (a trial waiting at the cull for one that
    cannot start would wait for ever): the concurrency allows it, and the live ``nodes`` hold them or, with an
    ``autoscaler`` (the most its node groups have, ``autoscaler_resources``), the cluster can grow to. A
    ``max_concurrent_trials`` above that is a cap, not a promise.

    Example:
        ::

            holds_every_trial(spec.tuning, 5, live_node_resources(), autoscaler_resources())
    """
    capacity = max(trial_capacity(tuning, nodes), trial_capacity(tuning, [autoscaler]) if autoscaler else 0)
    return min(concurrent_trials(tuning, nodes), capacity) >= trials


def live_node_resources() -> list[dict[str, float]]:
    """The resources of each node of the Ray cluster that is alive."""
    return [node["Resources"] for node in ray.nodes() if node["Alive"]]


def trial_config(
    setup: SearchSetup, trial: Trial, phase: str, stop_at: int | None, resume_from: str | None,
    cull: dict[str, Any] | None = None, rung: int | None = None,
) -> dict[str, Any]:
    """What Tune runs for ``trial`` in ``phase``: ``stop_at`` checkpoints and stops there; ``cull`` (the board,
    cull step and threads after it) makes the trial ask the board there whether it goes on. Dev is scored at the
    trial's cull step, or at ASHA's ``rung`` (one step for all trials), and every ``eval_every`` of its steps."""
    compared_at = cull_step(trial.total_steps, setup.tuning.cull_at) if rung is None else min(rung, trial.total_steps)
    loop = {
        "name": f"{setup.model_name}-{phase}-{trial.name}",
        "trial": trial.name,
        "spec": setup.spec.bi_encoder.model_dump(mode="json"),
        "model": setup.base_model,
        "train_files": trial.train_files,
        "seed": trial.seed,
        "threads": torch_threads(setup.tuning.cpus_per_trial),
        "bf16": setup.spec.training.bf16,
        "total_steps": trial.total_steps,
        "eval_steps": eval_steps(trial.total_steps, compared_at, setup.tuning.eval_every),
        "stop_at": stop_at,
        "cull": cull,
        "resume_from": resume_from,
        "dev_file": setup.dev_file,
        "task": setup.spec.task,
    }
    return {"name": f"{trial.name}-{phase}", "trial": trial.name, "loop": loop}


def run_trial(tune_config: dict[str, Any]) -> None:
    tuning_train_loop(tune_config["run"]["loop"])


class StopOnFailure(Callback, Stopper):
    """A trial that failed for good (its retries spent) fails the search (run_phase raises): the other trials stop
    now, instead of training on for hours first; the cull board, where some may wait for it, is told at once."""

    def __init__(self, board: Any = None) -> None:
        self.board, self.failed = board, False

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.failed = True
        if self.board is not None:
            self.board.trial_failed.remote(trial.config["run"]["trial"])

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.failed


def run_phase(setup: SearchSetup, configs: list[dict[str, Any]], phase: str, scheduler: Any = None, board: Any = None) -> dict[str, Any]:
    """Run the trials concurrently as one Tune experiment; returns Tune's Result per trial name (``board``: the
    in-place search's cull board). A resumed run starts an unfinished search over, so what a stopped attempt of this
    phase left is removed first."""
    shutil.rmtree(setup.storage / f"{setup.model_name}-{phase}", ignore_errors=True)
    on_failure = StopOnFailure(board)
    tuner = tune.Tuner(
        tune.with_resources(run_trial, trial_resources(setup.tuning)),
        param_space={"run": tune.grid_search(configs)},
        tune_config=tune.TuneConfig(
            scheduler=scheduler,
            metric="rank_score" if scheduler is not None else None,
            mode="max" if scheduler is not None else None,
            max_concurrent_trials=concurrent_trials(setup.tuning, live_node_resources()),
            trial_name_creator=lambda t: t.config["run"]["name"],
            trial_dirname_creator=lambda t: t.config["run"]["name"],
        ),
        run_config=tune.RunConfig(
            name=f"{setup.model_name}-{phase}", storage_path=str(setup.storage.resolve()), verbose=0,
            callbacks=[on_failure], stop=on_failure,
            failure_config=tune.FailureConfig(max_failures=setup.spec.training.max_failures or 0),
        ),
    )
    with sigint_restored():  # during the search, Tune's handler ends it gracefully (unless the CLI turned it off)
        grid = tuner.fit()
    results = {result.config["run"]["trial"]: result for result in grid}
    failed = {name: result.error for name, result in results.items() if result.error is not None}
    if failed:
        # chained to the first failure, so that the command can name its root cause
        raise RuntimeError(f"tuning {setup.model_name} {phase}: {len(failed)} trial(s) failed: {', '.join(failed)}") from next(iter(failed.values()))
    return results


def reports(result: Any) -> list[dict[str, Any]]:
    """Every report of a trial, in order (Tune keeps them in its metrics dataframe)."""
    frame = result.metrics_dataframe
    if frame is None or frame.empty:
        return []
    return frame.sort_values("training_iteration").to_dict("records")


def record(trial: Trial, result: Any, cull: int) -> None:
    rows = reports(result)
    trial.history += [(int(row["step"]), float(row["dev_score"])) for row in rows]
    if rows:  # reporting is synchronous: a trial that Tune stopped ran no step past its last report
        trial.steps += int(rows[-1]["steps_run"])
    for step, score in trial.history:
        if step == cull:
            trial.cull_score = score
        if step == trial.total_steps:
            trial.final_score = score
    if result.checkpoint is not None:
        trial.checkpoint = result.checkpoint.path


def log_cull(setup: SearchSetup, culls: dict[str, int], survivors: list[Trial], culled: list[Trial]) -> None:
    log.info("tuning %s: culled at step %s: %s; going on: %s", setup.model_name, sorted(set(culls.values())),
             [t.name for t in culled], [t.name for t in survivors])


def sync_search(setup: SearchSetup, trials: list[Trial]) -> None:
    """Every trial to the cull step, then the best ``keep`` to the end: in place when the cluster holds every
    trial at once, else from checkpoints in a second phase."""
    culls = {trial.name: cull_step(trial.total_steps, setup.tuning.cull_at) for trial in trials}
    if holds_every_trial(setup.tuning, len(trials), live_node_resources(), autoscaler_resources()):
        in_place_search(setup, trials, culls)
    else:
        checkpointed_search(setup, trials, culls)


def in_place_search(setup: SearchSetup, trials: list[Trial], culls: dict[str, int]) -> None:
    """One Tune run: the trials meet at the cull step, the culled ones end there, and the survivors train on,
    with the threads of the CPUs that the culled ones reserved."""
    name = f"augsbert-cull-{setup.model_name}-{uuid.uuid4().hex[:8]}"
    board = CullBoard.options(name=name).remote([trial.name for trial in trials], setup.tuning.keep)
    threads = torch_threads(setup.tuning.cpus_per_trial * len(trials) / setup.tuning.keep)  # the spec holds keep <= trials
    configs = [
        trial_config(setup, trial, "search", None, None, cull={"board": name, "step": culls[trial.name], "threads": threads})
        for trial in trials
    ]
    try:
        results = run_phase(setup, configs, "search", board=board)
    finally:
        ray.kill(board)
    for trial in trials:
        record(trial, results[trial.name], culls[trial.name])
        trial.status = "survived" if trial.final_score is not None else "culled"
    log_cull(setup, culls, [t for t in trials if t.status == "survived"], [t for t in trials if t.status == "culled"])


def checkpointed_search(setup: SearchSetup, trials: list[Trial], culls: dict[str, int]) -> None:
    """Phase one to the cull step; the best ``keep`` resume from their checkpoints to the end."""
    configs = [trial_config(setup, trial, "phase1", culls[trial.name], None) for trial in trials]
    results = run_phase(setup, configs, "phase1")
    for trial in trials:
        record(trial, results[trial.name], culls[trial.name])
        if trial.checkpoint is None:
            raise RuntimeError(f"trial {trial.name} reported no checkpoint at its cull step")
    ranked = sorted(trials, key=lambda trial: -score_key(trial.cull_score))  # stable: ties keep plan order
    survivors = ranked[: setup.tuning.keep]
    for trial in ranked[setup.tuning.keep :]:
        trial.status = "culled"
    log_cull(setup, culls, survivors, ranked[setup.tuning.keep :])
    configs = [trial_config(setup, trial, "phase2", None, trial.checkpoint) for trial in survivors]
    results = run_phase(setup, configs, "phase2")
    for trial in survivors:
        record(trial, results[trial.name], culls[trial.name])
        trial.status = "survived"


def asha_schedule(longest_fit: int, trial_count: int, keep: int, cull_at: float) -> tuple[int, float]:
    """(ASHA's one rung, where it compares every trial: the longest fit's cull step; its reduction factor
    trial_count / keep, which makes its cutoff the (1 - keep / trial_count) quantile of the scores recorded there)."""
    return cull_step(longest_fit, cull_at), trial_count / keep


def asha_scheduler(rung: int, reduction: float) -> ASHAScheduler | None:
    """Tune's ASHAScheduler with its one rung at step ``rung``; None where it would cull nothing (``reduction`` 1)."""
    if reduction <= 1:
        return None
    # max_t at the rung: ASHA adds a rung at every reduction factor's multiple of the grace period up to max_t (for 3
    # trials culled at 20%, a second cull at 60%); stop_last_trials off lets the trials run on past max_t
    return ASHAScheduler(time_attr="step", grace_period=rung, max_t=rung, reduction_factor=reduction, stop_last_trials=False)


def asha_search(setup: SearchSetup, trials: list[Trial]) -> None:
    """ASHA with one rung at the longest fit's cull step, reduction factor trials / keep (with keep = trials no
    trial is culled, and no scheduler runs). Each trial reports dev at that step, so that its cull score is the one
    ASHA compared (a fit shorter than it runs to its end)."""
    longest = max(trial.total_steps for trial in trials)
    rung, reduction = asha_schedule(longest, len(trials), setup.tuning.keep, setup.tuning.cull_at)
    scheduler = asha_scheduler(rung, reduction)
    configs = [trial_config(setup, trial, "asha", None, None, rung=rung) for trial in trials]
    results = run_phase(setup, configs, "asha", scheduler)
    for trial in trials:
        record(trial, results[trial.name], rung)
        trial.status = "survived" if trial.final_score is not None else "culled"


def search(setup: SearchSetup, train_sets: dict[int | None, list[TrainFile]], model_dir: Path) -> Outcome:
    """Run the search for one model and copy the chosen trial's final model to ``model_dir``."""
    trials = plan_trials(setup, train_sets)
    log.info("tuning %s: %d trials (%s), scheduler %s", setup.model_name, len(trials), [t.name for t in trials], setup.tuning.scheduler)
    started = time.perf_counter()
    (asha_search if setup.tuning.scheduler == "asha" else sync_search)(setup, trials)
    finished = [trial for trial in trials if trial.final_score is not None]
    if not finished:
        raise RuntimeError(f"tuning {setup.model_name}: no trial trained to the end")
    chosen = max(finished, key=lambda trial: score_key(trial.final_score))
    if model_dir.exists():
        shutil.rmtree(model_dir)
    shutil.copytree(str(chosen.checkpoint), model_dir)
    return Outcome(setup.model_name, setup.tuning.scheduler, setup.tuning.cull_at, setup.tuning.keep, trials, chosen.name,
                   round(time.perf_counter() - started, 2))
