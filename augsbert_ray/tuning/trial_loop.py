"""One tuning trial, a Ray Tune function trainable: a bi-encoder fit in the trial's own process that reports dev
metrics at fixed steps. At the cull step it either asks the search's CullBoard whether it goes on (every trial
runs at once: the survivors go on in place) or saves its full training state and stops (the search resumes the
best from it later); a fit given such a state resumes from it and runs to the end."""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import ray
from ray import tune

from augsbert_ray.config import BiEncoderSpec
from augsbert_ray.evaluation.metrics import dev_metric
from augsbert_ray.runtime import configure_torch_threads
from augsbert_ray.scoring import BiEncoderScorer
from augsbert_ray.training.bi_encoder import bi_encoder_loss
from augsbert_ray.training.ray_fit import (
    read_training_pairs, training_arguments, training_dataset, warn_bf16_on_cpu, with_progress_line, worker_setup,
)


def total_steps(rows: int, batch_size: int, epochs: int) -> int:
    """Optimizer steps of a full fit. A trial drops the last partial batch of an epoch (as every Ray Train fit
    does under DDP), so that a batch never mixes epochs."""
    per_epoch = rows // batch_size
    if per_epoch < 1:
        raise ValueError(f"{rows} training pairs make no full batch of {batch_size}")
    return per_epoch * epochs


def cull_step(total: int, cull_at: float) -> int:
    """Rounded down, so that n trials culled plus one finished never exceed n*cull_at + (1-cull_at) fits."""
    step = math.floor(cull_at * total + 1e-9)
    if step < 1:
        raise ValueError(
            f"a fit of {total} step(s) is too short to cull at {cull_at}: it needs at least {math.ceil(1 / cull_at)} "
            "steps; train on more pairs or epochs, or raise tuning.cull_at"
        )
    return step


def eval_steps(total: int, cull: int, every: float) -> list[int]:
    """Steps with a dev report: every ``every`` of the steps, plus the cull step and the last step."""
    count = math.floor(1 / every + 1e-9)
    steps = {math.floor(i * every * total + 1e-9) for i in range(1, count + 1)} | {cull, total}
    return sorted(step for step in steps if step > 0)


def dev_score(model: Any, dev: Any, task: str) -> float:
    """The task metric on dev with the in-memory model (eval mode: no dropout, no RNG use); NaN for a model whose
    scores are not finite."""
    s1, s2 = dev.column("sentence1").to_pylist(), dev.column("sentence2").to_pylist()
    scores = BiEncoderScorer(model).score(s1, s2)
    labels = dev.column("label").to_numpy()
    if not np.isfinite(scores).all():  # a fit that diverged: ranked last (score_key), in classification too, whose
        return math.nan                # F1 threshold refuses such scores and failed the whole search
    return dev_metric(task, scores, labels)


def epoch_seeded_batch_sampler(dataset: Any, batch_size: int, drop_last: bool, valid_label_columns: Any = None, generator: Any = None, seed: int = 0) -> Any:
    """Shuffled batches whose order depends only on (seed, epoch), so a resumed fit sees the same data order
    as an uninterrupted one even when it resumes after the first epoch."""
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import RandomSampler

    class EpochSeededBatchSampler(DefaultBatchSampler):
        def __iter__(self):  # type: ignore[no-untyped-def]
            self.generator.manual_seed(self.seed + self.epoch)
            return super().__iter__()

    return EpochSeededBatchSampler(
        RandomSampler(dataset, generator=generator), batch_size=batch_size, drop_last=drop_last,
        valid_label_columns=valid_label_columns, generator=generator, seed=seed,
    )


@ray.remote(num_cpus=0)
class CullBoard:
    """Where the trials of an in-place search meet at the cull step: each posts its dev score and waits until
    every trial has posted (or failed for good); the best ``keep`` go on, ties in plan order."""

    def __init__(self, trials: list[str], keep: int) -> None:
        self.order = trials
        self.keep = keep
        self.scores: dict[str, float] = {}
        self.failed: set[str] = set()
        self.decided = asyncio.Event()

    def _check(self) -> None:
        if set(self.order) <= set(self.scores) | self.failed:
            self.decided.set()

    async def goes_on(self, trial: str, score: float) -> bool:
        """Post ``trial``'s dev score and wait for the verdict: True if it is among the best ``keep``."""
        self.scores.setdefault(trial, score)  # a trial restarted after a failure posts again
        self._check()
        await self.decided.wait()
        # a trial that failed for good after posting its score holds no place among the best
        ranked = sorted((name for name in self.scores if name not in self.failed),
                        key=lambda name: (-score_key(self.scores[name]), self.order.index(name)))
        return trial in ranked[: self.keep]

    def trial_failed(self, trial: str) -> None:
        """A trial that failed for good is out; the others need not wait for it."""
        self.failed.add(trial)
        self._check()


