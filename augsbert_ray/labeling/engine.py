"""The labeling engine behind `augsbert label` and the labeling stage of a job.

Plan shards from the input, skip the ones already in the output, label the rest as a streaming
Ray Data pipeline (shard names -> actor pool that reads, tokenizes, scores and writes each shard),
and keep a manifest with each shard's counts. Only per-shard counts come back to the driver.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data

from augsbert_ray.config import LabelingSpec, SpecError, check_output_dir
from augsbert_ray.data.formats import input_format
from augsbert_ray.files import atomic_path, atomic_write_text
from augsbert_ray.labeling.job import LabelJob, LabelResult
from augsbert_ray.labeling.plan import Shard, expand_inputs, plan_shards
from augsbert_ray.labeling.scorer import COUNT_KEYS, STATS_KEY, ShardLabeler, calibration_pairs
from augsbert_ray.runtime import check_requests, format_seconds, init_ray, log, wait_for_ray_data

MANIFEST = "_manifest.json"
# Entries the job key gained after outputs were labeled: a manifest without them resumes as it did before
LATER_KEY_ENTRIES = ("teacher_settings", "input_digests")


def labels_in_process(spec: LabelingSpec, address: str | None) -> bool:
    """One CPU actor on this machine (no cluster ``address``): the calling process labels instead (``here``), with
    the same shards, labels and resume. An actor adds its start to every call (about 16 s on 2 busy cores; a run
    labels each strategy in a call of its own, docs/BENCHMARKS.md), a process and its memory.

    Args:
        spec: The labeling settings (actors and their CPUs/GPUs).
        address: The Ray cluster to label on; None: this machine.

    Example:
        ::

            labels_in_process(LabelingSpec(), None)  # True: one CPU actor, no cluster
    """
    return address is None and spec.max_actors == 1 and spec.gpus_per_actor == 0


def labels_here(spec: LabelingSpec, address: str | None) -> bool:
    """`augsbert label`'s choice: ``labels_in_process`` with no Ray running, which it then need not start."""
    return labels_in_process(spec, address) and not ray.is_initialized()


def check_resources(spec: LabelingSpec, here: bool) -> None:
    """An actor's request must fit the Ray cluster, or this machine when labeling ``here`` (the spec checked the rest
    when it was made).

    Args:
        spec: The labeling settings (CPUs and GPUs per actor).
        here: Whether the calling process labels (``labels_in_process``): this machine's CPUs count, not Ray's.

    Example:
        ::

            check_resources(spec.labeling, labels_in_process(spec.labeling, spec.ray.address))  # or SpecError
    """
    requests = [(f"labeling.gpus_per_actor {spec.gpus_per_actor:g}", spec.gpus_per_actor, "GPU"),
                (f"labeling.cpus_per_actor {spec.cpus_per_actor:g}", spec.cpus_per_actor, "CPU")]
    if here:
        check_requests(requests, {"CPU": os.cpu_count() or 1}, "this machine")
    else:
        check_requests(requests)


def prepare_output(output: Path, key: dict[str, Any], shards: list[Shard]) -> dict[str, dict[str, Any]]:
    """Check that the output holds this job or nothing; drop partial files; return finished shards' counts."""
    output.mkdir(parents=True, exist_ok=True)
    manifest = output / MANIFEST
    if manifest.exists():
        previous = json.loads(manifest.read_text(encoding="utf-8")).get("job")
        if previous is not None:
            previous = {**{name: key[name] for name in LATER_KEY_ENTRIES if name not in previous}, **previous}
        if previous != key:
            changed = sorted(name for name in key if previous is None or previous.get(name) != key[name])
            raise SpecError(f"{output} holds labels from other settings ({', '.join(changed)} differ); label into another directory")
    planned = {shard.name for shard in shards}
    strangers = sorted(p.name for p in output.glob("part-*.parquet") if p.name not in planned)
    if strangers:
        raise SpecError(f"{output} has {len(strangers)} shard(s) not from this input, e.g. {strangers[0]}; label into another directory")
    remove_partials(output)
    done = {}
    for shard in shards:
        path = output / shard.name
        if path.exists():
            done[shard.name] = json.loads(pq.read_metadata(path).metadata[STATS_KEY])
    return done


def remove_partials(output: Path) -> None:
    """Temporary files of writes that never finished (see files.atomic_path): a killed driver's manifest, or the
    shard of an actor on a node that died."""
    for partial in list(output.glob(".*.tmp")) + list((output / "_rejects").glob(".*.tmp")):
        partial.unlink(missing_ok=True)


def write_manifest(output: Path, key: dict[str, Any], stats: dict[str, dict[str, Any]], shards: list[Shard], final: bool) -> None:
    totals = {name: sum(s[name] for s in stats.values()) for name in COUNT_KEYS}
    body = {
        "job": key,
        "complete": final and len(stats) == len(shards),
        "totals": totals,
        "shards": {shard.name: {"input": shard.path, "first_row": shard.first_row, **stats.get(shard.name, {"done": False})} for shard in shards},
    }
    atomic_write_text(output / MANIFEST, json.dumps(body, indent=1))


