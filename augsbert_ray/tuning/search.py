"""Seed (and top-k) search on Ray Tune. Each Tune trial's work is a Ray Train fit.

- ``sync`` (default): two Tune phases. Phase one trains every trial to the cull step and checkpoints
  its full training state; only the best ``keep`` by dev score resume from their checkpoints to the end.
- ``asha``: one Tune run with a plain ASHAScheduler (grace period = the cull step, reduction factor =
  the number of trials). ASHA lets the first trial through each rung, so more than ``keep`` may finish.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray
from ray import tune
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY, TuneReportCallback
from ray.tune.schedulers import ASHAScheduler
from ray.tune.trainable import wrap_function

from augsbert_ray.config import JobSpec, TuningSpec
from augsbert_ray.runtime import log
from augsbert_ray.training.ray_fit import TrainFile
from augsbert_ray.tuning.trial_loop import cull_step, eval_steps, total_steps, tuning_train_loop


@dataclass
class Trial:
    """One (seed, top_k) fit of one bi-encoder, and what it did."""

    name: str
    seed: int
    top_k: int | None
    train_files: list[TrainFile]
    total_steps: int
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, dev score)
    cull_score: float | None = None
    final_score: float | None = None
    steps: int = 0  # optimizer steps this trial actually ran, summed over phases
    status: str = "pending"  # survived | culled
    checkpoint: str | None = None  # the cull-point training state, then the final model

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data["train_files"] = [path for path, _ in self.train_files]
        data["history"] = [{"step": step, "dev": score} for step, score in self.history]
        return data


@dataclass
class SearchSetup:
    """What every trial of one tuned model shares."""

    spec: JobSpec
    model_name: str
    base_model: str
    dev_file: str
    storage: Path

    @property
    def tuning(self) -> Any:
        assert self.spec.tuning is not None
        return self.spec.tuning


def training_rows(files: list[TrainFile]) -> int:
    """Rows a fit trains on: all gold rows, and the silver rows that selection accepted (if it marked any)."""
    rows = 0
    for path, _ in files:
        if "accepted" in pq.read_schema(path).names:
            rows += int(pc.sum(pq.read_table(path, columns=["accepted"]).column("accepted")).as_py() or 0)
        else:
            rows += pq.ParquetFile(path).metadata.num_rows
    return rows


def plan_trials(setup: SearchSetup, train_sets: dict[int | None, list[TrainFile]]) -> list[Trial]:
    """Seeds x top_k values; the training files of each k are made once and shared by its seeds."""
    trials = []
    workers = setup.spec.training.num_workers
    for k, files in train_sets.items():
        rows = training_rows(files)
        steps = total_steps(rows, setup.spec.bi_encoder.batch_size, workers, setup.spec.bi_encoder.epochs)
        for seed in setup.tuning.seed_list(setup.spec.seed):
            name = f"{setup.model_name}-{'' if k is None else f'k{k}-'}s{seed}"
            trials.append(Trial(name=name, seed=seed, top_k=k, train_files=files, total_steps=steps))
    return trials


def trial_driver(tune_config: dict[str, Any]) -> None:
    """A Tune trial: build and fit a TorchTrainer; TuneReportCallback forwards the workers' reports to Tune."""
    config = tune_config["run"]
    trainer = TorchTrainer(
        tuning_train_loop,
        train_loop_config=config["loop"],
        scaling_config=ScalingConfig(**config["scaling"]),
        run_config=RunConfig(
            name=config["name"],
            storage_path=config["storage"],
            failure_config=FailureConfig(max_failures=config["max_failures"]),
            callbacks=[TuneReportCallback()],
        ),
    )
    try:
        trainer.fit()
    finally:
        Path(config["loop"]["stop_file"] + ".done").touch()


class StoppableTrial(wrap_function(trial_driver)):  # type: ignore[misc]
    """When Tune stops a trial (ASHA), ask its Ray Train run to stop and wait for it to end by itself.

    Otherwise Tune ends the trial actor, which takes the Ray Train controller with it before the controller
    can free its workers' placement group; on a small machine the next trials then wait forever for CPUs."""

    STOP_WAIT_S = 300

    def cleanup(self) -> None:
        stop_file = Path(self.config["run"]["loop"]["stop_file"])
        stop_file.touch()  # the workers check it after every step
        deadline = time.monotonic() + self.STOP_WAIT_S
        while not Path(str(stop_file) + ".done").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        super().cleanup()