# Below any dev metric (Spearman or F1, x100), and finite: ASHA's cutoff interpolates between the scores recorded at
# its rung, where -inf makes it NaN, which stops no trial.
DIVERGED_SCORE = -101.0


def score_key(score: float | None) -> float:
    """A dev score to rank trials by: a diverged fit's NaN, or no score, ranks below every score."""
    return DIVERGED_SCORE if score is None or math.isnan(score) else score


def make_reporter(model: Any, dev: Any, config: dict[str, Any]) -> Any:
    from transformers import TrainerCallback

    task, steps, stop_at, cull = config["task"], config["eval_steps"], config["stop_at"], config["cull"]
    board = ray.get_actor(cull["board"]) if cull is not None else None

    class TrialReporter(TrainerCallback):
        """Reports dev metrics to Tune at the chosen steps. At the cull step of an in-place search it asks the
        board whether the fit goes on (on the CPUs the culled trials freed) or stops; at ``stop_at`` it makes
        the trainer save its full state (model, optimizer, scheduler, RNG, step), reports it and stops."""

        start_step = 0
        train_begin = math.nan

        def metrics(self, state: Any) -> dict[str, Any]:
            scoring_from = time.time()
            score = dev_score(model, dev, task)
            return {
                "step": state.global_step,
                "fraction": state.global_step / state.max_steps,
                "dev_score": score,
                "rank_score": score_key(score),  # ASHA's metric: a raw NaN would pass its rung
                "steps_run": state.global_step - self.start_step,  # optimizer steps this fit ran
                # wall clock (epoch seconds) in the trial, for where its time goes
                "clock_loop_start": config["loop_start"],
                "clock_train_begin": self.train_begin,
                "clock_scoring": scoring_from,
                "clock_scored": time.time(),
            }

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start_step = state.global_step  # already restored when resuming
            self.train_begin = time.time()

        def on_epoch_begin(self, args: Any, state: Any, control: Any, train_dataloader: Any = None, **kwargs: Any) -> None:
            # The trainer's set_epoch does not reach our sampler through every dataloader wrapper.
            sampler = find_batch_sampler(train_dataloader)
            if sampler is not None:
                sampler.set_epoch(int(state.epoch + 1e-9))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == stop_at:
                control.should_save = True
                control.should_training_stop = True
            elif board is not None and state.global_step == cull["step"]:
                metrics = self.metrics(state)
                tune.report(metrics)
                if ray.get(board.goes_on.remote(config["trial"], metrics["dev_score"])):
                    configure_torch_threads(cull["threads"])
                else:
                    control.should_training_stop = True
            elif state.global_step in steps and state.global_step != state.max_steps:
                tune.report(self.metrics(state))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step != stop_at:
                return
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            tune.report({**self.metrics(state), "culled_at": stop_at}, checkpoint=tune.Checkpoint.from_directory(str(folder)))

    return TrialReporter()


def find_batch_sampler(dataloader: Any) -> Any:
    """Walk accelerate's wrappers down to the batch sampler that has ``set_epoch``."""
    node = getattr(dataloader, "batch_sampler", None)
    for _ in range(4):
        if node is None or type(node).__name__ == "EpochSeededBatchSampler":
            return node
        node = getattr(node, "batch_sampler", None)
    return None


def tuning_train_loop(config: dict[str, Any]) -> None:
    """A Tune trial. config: name, trial, spec, model, train_files, seed, threads, bf16, total_steps, eval_steps,
    stop_at (or None), cull (None, or the in-place search's board, cull step and threads after it),
    resume_from (a training state's directory, or None), dev_file, task."""
    config = {**config, "loop_start": time.time()}
    worker_setup(config)
    warn_bf16_on_cpu(config)
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    spec = BiEncoderSpec.model_validate(config["spec"])
    table = read_training_pairs(config["train_files"])
    dev = pq.read_table(config["dev_file"])
    model = SentenceTransformer(config["model"])
    model.max_seq_length = spec.max_seq_length
    loss = bi_encoder_loss(model, spec)
    with tempfile.TemporaryDirectory() as output_dir:
        args = training_arguments(SentenceTransformerTrainingArguments, spec, config["seed"], output_dir, True, distributed=False,
                                  bf16=config["bf16"])
        # The schedule (warmup, decay) spans the full fit even when this run stops at the cull step.
        args.max_steps = config["total_steps"]
        args.dataloader_drop_last = True
        args.batch_sampler = epoch_seeded_batch_sampler
        reporter = make_reporter(model, dev, config)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=training_dataset(table), loss=loss, callbacks=[reporter])
        with_progress_line(trainer, config["name"])
        trainer.train(resume_from_checkpoint=config["resume_from"])
        if trainer.state.global_step == config["total_steps"]:
            with tempfile.TemporaryDirectory() as model_dir:
                model.save_pretrained(model_dir)
                tune.report({**reporter.metrics(trainer.state), "final": True}, checkpoint=tune.Checkpoint.from_directory(model_dir))
