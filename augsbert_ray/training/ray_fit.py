"""Run a sentence-transformers fit inside a Ray Train TorchTrainer and collect the model it saves."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray.train
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from augsbert_ray.config import EncoderSpec, TrainingSpec
from augsbert_ray.layout import TrainFile
from augsbert_ray.training.loopback import torch_config
from augsbert_ray.runtime import configure_torch_threads, format_seconds, gpu_unseen, log, setup_worker_logging, warn_cpu_bf16

FIT_METRICS = "augsbert_fit.json"  # in a fit's final checkpoint: what it reported, to report again on a resume


def read_training_pairs(files: list[TrainFile]) -> pa.Table:
    """sentence1, sentence2, label (float32) from gold files (`label`) and silver files (`score`)."""
    parts = []
    for path, target in files:
        # selection marks rows instead of dropping them: train on the accepted ones
        selected = [("accepted", "=", True)] if "accepted" in pq.read_schema(path).names else None
        table = pq.read_table(path, columns=["sentence1", "sentence2", target], filters=selected)
        parts.append(
            pa.table(
                {
                    "sentence1": table.column("sentence1"),
                    "sentence2": table.column("sentence2"),
                    "label": table.column(target).cast(pa.float32()),
                }
            )
        )
    return pa.concat_tables(parts)


def training_arguments(
    args_cls: type,
    encoder: EncoderSpec,
    seed: int,
    output_dir: str,
    find_unused_parameters: bool,
    checkpoint_every: int | None = None,
    distributed: bool = True,
    bf16: bool = False,
) -> Any:
    """The paper's optimizer settings. With ``checkpoint_every``, a full training state (weights,
    optimizer, scheduler, RNG) is saved every that many steps, for resuming after a failure;
    otherwise only the final model is kept (as a Ray checkpoint).

    ``distributed``: inside Ray Train (gloo on CPU); False for a plain in-process fit. ``bf16``: autocast to bf16.
    ``find_unused_parameters`` is DDP's: a bi-encoder leaves BERT's pooler unused (needs True), while
    True makes DDP fire the cross-encoder head's gradient hook twice (needs False).
    """
    import torch

    return args_cls(
        output_dir=output_dir,
        num_train_epochs=encoder.epochs,
        per_device_train_batch_size=encoder.batch_size,
        # what sentence-transformers sets under DDP (an uneven last batch can hang it): a fit in this process
        # (Ray Train's local mode) then makes the model a fit on one worker makes
        dataloader_drop_last=True,
        learning_rate=encoder.learning_rate,
        warmup_ratio=encoder.warmup_ratio,
        seed=seed,
        data_seed=seed,
        save_strategy="steps" if checkpoint_every else "no",
        save_steps=checkpoint_every or 500,
        save_total_limit=1,
        report_to="none",
        logging_steps=50,
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        bf16=bf16,
        ddp_backend="gloo" if distributed and not torch.cuda.is_available() else None,
        ddp_find_unused_parameters=find_unused_parameters,
    )


def progress_callback(name: str, every_seconds: float = 30.0) -> Any:
    """A trainer callback for rank 0: a line after the first step with its time, then one every ``every_seconds``
    and at the end, with steps done / total, the rate since the first step, the time left and the latest loss. It
    stands in for transformers' printer of raw log dicts."""
    from transformers import TrainerCallback

    class ProgressLine(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started, self.first_done, self.shown, self.loss = time.monotonic(), None, 0.0, None

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
            self.loss = (logs or {}).get("loss", self.loss)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.monotonic()
            last = state.global_step >= state.max_steps
            done = f"fit {name}: step {state.global_step}/{state.max_steps} ({100 * state.global_step / state.max_steps:.0f}%)"
            if self.first_done is None:
                # the rate starts after the first step, which pays for warming up (CUDA, the data loader)
                self.first_done = (state.global_step, now)
                if state.is_world_process_zero and not last:
                    self.shown = now
                    print(f"{done}, first step {now - self.started:.1f} s", flush=True)
                    return
            if not state.is_world_process_zero or (now - self.shown < every_seconds and not last):
                return
            self.shown = now
            first_step, first_end = self.first_done
            steps = state.global_step - first_step
            rate = steps / max(now - first_end, 1e-9) if steps else 1 / max(now - self.started, 1e-9)
            left = (state.max_steps - state.global_step) / rate if rate > 0 else float("inf")
            loss = f", loss {self.loss:.4f}" if self.loss is not None else ""
            print(f"{done}, {rate:.2f} steps/s, ETA {format_seconds(left)}{loss}", flush=True)

    return ProgressLine()


def with_progress_line(trainer: Any, name: str, every_seconds: float = 30.0) -> Any:
    """The trainer with a progress line in place of transformers' printed log dicts."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(progress_callback(name, every_seconds))
    return trainer


def train_resuming(trainer: Any, checkpoint_every: int | None) -> tuple[Any, int]:
    """Run ``trainer.train()``, resuming from the last training state Ray Train kept, if any.

    After a worker failure Ray Train restarts the loop (FailureConfig.max_failures), and a new driver
    that fits under the same storage path and name (``augsbert run --resume``) gets the earlier run's
    checkpoints too. The training states that RayTrainReportCallback reported every ``checkpoint_every``
    steps make it continue where it stopped instead of starting over. Returns the train output and the
    step it resumed from.
    """
    if not checkpoint_every:
        return trainer.train(), 0
    from ray.train.huggingface.transformers import RayTrainReportCallback

    trainer.add_callback(RayTrainReportCallback())
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return trainer.train(), 0
    with checkpoint.as_directory() as directory:
        resume_from = Path(directory) / RayTrainReportCallback.CHECKPOINT_NAME
        if not (resume_from / "trainer_state.json").is_file():  # a final model, not a training state
            log.info("the latest checkpoint holds no training state (%s): training from the start", directory)
            return trainer.train(), 0
        step = json.loads((resume_from / "trainer_state.json").read_text())["global_step"]
        log.info("resuming from step %d (%s)", step, resume_from)
        return trainer.train(resume_from_checkpoint=str(resume_from)), step


def training_dataset(table: pa.Table) -> Any:
    """The pairs as a Hugging Face Dataset for a trainer. Its fingerprint is given: hashing would read the whole
    table once more, and dill prints a bytecode listing to the worker's stdout while it hashes."""
    from datasets import Dataset

    return Dataset(table, fingerprint=uuid.uuid4().hex)


def warn_bf16_on_cpu(config: dict[str, Any]) -> None:
    """A fit or trial (``config``: its name, bf16) at bf16 on a CPU without bf16 instructions warns, naming the node."""
    import torch

    if config["bf16"] and not torch.cuda.is_available():
        warn_cpu_bf16(f"fit {config['name']}")


def train_and_report(
    trainer_cls: type, args_cls: type, model: Any, loss: Any, table: pa.Table, spec: EncoderSpec,
    config: dict[str, Any], find_unused_parameters: bool,
) -> None:
    """Worker side of every fit: run the sentence-transformers trainer and report the final model."""
    warn_bf16_on_cpu(config)
    if report_finished_fit(config["name"]):
        return
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as output_dir:
        args = training_arguments(
            args_cls, spec, config["seed"], output_dir, find_unused_parameters, config["checkpoint_every"],
            distributed=not config.get("in_process_model_dir"), bf16=config["bf16"],
        )
        trainer = with_progress_line(trainer_cls(model=model, args=args, train_dataset=training_dataset(table), loss=loss), config["name"])
        result, resumed_from_step = train_resuming(trainer, config["checkpoint_every"])
    # kept with the final model, for a driver that stopped before recording the fit to account for it (FitLedger)
    metrics = {"train_loss": result.training_loss, "train_rows": table.num_rows, "steps": result.global_step,
               "train_seconds": round(time.monotonic() - started, 2)}
    report_final_model(model, {**metrics, "resumed_from_step": resumed_from_step}, config["in_process_model_dir"])


def report_final_model(model: Any, metrics: dict[str, Any], model_dir: str | None = None) -> None:
    """Every worker reports; rank 0 attaches the saved model, with the metrics beside it, as the checkpoint. A fit in
    the calling process (``model_dir`` given: Ray Train's local mode, which keeps a reported checkpoint by reference
    only) saves the model there and reports the metrics alone."""
    if model_dir:
        model.save_pretrained(model_dir)
        ray.train.report(metrics)
        return
    rank_0 = ray.train.get_context().get_world_rank() == 0
    with tempfile.TemporaryDirectory() as tmp:
        if rank_0:
            model.save_pretrained(tmp)
            (Path(tmp) / FIT_METRICS).write_text(json.dumps(metrics), encoding="utf-8")
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp) if rank_0 else None)


