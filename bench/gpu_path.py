"""The GPU path, measured in one run on one GPU.

1. use_gpu fits through Ray Train, as a run makes them: the MiniLM cross-encoder on STSb-1k (the teacher), SBERT on
   STSb-1k, and a bi-encoder on all of STSb train. ``--teacher DIR --dev FILE`` skips them and labels with that
   trained cross-encoder (checked against gold on FILE, a gold dev split).
2. Labeling throughput of that trained teacher: the engine (Ray Data actors holding the GPU, or a share of it each)
   at fp32, bf16 and fp16, against sentence-transformers' ``CrossEncoder.predict`` on the same GPU (fp32, and the
   model loaded in bf16; its tokenizer on one thread, and on all, as a plain script runs it), on the same
   STSb-recombined pairs; then one whole call on ``--large-pairs`` pairs, where the call's start weighs less.
   Spearman of each precision against fp32, and against gold on dev.
3. What bounds one actor: the same steps the actor takes, timed one by one in a Ray task holding what a 4-actor
   run gives each actor: tokenizing (on one thread and on the actor's CPUs), padding in length-sorted batches,
   copying to the GPU and back, and the model alone on batches already on the GPU (half-precision weights, and fp32
   weights under autocast).
4. The same comparison for an mpnet cross-encoder (from ``--mpnet``: a model directory, or one holding only its
   config and tokenizer, when its weights are drawn at random: the same speed, not the same scores).

    python -m bench.gpu_path --minilm DIR --mpnet DIR            # where a GPU is (docs/BENCHMARKS.md)
    python -m bench.gpu_path --teacher DIR --dev FILE --mpnet DIR --out F   # labeling only, with a trained teacher
    .venv/bin/python -m bench.gpu_path --smoke                   # without one: the same code at toy sizes on CPU

The figures are written to --out as JSON and printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import augsbert_ray as ar  # noqa: E402
from augsbert_ray.pipeline import PlainFit, RunContext, read_gold  # noqa: E402
from augsbert_ray.runtime import init_ray  # noqa: E402
from augsbert_ray.scoring import CrossEncoderScorer  # noqa: E402
from bench.label_throughput import STSB_1K, engine_run, gold_spearman, recombined_pairs, scores_by_id, stsb_1k_teacher, stsb_sentences  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (precision, batch size, actors sharing the GPU) of the engine runs
ENGINE_RUNS = [("fp32", 64, 1), ("bf16", 256, 1), ("bf16", 256, 2), ("bf16", 256, 4), ("bf16", 256, 8)]  # fp16: dev scores only
LARGE_RUN = ("bf16", 256, 4)  # (precision, batch size, actors) of the one call on --large-pairs pairs
MPNET_RUNS = [("bf16", 256, 1), ("bf16", 256, 4)]
STEP_ACTORS = 4  # one_actor_steps runs with the CPUs and GPU share an actor of a run of this many gets


def timed_fits(minilm: str, work: Path, data_dir: Path, gpu: bool, smoke: bool) -> tuple[dict[str, Any], Path, Path]:
    """Wall seconds and pairs of the three fits; the trained teacher's directory and the gold dev split."""
    small = ["data.train_limit=64", "cross_encoder.epochs=1"] if smoke else []
    overrides = [f"cross_encoder.model={minilm}", f"bi_encoder.model={minilm}", f"training.use_gpu={str(gpu).lower()}",
                 f"training.cpus_per_worker={4 if gpu else 2}", *small]
    started = time.perf_counter()
    teacher, dev_file = stsb_1k_teacher(work, data_dir, overrides)
    figures = {"cross_encoder_stsb_1k": {"seconds": round(time.perf_counter() - started, 1), "trained_on": teacher.trained_on}}
    for name, limit in (("sbert_stsb_1k", []), ("sbert_stsb_all", small or ["data.train_limit=null"])):
        ctx = RunContext.open(ar.load_spec(STSB_1K, [f"output_dir={work}", *overrides, *limit]), work / name, data_dir)
        gold = read_gold(ctx)
        started = time.perf_counter()
        trained_on = PlainFit().fit(ctx, "sbert", [gold.train_file]).trained_on
        figures[name] = {"seconds": round(time.perf_counter() - started, 1), "trained_on": trained_on}
    return figures, teacher.model_dir, dev_file