# The Tune trial actor only waits on its TorchTrainer; Tune refuses a zero request, so it takes a sliver
# of the trial's CPUs and the Ray Train workers hold the rest.
TRIAL_ACTOR_CPU = 0.01


def worker_cpus(setup: SearchSetup) -> float:
    return max(setup.tuning.cpus_per_trial - TRIAL_ACTOR_CPU, TRIAL_ACTOR_CPU) / setup.spec.training.num_workers


def scaling(setup: SearchSetup) -> dict[str, Any]:
    """Each trial's resources, split evenly over its Ray Train workers."""
    workers = setup.spec.training.num_workers
    resources = {"CPU": worker_cpus(setup)}
    if setup.tuning.gpus_per_trial > 0:
        resources["GPU"] = setup.tuning.gpus_per_trial / workers
    return {"num_workers": workers, "use_gpu": setup.tuning.gpus_per_trial > 0, "resources_per_worker": resources}


def concurrent_trials(tuning: TuningSpec, cluster: dict[str, float]) -> int:
    """``tuning.max_concurrent_trials``, else as many trials as the cluster's CPUs (and GPUs) hold at once.
    Tune alone would start every trial's actor, since each takes only a sliver of a CPU; the trials whose
    Ray Train workers then find no CPUs time out after 60 s and retry, over and over, and load the machine."""
    if tuning.max_concurrent_trials is not None:
        return tuning.max_concurrent_trials
    fits = [cluster.get("CPU", 0.0) / tuning.cpus_per_trial]
    if tuning.gpus_per_trial > 0:
        fits.append(cluster.get("GPU", 0.0) / tuning.gpus_per_trial)
    return max(1, math.floor(min(fits) + 1e-9))  # 1.0 / 0.2 must give 5


def trial_config(setup: SearchSetup, trial: Trial, phase: str, stop_at: int | None, resume_from: str | None) -> dict[str, Any]:
    cull = cull_step(trial.total_steps, setup.tuning.cull_at)
    loop = {
        "spec": setup.spec.bi_encoder.model_dump(mode="json"),
        "model": setup.base_model,
        "train_files": trial.train_files,
        "seed": trial.seed,
        "total_steps": trial.total_steps,
        "eval_steps": eval_steps(trial.total_steps, cull, setup.tuning.eval_every),
        "stop_at": stop_at,
        "resume_from": resume_from,
        "dev_file": setup.dev_file,
        "task": setup.spec.task,
        # Tune asks a trial to stop by creating this file; the worker writes the steps it ran to <file>.steps.
        "stop_file": str((setup.storage / "stop" / f"{setup.model_name}-{phase}-{trial.name}").resolve()),
        # Ray caps a worker's threads at its CPUs; at least one.
        "threads": max(1, round(worker_cpus(setup))),
    }
    return {
        "name": f"{trial.name}-{phase}",
        "trial": trial.name,
        "loop": loop,
        "scaling": scaling(setup),
        "storage": str((setup.storage / "ray_train").resolve()),
        "max_failures": setup.spec.training.max_failures,
    }


def clear_stopped_attempt(setup: SearchSetup, configs: list[dict[str, Any]], phase: str) -> None:
    """A resumed run starts an unfinished search over. What a stopped attempt of this phase left would leak
    into it: its stop files end the new trials after one step, and Ray Train restores a run's checkpoints
    from its storage directory."""
    shutil.rmtree(setup.storage / f"{setup.model_name}-{phase}", ignore_errors=True)
    for config in configs:
        shutil.rmtree(Path(config["storage"]) / config["name"], ignore_errors=True)
        for suffix in ("", ".done", ".steps"):
            Path(config["loop"]["stop_file"] + suffix).unlink(missing_ok=True)