def report_finished_fit(name: str) -> bool:
    """Report again the final model that Ray Train kept from an earlier attempt of this fit, if it holds one: the fit
    finished, and the driver that ran it stopped before recording it (`augsbert run --resume` would train it again
    from the start). Whether it did."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return False
    with checkpoint.as_directory() as directory:
        saved = Path(directory) / FIT_METRICS
        if not saved.is_file():  # a training state, to resume from
            return False
        metrics = {**json.loads(saved.read_text(encoding="utf-8")), "reused": True}
        log.info("fit %s finished in an earlier attempt: its final model is reported again", name)
        rank_0 = ray.train.get_context().get_world_rank() == 0
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(directory) if rank_0 else None)
    return True


def worker_setup(config: dict[str, Any]) -> None:
    from transformers import set_seed

    configure_torch_threads(config["threads"])
    if not config.get("in_process_model_dir"):  # in a worker; a fit in the calling process keeps that process's logging
        setup_worker_logging()
    # before the model is built: a cross-encoder's new classification head is initialized from the global RNG,
    # which the trainer seeds only after that
    set_seed(config["seed"])


@ray.remote(num_cpus=0, num_gpus=1)
def gpu_worker_problem(name: str) -> str | None:
    """What a Ray Train worker of fit ``name`` would find on a GPU node: None, or why its torch cannot use the GPU."""
    return gpu_unseen(f"training {name}: a Ray Train worker", "training.use_gpu: false")


def check_gpu_workers(name: str) -> None:
    """A fit with use_gpu asks a GPU node's torch first: Ray Train sets up NCCL for workers that hold a GPU, which
    fails with "Distributed package doesn't have NCCL built in" where torch is a CPU build (as `make install` puts
    on any machine)."""
    if problem := ray.get(gpu_worker_problem.remote(name)):
        raise RuntimeError(problem)


@contextmanager
def sigint_restored() -> Iterator[None]:
    """SIGINT's handler after the block is the one before it (on the main thread). Ray Train's and Ray Tune's fit()
    install their own and leave them: a later Ctrl-C went to a finished fit or search and stopped nothing, and the
    handler's closure kept that fit's controller actor alive."""
    saved = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread() and saved is not None:
            signal.signal(signal.SIGINT, saved)


@contextmanager
def sigint_kept(trainer: TorchTrainer) -> Iterator[None]:
    """The driver's SIGINT handler stays the driver's during ``trainer.fit()`` and after it. Ray Train's own (an abort
    of the fit's controller, ``sys.exit(0)`` at the third) made one Ctrl-C during a fit end the run with status 1 and
    no word. Here the driver's handler stops the fit (the fit's actors die with the driver, or with its Ray job on a
    cluster)."""
    trainer._register_sigint_handler = lambda controller: None  # Ray 2.60: DataParallelTrainer._register_sigint_handler
    with sigint_restored():
        yield


def fit_on_ray(
    train_loop: Callable[[dict[str, Any]], None],
    loop_config: dict[str, Any],
    resources: TrainingSpec,
    storage: Path,
    name: str,
    model_dir: Path,
) -> dict[str, Any]:
    """Fit with ``resources.num_workers`` Ray Train workers and copy the final model to ``model_dir``; with 0, in
    this process (Ray Train's local mode), saving the model there. The training files are checked and made absolute
    here, as the workers run in other directories."""
    train_files = [(str(Path(path).resolve()), target) for path, target in loop_config["train_files"]]
    if missing := [path for path, _ in train_files if not Path(path).is_file()]:
        raise FileNotFoundError(f"training {name}: no such file: {missing[0]}")
    in_process = resources.num_workers == 0
    if resources.use_gpu and not in_process:
        check_gpu_workers(name)
    if in_process and model_dir.exists():
        shutil.rmtree(model_dir)
    trainer = TorchTrainer(
        train_loop,
        torch_config=torch_config(),
        train_loop_config={
            **loop_config,
            "train_files": train_files,
            "name": name,
            "threads": max(1, int(resources.cpus_per_worker)),
            "checkpoint_every": resources.checkpoint_every,
            "bf16": resources.bf16,
            "in_process_model_dir": str(model_dir.resolve()) if in_process else None,
        },
        scaling_config=ScalingConfig(
            num_workers=resources.num_workers,
            use_gpu=resources.use_gpu,
            resources_per_worker={"CPU": resources.cpus_per_worker, **({"GPU": 1} if resources.use_gpu else {})},
        ),
        run_config=RunConfig(
            name=name,
            storage_path=str(storage.resolve()),
            # None only in a TrainingSpec made outside a job spec (which resolves it from ray.address): as locally
            failure_config=FailureConfig(max_failures=resources.max_failures or 0),
            # a full training state is ~3x the model: keep only the latest (the final model, once reported)
            checkpoint_config=CheckpointConfig(num_to_keep=1),
        ),
    )
    log.info("training %s %s", name,
             "in this process (Ray Train's local mode)" if in_process else f"on {resources.num_workers} Ray Train worker(s)")
    with sigint_kept(trainer):
        result = trainer.fit()
    if not in_process:  # the model is in the final checkpoint
        if result.checkpoint is None:
            raise RuntimeError(f"training {name} finished without a checkpoint")
        if model_dir.exists():
            shutil.rmtree(model_dir)
        result.checkpoint.to_directory(str(model_dir))
        (model_dir / FIT_METRICS).unlink(missing_ok=True)  # the checkpoint's own; the model directory holds the model
    return dict(result.metrics or {})