def merge_rejects(output: Path, shards: list[Shard]) -> Path:
    """One _rejects.jsonl in shard order, copied line by line from the per-shard files."""
    target = output / "_rejects.jsonl"
    with atomic_path(target) as tmp, tmp.open("w", encoding="utf-8") as out:
        for shard in shards:
            part = output / "_rejects" / f"{shard.name}.jsonl"
            if part.exists():
                with part.open(encoding="utf-8") as handle:
                    for line in handle:
                        out.write(line)
    return target


def label_files(
    inputs: str | list[str], output: str | Path, job: LabelJob, fmt: str | None = None, address: str | None = None
) -> LabelResult:
    """`augsbert label`'s front end: label every pair in the input files (csv, jsonl, parquet; a glob or a
    list) into Parquet shards under ``output``. The inputs are checked before Ray starts (or joins ``address``).
    With one CPU actor (the default) and no Ray running or asked for, the labeler runs in this process instead
    (``labels_here``): the same shards, labels and resume.

    Args:
        inputs: Input files, a glob or a directory.
        output: The shards' directory; a rerun into it skips the shards already labeled.
        job: The teacher and the labeling settings.
        fmt: The input format; default: from the file suffix.
        address: A Ray cluster to join; default: an embedded local Ray (a running Ray is reused).

    Example:
        ::

            result = label_files("pairs/*.csv", "silver", LabelJob(Teacher.cross_encoder("models/cross_encoder"), LabelingSpec()))
            print(result.summary())
    """
    files = expand_inputs(inputs)
    shards = plan_shards(files, input_format(files, fmt), job.text_columns, job.spec.shard_rows)
    check_output_dir(Path(output), "--output")
    here = labels_here(job.spec, address)
    if not here:
        init_ray(address, dashboard=False)  # labeling fits nothing: no Ray Train, no need for the State API
    return label_shards(shards, Path(output), job, here)


def label_dataset(
    pairs: pa.Table | ray.data.Dataset, output: str | Path, job: LabelJob, input_file: str | Path, here: bool = False
) -> LabelResult:
    """Label pairs inside a running Ray (e.g. a run's sampled candidates) into resumable Parquet shards under ``output``.

    The pairs are saved first as ``input_file`` (Parquet, one row group per shard), so that a rerun with the same
    pairs into the same ``output`` skips the shards already labeled.

    Args:
        pairs: Sentence pairs in ``job.text_columns`` (and optionally ``strategy``): a table or a Ray Dataset.
        output: The shards' directory.
        job: The teacher and the labeling settings.
        input_file: Where the pairs are saved (outside ``output``).
        here: Label in this process instead of on the actor pool (``labels_in_process``).

    Example:
        ::

            job = LabelJob(Teacher.cross_encoder("models/cross_encoder"), LabelingSpec(), strategy="bm25")
            result = label_dataset(candidates, "silver/bm25", job, "candidates/bm25.parquet")
    """
    input_file = Path(input_file)
    save_pairs(pairs, input_file, job.spec.shard_rows)
    check_output_dir(Path(output), "the labeling output")
    return label_shards(plan_shards([str(input_file)], "parquet", job.text_columns, job.spec.shard_rows), Path(output), job, here)


