"""A run's start: a new run directory with spec.yaml and the run's fingerprint (or an unfinished run to resume),
the models and resources it asks for checked, then Ray."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from augsbert_ray.config import JobSpec, SpecError, check_output_dir, dump_spec
from augsbert_ray.evaluation.checks import saved_kind
from augsbert_ray.labeling import check_resources, labels_in_process
from augsbert_ray.scoring import single_output_error
from augsbert_ray.layout import SPEC_FILE
from augsbert_ray.models import check_model, model_outputs, resolve_model
from augsbert_ray.pipeline.context import RunContext
from augsbert_ray.pipeline.fingerprint import run_fingerprint, run_models, write_fingerprint
from augsbert_ray.pipeline.resume import resume_run
from augsbert_ray.runtime import Request, check_cpu_bf16, check_requests, init_ray, log


def new_run_dir(spec: JobSpec) -> Path:
    check_output_dir(spec.output_dir, "output_dir")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = (spec.output_dir / f"{spec.name}-{stamp}").resolve()
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = (spec.output_dir / f"{spec.name}-{stamp}-{suffix}").resolve()
    run_dir.mkdir(parents=True)
    return run_dir


def start_run(
    spec: JobSpec, resume: Path | None, data_dir: str | Path | None, force_resume: bool = False, run_dir: Path | None = None
) -> RunContext:
    """A new run directory (``run_dir``, made by new_run_dir, or a new one) with spec.yaml and the run's fingerprint,
    or the unfinished run ``resume``; then Ray."""
    check_cpu_bf16(spec.ray.address, {"training.bf16": spec.training.bf16 and not spec.training.use_gpu,
                                      "labeling.precision bf16": spec.labeling.bf16_on_cpu})
    check_run_models(spec)
    if resume is None:
        fingerprint = run_fingerprint(spec, data_dir)  # first: a run refused for its data leaves no spec.yaml to resume
        # and Ray: a run whose Ray does not start, or whose cluster does not answer, leaves no directory either
        init_ray(spec.ray.address, spec.ray.num_cpus)
        ctx = RunContext.open(spec, run_dir or new_run_dir(spec), data_dir)
        (ctx.layout.root / SPEC_FILE).write_text(dump_spec(spec), encoding="utf-8")
        write_fingerprint(ctx.layout.root, fingerprint)
    else:
        ctx = resume_run(spec, resume, data_dir, force_resume)
        init_ray(spec.ray.address, spec.ray.num_cpus)
    log.info("run directory: %s", ctx.layout.root)
    check_resources(spec.labeling, labels_in_process(spec.labeling, spec.ray.address))  # before the fits, not after
    check_requests(job_requests(spec))
    return ctx


def job_requests(spec: JobSpec) -> list[Request]:
    """What each fit (all its workers at once), evaluation task, search task and tuning trial of the run asks of Ray."""
    training, evaluation = spec.training, spec.evaluation
    workers = training.num_workers
    requests: list[Request] = [
        (f"training.num_workers {workers} x cpus_per_worker {training.cpus_per_worker:g} ({workers * training.cpus_per_worker:g} "
         "CPUs at once)", workers * training.cpus_per_worker, "CPU"),
        (f"training.use_gpu with num_workers {workers} (a GPU each)", workers * training.use_gpu, "GPU"),
        (f"evaluation.cpus {evaluation.cpus:g}", evaluation.cpus, "CPU"),
        (f"evaluation.gpus {evaluation.gpus:g}", evaluation.gpus, "GPU"),
        (f"sampling.search_cpus {spec.sampling.search_cpus:g}", spec.sampling.search_cpus, "CPU"),
    ]
    if spec.tuning is not None:
        requests += [(f"tuning.cpus_per_trial {spec.tuning.cpus_per_trial:g}", spec.tuning.cpus_per_trial, "CPU"),
                     (f"tuning.gpus_per_trial {spec.tuning.gpus_per_trial:g}", spec.tuning.gpus_per_trial, "GPU")]
    return requests


def check_run_models(spec: JobSpec) -> None:
    """Every model the run loads must load (``check_model``): a typo in one first used late in the run (the
    zero-shot model at evaluation) fails in seconds, before Ray starts, naming its setting. A trained teacher model
    must be of its kind, and a trained cross-encoder have one output."""
    for setting, name in run_models(spec).items():
        try:
            check_model(resolve_model(name))
        except (SpecError, FileNotFoundError) as exc:
            raise SpecError(f"{setting}: {exc}") from None
    for setting, trained, kind in (("cross_encoder.trained", spec.cross_encoder.trained, "cross_encoder"),
                                   ("teacher.bi_encoder.trained", spec.teacher.bi_encoder.trained, "bi_encoder")):
        found = saved_kind(trained) if trained else None
        if found is not None and found != kind:  # loaded as the other kind, it would get a fresh, random part
            raise SpecError(f"{setting} {trained}: a {found.replace('_', '-')}, not a {kind.replace('_', '-')}")
        if trained and kind == "cross_encoder" and (outputs := model_outputs(trained)) != 1:
            raise SpecError(f"{setting} {single_output_error(trained, outputs)}")