def actor_cpus(actors: int) -> int:
    """CPUs each actor gets: all but two (the driver, Ray's own processes), split evenly."""
    return max(1, ((os.cpu_count() or 2) - 2) // actors)


def engine_rate(model: str, input_file: Path, output: Path, precision: str, batch: int, actors: int, gpu: bool) -> dict[str, Any]:
    """One `augsbert label` call's pairs/s (actor start and model load included) and its actors' rate in shards."""
    spec = ar.LabelingSpec(batch_size=batch, min_actors=actors, max_actors=actors, cpus_per_actor=actor_cpus(actors),
                        gpus_per_actor=1 / actors if gpu else 0, precision=precision,
                        shard_rows=max(1000, pq.read_metadata(input_file).num_rows // (2 * actors)))
    seconds, totals = engine_run(model, input_file, output, spec)
    return {"pairs_per_s": round(totals["labeled"] / seconds, 1), "seconds": round(seconds, 2),
            "actor_pairs_per_s": round(totals["labeled"] * actors / totals["shard_seconds"], 1),
            "padding": round(totals["padded_tokens"] / totals["tokens"] - 1, 3), "cpus_per_actor": actor_cpus(actors)}


@contextmanager
def tokenizer_threads(parallel: bool) -> Iterator[None]:
    """Tokenizers reads TOKENIZERS_PARALLELISM at each batch: on, it uses the process's Rayon pool."""
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if parallel else "false"
    try:
        yield
    finally:
        os.environ["TOKENIZERS_PARALLELISM"] = previous or "false"


def predict_rate(model: str, pairs: list[tuple[str, str]], batch: int, dtype: Any = None, parallel_tokenizer: bool = False) -> tuple[dict[str, Any], np.ndarray]:
    """sentence-transformers' CrossEncoder.predict on this device, after a warm-up batch; its tokenizer on one thread,
    or (``parallel_tokenizer``) on all CPUs, as a script that leaves TOKENIZERS_PARALLELISM unset runs it."""
    import torch
    from sentence_transformers import CrossEncoder

    cross_encoder = CrossEncoder(model, model_kwargs={"dtype": dtype} if dtype else None)
    with tokenizer_threads(parallel_tokenizer):
        cross_encoder.predict(pairs[:batch], batch_size=batch, show_progress_bar=False)
        synchronize()
        started = time.perf_counter()
        scores = cross_encoder.predict(pairs, batch_size=batch, show_progress_bar=False)
        synchronize()
        seconds = time.perf_counter() - started
    del cross_encoder
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"pairs_per_s": round(len(pairs) / seconds, 1), "seconds": round(seconds, 2)}, np.asarray(scores, dtype=np.float64)


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def one_actor_steps(model: str, pairs: list[tuple[str, str]], precision: str, batch: int, threads: int) -> dict[str, float]:
    """Pairs/s of each step one actor takes, run one after another in this process: tokenize (one thread, then the
    actor's ``threads``), pad (length-sorted batches), score (copy in, model, copy out: the scorer's model; a first pass,
    then a second), and the model alone on batches already on the device; at bf16/fp16 on GPU also fp32 weights under
    autocast."""
    import torch

    scorer = CrossEncoderScorer(model, batch, precision, threads, runtime="torch", gpu=True)
    pair_model = scorer.model
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    steps: dict[str, float] = {}
    for name, parallel in (("tokenize_1_thread", False), (f"tokenize_{threads}_threads", pair_model.device == "cuda")):
        with tokenizer_threads(parallel):
            started = time.perf_counter()
            encoded = pair_model.tokenizer(first, second, truncation="longest_first", max_length=pair_model.max_length)
            steps[name] = time.perf_counter() - started
    lengths = np.array([len(ids) for ids in encoded["input_ids"]])
    order = np.argsort(lengths, kind="stable")
    started = time.perf_counter()
    batches = [scorer.pad(encoded, order[i : i + batch], scorer.batch_width(lengths[order[i : i + batch]])) for i in range(0, len(order), batch)]
    steps["pad"] = time.perf_counter() - started
    for name in ("score_first_pass", "score_with_copies"):  # first: every batch width met for the first time
        synchronize()
        started = time.perf_counter()
        for features in batches:
            pair_model.score(features)
        synchronize()
        steps[name] = time.perf_counter() - started
    on_device = [{name: torch.from_numpy(f[name]).to(pair_model.device) for name in pair_model.input_names} for f in batches]
    steps["model_only"] = model_seconds(pair_model, on_device, contextlib.nullcontext)
    half = next(pair_model.cross_encoder.parameters()).dtype  # the weights' dtype at this precision
    if half != torch.float32 and pair_model.device == "cuda":
        pair_model.cross_encoder.to(torch.float32)
        steps["model_only_autocast"] = model_seconds(pair_model, on_device, lambda: torch.autocast("cuda", dtype=half))
    return {name: round(len(pairs) / seconds, 1) for name, seconds in steps.items()}


def model_seconds(pair_model: Any, on_device: list[dict[str, Any]], context: Callable[[], Any]) -> float:
    """Seconds of the model's forward passes over the batches in ``context``, after a warm-up pass over each batch."""
    import torch

    with torch.inference_mode(), context():
        for tensors in on_device:
            pair_model.cross_encoder(tensors)
        synchronize()
        started = time.perf_counter()
        for tensors in on_device:
            pair_model.cross_encoder(tensors)
        synchronize()
    return time.perf_counter() - started


def steps_in_an_actor(model: str, pairs: list[tuple[str, str]], precision: str, gpu: bool) -> dict[str, float]:
    """one_actor_steps in a Ray task with an actor's CPUs (its tokenizer threads) and, on GPU, the whole GPU."""
    import ray

    threads = actor_cpus(STEP_ACTORS)
    task = ray.remote(num_cpus=threads, num_gpus=1 if gpu else 0)(one_actor_steps)
    return ray.get(task.remote(model, pairs, precision, 256, threads))


def mpnet_cross_encoder(source: str, target: Path) -> tuple[str, str]:
    """An mpnet cross-encoder with a fresh one-logit head: on mpnet's weights where ``source`` has them, else drawn at random."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    if any(Path(source).glob("*.safetensors")) or any(Path(source).glob("pytorch_model.bin")):
        CrossEncoder(source, num_labels=1).save_pretrained(str(target))
        return str(target), "all-mpnet-base-v2 with a fresh head"
    config = AutoConfig.from_pretrained(source, num_labels=1)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(str(target))
    AutoTokenizer.from_pretrained(source).save_pretrained(str(target))
    return str(target), "mpnet-base architecture, random weights (its config and tokenizer only)"


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return round(float(spearmanr(a, b)[0]), 5)


def compare_precisions(model: str, pairs_file: Path, work: Path, runs: list[tuple[str, int, int]], gpu: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    scores = {}
    for precision, batch, actors in runs:
        if precision == "fp16" and not gpu:
            continue
        name = f"{precision}_b{batch}_a{actors}"
        figures[name] = engine_rate(model, pairs_file, work / name, precision, batch, actors, gpu)
        scores.setdefault(precision, scores_by_id(work / name))
        print(f"engine {name}: {figures[name]}", flush=True)
    for precision in scores:
        if precision != "fp32" and "fp32" in scores:
            figures[f"spearman_{precision}_vs_fp32"] = spearman(scores[precision], scores["fp32"])
    return figures


def minilm_figures(teacher: str, dev_file: Path, pairs: list[tuple[str, str]], work: Path, gpu: bool, large_pairs: Path) -> dict[str, Any]:
    import torch

    figures: dict[str, Any] = {}
    figures["predict_fp32_b64"], reference = predict_rate(teacher, pairs, 64)
    if gpu:
        figures["predict_bf16_b256"], reference_bf16 = predict_rate(teacher, pairs, 256, torch.bfloat16)
        figures["predict_bf16_b256_parallel_tokenizer"], _ = predict_rate(teacher, pairs, 256, torch.bfloat16, parallel_tokenizer=True)
        figures["spearman_predict_bf16_vs_fp32"] = spearman(reference_bf16, reference)
    print(json.dumps(figures), flush=True)
    figures.update(compare_precisions(teacher, work / "pairs.parquet", work / "minilm", ENGINE_RUNS, gpu))
    figures["max_abs_diff_engine_fp32_vs_predict"] = float(np.max(np.abs(scores_by_id(work / "minilm" / "fp32_b64_a1") - reference)))
    precision, batch, actors = LARGE_RUN
    name = f"large_{precision}_b{batch}_a{actors}"
    figures[name] = {"pairs": pq.read_metadata(large_pairs).num_rows,
                     **engine_rate(teacher, large_pairs, work / "minilm" / name, precision, batch, actors, gpu)}
    print(f"engine {name}: {figures[name]}", flush=True)
    figures["one_actor_pairs_per_s"] = {p: steps_in_an_actor(teacher, pairs[:20_000], p, gpu) for p in ("fp32", "bf16")}
    print(f"one actor: {figures['one_actor_pairs_per_s']}", flush=True)
    figures["dev_spearman_x100"] = gold_spearman(teacher, dev_file, work, ["fp32", "bf16", "fp16"] if gpu else ["fp32", "bf16"], 1 if gpu else 0)
    print(json.dumps(figures, indent=1), flush=True)
    return figures


def mpnet_figures(mpnet: str, table: pa.Table, work: Path, gpu: bool) -> dict[str, Any]:
    import torch

    mpnet_model, kind = mpnet_cross_encoder(mpnet, work / "mpnet_cross_encoder")
    pq.write_table(table, work / "mpnet_pairs.parquet", row_group_size=5000)
    mpnet_pairs = list(zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()))
    figures: dict[str, Any] = {"model": kind, "pairs": len(mpnet_pairs)}
    if gpu:
        figures["predict_bf16_b256"], _ = predict_rate(mpnet_model, mpnet_pairs, 256, torch.bfloat16)
        figures["predict_bf16_b256_parallel_tokenizer"], _ = predict_rate(mpnet_model, mpnet_pairs, 256, torch.bfloat16, parallel_tokenizer=True)
    else:
        figures["predict_fp32_b64"], _ = predict_rate(mpnet_model, mpnet_pairs, 64)
    figures.update(compare_precisions(mpnet_model, work / "mpnet_pairs.parquet", work / "mpnet", MPNET_RUNS, gpu))
    figures["one_actor_pairs_per_s"] = {"bf16": steps_in_an_actor(mpnet_model, mpnet_pairs[:5000], "bf16", gpu)}
    return figures


def write_pairs(sentences: list[str], count: int, path: Path) -> pa.Table:
    table = recombined_pairs(sentences, count, seed=0)
    pq.write_table(table, path, row_group_size=5000)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm", default="minilm", help="all-MiniLM-L6-v2: an alias or a directory")
    parser.add_argument("--teacher", help="a trained cross-encoder to label with; skips the fits (needs --dev)")
    parser.add_argument("--dev", type=Path, help="the gold dev split (Parquet) --teacher was fitted beside")
    parser.add_argument("--mpnet", default="mpnet", help="all-mpnet-base-v2, or a directory with only its config and tokenizer")
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--large-pairs", type=int, default=1_000_000, help="pairs of the one large call (%(default)s)")
    parser.add_argument("--mpnet-pairs", type=int, default=30_000)
    parser.add_argument("--data-dir", default=os.environ.get("AUGSBERT_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_path.json")
    parser.add_argument("--part", choices=["all", "minilm", "mpnet"], default="all", help="the fits and MiniLM, mpnet, or both")
    parser.add_argument("--smoke", action="store_true", help="toy sizes: checks the script, measures nothing")
    args = parser.parse_args()
    if bool(args.teacher) != bool(args.dev):
        parser.error("--teacher and --dev go together")
    if args.smoke:
        args.pairs, args.large_pairs, args.mpnet_pairs = 600, 2000, 200
    import torch

    ar.setup_logging()
    gpu = torch.cuda.is_available()
    work = Path(tempfile.mkdtemp(prefix="gpu_path_"))
    init_ray(dashboard=not args.teacher)  # the fits' Ray Train needs the dashboard; labeling alone does not
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
        "cpus": os.cpu_count(), "torch": torch.__version__, "pairs": args.pairs, "load_average_1min_before": os.getloadavg()[0],
    }
    started = time.perf_counter()
    sentences = stsb_sentences(Path(args.data_dir))
    table = write_pairs(sentences, args.pairs, work / "pairs.parquet")
    pairs = list(zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()))
    if args.part in ("all", "minilm"):
        if args.teacher:
            teacher, dev_file = args.teacher, args.dev
            results["teacher"] = teacher
        else:
            results["fits"], teacher_dir, dev_file = timed_fits(ar.resolve_model(args.minilm), work, Path(args.data_dir), gpu, args.smoke)
            teacher = str(teacher_dir)
            results["teacher"] = "the MiniLM cross-encoder fitted above (STSb-1k)"
            print(f"fits: {results['fits']}", flush=True)
        write_pairs(sentences, args.large_pairs, work / "large_pairs.parquet")
        results["minilm"] = minilm_figures(teacher, dev_file, pairs, work, gpu, work / "large_pairs.parquet")
        save(results, started, args.out)
    if args.part in ("all", "mpnet"):
        results["mpnet"] = mpnet_figures(ar.resolve_model(args.mpnet), table.slice(0, args.mpnet_pairs), work, gpu)
    save(results, started, args.out)


def save(results: dict[str, Any], started: float, out: Path) -> None:
    """Written after each part, so a run stopped by its time limit keeps what it measured."""
    results["seconds"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"written: {out}", flush=True)


if __name__ == "__main__":
    main()