def save_pairs(pairs: pa.Table | ray.data.Dataset, path: Path, shard_rows: int) -> None:
    """Write the pairs to one Parquet file, atomically, streaming a Dataset batch by batch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        if isinstance(pairs, pa.Table):
            pq.write_table(pairs, tmp, row_group_size=shard_rows)
            return
        writer = None
        for batch in pairs.iter_batches(batch_size=shard_rows, batch_format="pyarrow"):
            writer = writer or pq.ParquetWriter(tmp, batch.schema)
            writer.write_table(batch, row_group_size=shard_rows)
        if writer is None:
            raise SpecError(f"no pairs to label into {path}")
        writer.close()


def label_shards(shards: list[Shard], output: Path, job: LabelJob, here: bool = False) -> LabelResult:
    """The engine: skip the shards already in ``output``, label the rest on the actor pool (or ``here``, in this
    process), keep the manifest."""
    started = time.perf_counter()
    output = output.resolve()
    check_resources(job.spec, here)
    key = job.key(shards, output)
    stats = prepare_output(output, key, shards)
    pending = [shard for shard in shards if shard.name not in stats]
    skipped = len(shards) - len(pending)
    files = len({shard.path for shard in shards})
    log.info("labeling %s: %d shards (%d already done) from %d file(s) into %s", job.labeler, len(shards), skipped, files, output)
    write_manifest(output, key, stats, shards, final=False)
    if pending:
        calibration = calibration_pairs(shards, tuple(job.text_columns)) if job.spec.precision == "int8" else None
        labeled = _label_here(pending, output, job, calibration) if here else _pipeline(pending, output, job, calibration).iter_rows()
        pairs_here = 0
        try:
            for done_here, row in enumerate(labeled, start=1):
                if row["error"]:
                    raise SpecError(row["error"])
                stats[row["shard"]] = {name: (int(value) if name in COUNT_KEYS else value) for name, value in row.items() if name != "error"}
                write_manifest(output, key, stats, shards, final=False)
                pairs_here, elapsed = pairs_here + int(row["labeled"]), time.perf_counter() - started
                log.info("shard %s: %d labeled, %d rejected (%d/%d shards, %.0f pairs/s, ETA %s)", row["shard"], row["labeled"], row["rejected"],
                         len(stats), len(shards), pairs_here / elapsed, format_seconds(elapsed / done_here * (len(pending) - done_here)))
        except KeyboardInterrupt:  # Ctrl-C: the shards written are kept, and a rerun skips them
            wait_for_ray_data()
            raise KeyboardInterrupt(f"{len(stats)} of {len(shards)} shard(s) labeled in {output}") from None
    remove_partials(output)  # every shard is final now; a retried shard's lost attempt may have left its temp file
    write_manifest(output, key, stats, shards, final=True)
    rejects = merge_rejects(output, shards)
    result = LabelResult(output, len(shards), skipped, {name: sum(s[name] for s in stats.values()) for name in COUNT_KEYS},
                         output / MANIFEST, rejects)
    if result.totals["pairs_in"] != result.totals["labeled"] + result.totals["rejected"]:
        raise RuntimeError(f"pair accounting broke: {result.summary()}")
    return result


def _labeler_settings(pending: list[Shard], output: Path, job: LabelJob, calibration: list[tuple[str, str]] | None) -> dict[str, Any]:
    """ShardLabeler's arguments."""
    spec = job.spec
    return {
        "shards": pending, "output": str(output), "teacher": job.teacher, "labeler": job.labeler,
        "text_columns": tuple(job.text_columns), "batch_size": spec.batch_size,
        "threads": spec.threads_per_actor or max(1, int(spec.cpus_per_actor)),
        # int8 with nothing to calibrate on: the input has no pair with two sentences, so each is a reject and no
        # pair is scored; fp32 loads without calibration
        "precision": "fp32" if calibration == [] else spec.precision,
        "runtime": spec.runtime, "max_seq_length": spec.max_seq_length, "strategy": job.strategy,
        "calibration": calibration or None, "gpu": spec.gpus_per_actor > 0,
        "onnx_cache": str(output / "_onnx" if job.onnx_cache is None or spec.precision == "int8" else job.onnx_cache),
    }


class LabelerFailure(RuntimeError):
    """The labeler failed in this process (``labels_here``), as an actor's failure would on Ray: ``Type: message``.

    Example:
        >>> str(LabelerFailure("OSError: model.safetensors: no such file"))
        'OSError: model.safetensors: no such file'
    """


def _label_here(pending: list[Shard], output: Path, job: LabelJob, calibration: list[tuple[str, str]] | None) -> Iterator[dict[str, Any]]:
    """The actor's work in this process: one labeler, the shards one after another."""
    import torch

    threads = torch.get_num_threads()  # the labeler sets the actor's; a run's driver goes on with its own
    try:
        labeler = ShardLabeler(**_labeler_settings(pending, output, job, calibration))
        for shard in pending:
            yield labeler.label_or_refuse(shard)
    except (SpecError, FileNotFoundError):
        raise
    except Exception as exc:
        raise LabelerFailure(f"{type(exc).__name__}: {(str(exc).strip().splitlines() or ['(no message)'])[0]}") from exc
    finally:
        torch.set_num_threads(threads)


def _pipeline(pending: list[Shard], output: Path, job: LabelJob, calibration: list[tuple[str, str]] | None) -> ray.data.Dataset:
    """Shard names, one block each, streamed to an autoscaling actor pool; each actor call labels one shard."""
    spec = job.spec
    ray.data.DataContext.get_current().enable_progress_bars = False  # the driver logs one line per shard instead
    names = ray.data.from_items([{"shard": shard.name} for shard in pending], override_num_blocks=len(pending))
    labeled = names.map_batches(
        ShardLabeler,
        fn_constructor_kwargs=_labeler_settings(pending, output, job, calibration),
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(min_size=spec.min_actors, max_size=spec.max_actors),
        num_cpus=spec.cpus_per_actor,
        num_gpus=spec.gpus_per_actor,
    )
    # No output comes until a whole shard is labeled: 50,000 pairs take an mpnet teacher on CPU (~30 pairs/s) longer
    # than Ray Data's 30 minutes without progress, as may a pool's wait for GPUs. A failed actor still fails the job.
    labeled.context.execution_no_progress_timeout_s = -1
    return labeled