def run_phase(setup: SearchSetup, configs: list[dict[str, Any]], phase: str, scheduler: Any = None) -> dict[str, Any]:
    """Run the trials concurrently as one Tune experiment; returns Tune's Result per trial name."""
    clear_stopped_attempt(setup, configs, phase)
    tuner = tune.Tuner(
        tune.with_resources(StoppableTrial, {"CPU": TRIAL_ACTOR_CPU}),
        param_space={"run": tune.grid_search(configs)},
        tune_config=tune.TuneConfig(
            scheduler=scheduler,
            metric="dev_score" if scheduler is not None else None,
            mode="max" if scheduler is not None else None,
            max_concurrent_trials=concurrent_trials(setup.tuning, ray.cluster_resources()),
            trial_name_creator=lambda t: t.config["run"]["name"],
            trial_dirname_creator=lambda t: t.config["run"]["name"],
        ),
        run_config=tune.RunConfig(name=f"{setup.model_name}-{phase}", storage_path=str(setup.storage.resolve()), verbose=0),
    )
    (setup.storage / "stop").mkdir(parents=True, exist_ok=True)
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
    ran = Path(result.config["run"]["loop"]["stop_file"] + ".steps")
    if ran.exists():  # written by the worker: a trial stopped by Tune may have run past its last report
        trial.steps += int(ran.read_text())
    elif rows:
        trial.steps += int(rows[-1]["steps_run"])
    for step, score in trial.history:
        if step == cull:
            trial.cull_score = score
        if step == trial.total_steps:
            trial.final_score = score
    trial.checkpoint = (result.metrics or {}).get(CHECKPOINT_PATH_KEY, trial.checkpoint)


def score_key(score: float | None) -> float:
    return -math.inf if score is None or math.isnan(score) else score


def sync_search(setup: SearchSetup, trials: list[Trial]) -> None:
    """Phase one to the cull step; the best ``keep`` resume from their checkpoints to the end."""
    culls = {trial.name: cull_step(trial.total_steps, setup.tuning.cull_at) for trial in trials}
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
    log.info("tuning %s: culled at step %s: %s; going on: %s", setup.model_name, sorted(set(culls.values())),
             [t.name for t in ranked[setup.tuning.keep :]], [t.name for t in survivors])
    configs = [trial_config(setup, trial, "phase2", None, trial.checkpoint) for trial in survivors]
    results = run_phase(setup, configs, "phase2")
    for trial in survivors:
        record(trial, results[trial.name], culls[trial.name])
        trial.status = "survived"


def asha_search(setup: SearchSetup, trials: list[Trial]) -> None:
    """Plain ASHA: grace period at the cull step, reduction factor = number of trials."""
    total = max(trial.total_steps for trial in trials)
    cull = cull_step(total, setup.tuning.cull_at)
    scheduler = ASHAScheduler(time_attr="step", grace_period=cull, max_t=total, reduction_factor=max(2, len(trials)))
    configs = [trial_config(setup, trial, "asha", None, None) for trial in trials]
    results = run_phase(setup, configs, "asha", scheduler)
    for trial in trials:
        record(trial, results[trial.name], cull_step(trial.total_steps, setup.tuning.cull_at))
        trial.status = "survived" if trial.final_score is not None else "culled"


@dataclass
class Outcome:
    """The search for one tuned model."""

    model_name: str
    scheduler: str
    cull_at: float
    keep: int
    trials: list[Trial]
    chosen: str
    wall_seconds: float

    @property
    def steps_spent(self) -> int:
        return sum(trial.steps for trial in self.trials)

    @property
    def steps_full(self) -> int:
        """Steps of training every trial to the end."""
        return sum(trial.total_steps for trial in self.trials)

    def state(self) -> dict[str, Any]:
        """Every field, JSON-ready: what a resumed run restores with ``from_state``."""
        return asdict(self)

    @classmethod
    def from_state(cls, data: dict[str, Any]) -> "Outcome":
        trials = [
            Trial(**{**trial, "train_files": [tuple(f) for f in trial["train_files"]], "history": [tuple(h) for h in trial["history"]]})
            for trial in data["trials"]
        ]
        return cls(**{**data, "trials": trials})

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "scheduler": self.scheduler,
            "cull_at": self.cull_at,
            "keep": self.keep,
            "chosen": self.chosen,
            "steps_spent": self.steps_spent,
            "steps_full": self.steps_full,
            "steps_one_fit": max(trial.total_steps for trial in self.trials),
            "wall_seconds": self.wall_seconds,
            "trials": [trial.summary() for trial in self.trials],
        }


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
