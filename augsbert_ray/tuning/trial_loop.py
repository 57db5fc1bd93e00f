"""One tuning trial on a Ray Train worker: a bi-encoder fit that reports dev metrics at fixed steps,
stops (with a full training-state checkpoint) at the cull step, or resumes from one and runs to the end."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import ray.train
from ray.train import Checkpoint

from augsbert_ray.config import BiEncoderSpec
from augsbert_ray.evaluation.metrics import dev_metric
from augsbert_ray.training.bi_encoder import bi_encoder_loss
from augsbert_ray.training.ray_fit import (
    read_training_pairs, training_arguments, training_dataset, with_progress_line, worker_setup,
)


def total_steps(rows: int, batch_size: int, workers: int, epochs: int) -> int:
    """Optimizer steps of a full fit. Under DDP (always, in Ray Train) sentence-transformers drops the last
    partial batch, and the full batches are split over the workers."""
    per_epoch = rows // batch_size // workers
    if per_epoch < 1:
        raise ValueError(f"{rows} training pairs make no full batch of {batch_size} per worker ({workers} workers)")
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
    """The task metric on dev with the in-memory model (eval mode: no dropout, no RNG use)."""
    s1, s2 = dev.column("sentence1").to_pylist(), dev.column("sentence2").to_pylist()
    labels = dev.column("label").to_numpy()
    was_training = model.training
    model.eval()
    a = model.encode(s1, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    b = model.encode(s2, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    model.train(was_training)
    return dev_metric(task, np.sum(a * b, axis=1), labels)


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


def make_reporter(
    model: Any, dev: Any, task: str, steps: list[int], stop_at: int | None, stop_file: str, is_rank_zero: bool
) -> Any:
    from transformers import TrainerCallback

    class TrialReporter(TrainerCallback):
        """Reports dev metrics to Ray Train at the chosen steps; at ``stop_at`` it makes the trainer save
        its full state (model, optimizer, scheduler, RNG, step) and stop, and reports that checkpoint."""

        start_step = 0

        def metrics(self, state: Any) -> dict[str, Any]:
            score = dev_score(model, dev, task) if is_rank_zero else float("nan")
            return {
                "step": state.global_step,
                "fraction": state.global_step / state.max_steps,
                "dev_score": score,
                "steps_run": state.global_step - self.start_step,  # optimizer steps this fit ran
            }

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start_step = state.global_step  # already restored when resuming

        def on_epoch_begin(self, args: Any, state: Any, control: Any, train_dataloader: Any = None, **kwargs: Any) -> None:
            # The trainer's set_epoch does not reach our sampler through every dataloader wrapper.
            sampler = find_batch_sampler(train_dataloader)
            if sampler is not None:
                sampler.set_epoch(int(state.epoch + 1e-9))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if os.path.exists(stop_file):  # Tune stopped this trial (ASHA): end the fit cleanly
                control.should_training_stop = True
            elif state.global_step == stop_at:
                control.should_save = True
                control.should_training_stop = True
            elif state.global_step in steps and state.global_step != state.max_steps:
                ray.train.report(self.metrics(state))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step != stop_at:
                return
            metrics = {**self.metrics(state), "culled_at": stop_at}
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(str(folder)) if is_rank_zero else None)

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
    """config: spec, model, train_files, seed, total_steps, eval_steps, stop_at (or None), resume_from
    (a checkpoint directory, or None), dev_file, task."""
    worker_setup(config)
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    spec = BiEncoderSpec.model_validate(config["spec"])
    table = read_training_pairs(config["train_files"])
    dev = pq.read_table(config["dev_file"])
    model = SentenceTransformer(config["model"])
    model.max_seq_length = spec.max_seq_length
    loss = bi_encoder_loss(model, spec)
    is_rank_zero = ray.train.get_context().get_world_rank() == 0
    with tempfile.TemporaryDirectory() as output_dir:
        args = training_arguments(SentenceTransformerTrainingArguments, spec, config["seed"], output_dir, True)
        # The schedule (warmup, decay) spans the full fit even when this run stops at the cull step.
        args.max_steps = config["total_steps"]
        args.batch_sampler = epoch_seeded_batch_sampler
        reporter = make_reporter(
            model, dev, config["task"], config["eval_steps"], config["stop_at"], config["stop_file"], is_rank_zero
        )
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=training_dataset(table), loss=loss, callbacks=[reporter])
        with_progress_line(trainer, Path(config["stop_file"]).name)
        trainer.train(resume_from_checkpoint=config["resume_from"])
        if is_rank_zero:  # the steps this fit ran, also when Tune stopped it after its last report
            Path(config["stop_file"] + ".steps").write_text(str(trainer.state.global_step - reporter.start_step))
        if trainer.state.global_step == config["total_steps"] and not os.path.exists(config["stop_file"]):
            metrics = {**reporter.metrics(trainer.state), "final": True}
            if is_rank_zero:
                with tempfile.TemporaryDirectory() as model_dir:
                    model.save_pretrained(model_dir)
                    ray.train.report(metrics, checkpoint=Checkpoint.from_directory(model_dir))
            else:
                ray.train.report(metrics)
