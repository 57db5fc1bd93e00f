"""The GPU path, measured in one run on one GPU.

1. use_gpu fits through Ray Train, as a run makes them: the MiniLM cross-encoder on STSb-1k (the teacher), SBERT on
   STSb-1k, and a bi-encoder on all of STSb train.
2. Labeling throughput of that trained teacher: the engine (Ray Data actors holding the GPU, or a share of it each)
   at fp32, bf16 and fp16 autocast, against sentence-transformers' ``CrossEncoder.predict`` on the same GPU (fp32, and
   the model loaded in bf16), on the same STSb-recombined pairs. Spearman of each precision against fp32, and
   against gold on STSb dev.
3. What bounds one actor: the same steps the actor takes, timed one by one in this process: tokenizing, padding in
   length-sorted batches, copying to the GPU and back, and the model alone on batches already on the GPU.
4. The same comparison for an mpnet cross-encoder (from ``--mpnet``: a model directory, or one holding only its
   config and tokenizer, when its weights are drawn at random: the same speed, not the same scores).

    python bench/gpu_path.py --minilm DIR --mpnet DIR            # where a GPU is (docs/BENCHMARKS.md)
    .venv/bin/python bench/gpu_path.py --smoke                   # without one: the same code at toy sizes on CPU

The figures are written to --out as JSON and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from label_throughput import STSB_1K, engine_run, gold_spearman, recombined_pairs, scores_by_id, stsb_1k_teacher, stsb_sentences  # noqa: E402

from augsbert_ray.config import LabelingSpec, load_spec  # noqa: E402
from augsbert_ray.labeling.backend import PairModel  # noqa: E402
from augsbert_ray.labeling.scorer import PairScorer  # noqa: E402
from augsbert_ray.models import resolve_model  # noqa: E402
from augsbert_ray.runtime import init_ray, setup_logging  # noqa: E402
from augsbert_ray.stages import RunContext, plain_fit, read_gold  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (precision, batch size, actors sharing the GPU) of the engine runs
ENGINE_RUNS = [("fp32", 64, 1), ("bf16", 64, 1), ("bf16", 256, 1), ("bf16", 256, 4), ("fp16", 256, 4), ("bf16", 256, 8)]
MPNET_RUNS = [("fp32", 64, 1), ("bf16", 256, 1), ("bf16", 256, 4)]


def timed_fits(minilm: str, work: Path, data_dir: Path, gpu: bool, smoke: bool) -> tuple[dict[str, Any], Path, Path]:
    """Wall seconds and pairs of the three fits; the trained teacher's directory and the gold dev split."""
    small = ["data.train_limit=64", "cross_encoder.epochs=1"] if smoke else []
    overrides = [f"cross_encoder.model={minilm}", f"bi_encoder.model={minilm}", f"training.use_gpu={str(gpu).lower()}",
                 f"training.cpus_per_worker={4 if gpu else 2}", *small]
    started = time.perf_counter()
    teacher, dev_file = stsb_1k_teacher(work, data_dir, overrides)
    figures = {"cross_encoder_stsb_1k": {"seconds": round(time.perf_counter() - started, 1), "trained_on": teacher.trained_on}}
    for name, limit in (("sbert_stsb_1k", []), ("sbert_stsb_all", small or ["data.train_limit=null"])):
        ctx = RunContext.open(load_spec(STSB_1K, [f"output_dir={work}", *overrides, *limit]), work / name)
        gold = read_gold(ctx, data_dir)
        started = time.perf_counter()
        trained_on = plain_fit(ctx, "sbert", [gold.train_file])["trained_on"]
        figures[name] = {"seconds": round(time.perf_counter() - started, 1), "trained_on": trained_on}
    return figures, teacher.model_dir, dev_file


def engine_rate(model: str, input_file: Path, output: Path, precision: str, batch: int, actors: int, gpu: bool) -> dict[str, Any]:
    """One `augsbert label` call's pairs/s (actor start and model load included) and its actors' rate in shards."""
    cpus = max(1, (os.cpu_count() or 2) - 2)
    spec = LabelingSpec(batch_size=batch, min_actors=actors, max_actors=actors, cpus_per_actor=max(1, cpus // actors),
                        gpus_per_actor=1 / actors if gpu else 0, precision=precision,
                        shard_rows=max(1000, pq.read_metadata(input_file).num_rows // (2 * actors)))
    seconds, totals = engine_run(model, input_file, output, spec)
    return {"pairs_per_s": round(totals["labeled"] / seconds, 1), "seconds": round(seconds, 2),
            "actor_pairs_per_s": round(totals["labeled"] * actors / totals["shard_seconds"], 1),
            "padding": round(totals["padded_tokens"] / totals["tokens"] - 1, 3)}


def predict_rate(model: str, pairs: list[tuple[str, str]], batch: int, dtype: Any = None) -> tuple[dict[str, Any], np.ndarray]:
    """sentence-transformers' CrossEncoder.predict on this device, after a warm-up batch."""
    import torch
    from sentence_transformers import CrossEncoder

    cross_encoder = CrossEncoder(model, model_kwargs={"dtype": dtype} if dtype else None)
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


def one_actor_steps(model: str, pairs: list[tuple[str, str]], precision: str, batch: int) -> dict[str, float]:
    """Pairs/s of each step one actor takes, run here one after another: tokenize, pad (length-sorted
    batches), score (copy in, model, copy out: PairModel.score), and the model alone on batches already on the device."""
    import torch

    pair_model = PairModel(model, precision, 4, None, None, "torch")
    scorer = PairScorer(pair_model, batch)
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    steps: dict[str, float] = {}
    started = time.perf_counter()
    encoded = pair_model.tokenizer(first, second, truncation="longest_first", max_length=pair_model.max_length)
    steps["tokenize"] = time.perf_counter() - started
    lengths = np.array([len(ids) for ids in encoded["input_ids"]])
    order = np.argsort(lengths, kind="stable")
    started = time.perf_counter()
    batches = [scorer.pad(encoded, order[i : i + batch], int(lengths[order[i : i + batch]].max())) for i in range(0, len(order), batch)]
    steps["pad"] = time.perf_counter() - started
    pair_model.score(batches[0])
    synchronize()
    started = time.perf_counter()
    for features in batches:
        pair_model.score(features)
    steps["score_with_copies"] = time.perf_counter() - started
    on_device = [{name: torch.from_numpy(f[name]).to(pair_model.device) for name in pair_model.input_names} for f in batches]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    synchronize()
    started = time.perf_counter()
    with torch.inference_mode(), torch.autocast(pair_model.device, dtype=dtype, enabled=dtype is not None):
        for tensors in on_device:
            pair_model.cross_encoder(tensors)
    synchronize()
    steps["model_only"] = time.perf_counter() - started
    return {name: round(len(pairs) / seconds, 1) for name, seconds in steps.items()}


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
        if precision != "fp32":
            figures[f"spearman_{precision}_vs_fp32"] = spearman(scores[precision], scores["fp32"])
    return figures


def minilm_figures(minilm: str, pairs: list[tuple[str, str]], work: Path, data_dir: Path, gpu: bool, smoke: bool) -> tuple[dict, dict]:
    import torch

    fits, teacher, dev_file = timed_fits(minilm, work, data_dir, gpu, smoke)
    print(f"fits: {fits}", flush=True)
    figures: dict[str, Any] = {"teacher": "the MiniLM cross-encoder fitted above (STSb-1k)"}
    figures["predict_fp32_b64"], reference = predict_rate(str(teacher), pairs, 64)
    if gpu:
        figures["predict_bf16_b64"], reference_bf16 = predict_rate(str(teacher), pairs, 64, torch.bfloat16)
        figures["predict_bf16_b256"], _ = predict_rate(str(teacher), pairs, 256, torch.bfloat16)
        figures["spearman_predict_bf16_vs_fp32"] = spearman(reference_bf16, reference)
    figures.update(compare_precisions(str(teacher), work / "pairs.parquet", work / "minilm", ENGINE_RUNS, gpu))
    figures["max_abs_diff_engine_fp32_vs_predict"] = float(np.max(np.abs(scores_by_id(work / "minilm" / "fp32_b64_a1") - reference)))
    figures["one_actor_pairs_per_s"] = {p: one_actor_steps(str(teacher), pairs[:20_000], p, 256) for p in ("fp32", "bf16")}
    figures["dev_spearman_x100"] = gold_spearman(str(teacher), dev_file, work, ["fp32", "bf16", "fp16"] if gpu else ["fp32", "bf16"], 1 if gpu else 0)
    print(json.dumps(figures, indent=1), flush=True)
    return fits, figures


def mpnet_figures(mpnet: str, table: pa.Table, work: Path, gpu: bool) -> dict[str, Any]:
    import torch

    mpnet_model, kind = mpnet_cross_encoder(mpnet, work / "mpnet_cross_encoder")
    pq.write_table(table, work / "mpnet_pairs.parquet", row_group_size=5000)
    mpnet_pairs = list(zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()))
    figures: dict[str, Any] = {"model": kind, "pairs": len(mpnet_pairs)}
    figures["predict_fp32_b64"], _ = predict_rate(mpnet_model, mpnet_pairs, 64)
    if gpu:
        figures["predict_bf16_b64"], _ = predict_rate(mpnet_model, mpnet_pairs, 64, torch.bfloat16)
    figures.update(compare_precisions(mpnet_model, work / "mpnet_pairs.parquet", work / "mpnet", MPNET_RUNS, gpu))
    figures["one_actor_pairs_per_s"] = {"bf16": one_actor_steps(mpnet_model, mpnet_pairs[:5000], "bf16", 256)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm", default="minilm", help="all-MiniLM-L6-v2: an alias or a directory")
    parser.add_argument("--mpnet", default="mpnet", help="all-mpnet-base-v2, or a directory with only its config and tokenizer")
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--mpnet-pairs", type=int, default=30_000)
    parser.add_argument("--data-dir", default=os.environ.get("AUGSBERT_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_path.json")
    parser.add_argument("--part", choices=["all", "minilm", "mpnet"], default="all", help="the fits and MiniLM, mpnet, or both")
    parser.add_argument("--smoke", action="store_true", help="toy sizes: checks the script, measures nothing")
    args = parser.parse_args()
    if args.smoke:
        args.pairs, args.mpnet_pairs = 600, 200
    import torch

    setup_logging()
    gpu = torch.cuda.is_available()
    work = Path(tempfile.mkdtemp(prefix="gpu_path_"))
    init_ray()
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
        "cpus": os.cpu_count(), "torch": torch.__version__, "pairs": args.pairs, "load_average_1min_before": os.getloadavg()[0],
    }
    started = time.perf_counter()
    table = recombined_pairs(stsb_sentences(Path(args.data_dir)), args.pairs, seed=0)
    pq.write_table(table, work / "pairs.parquet", row_group_size=5000)
    pairs = list(zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()))
    if args.part in ("all", "minilm"):
        results["fits"], results["minilm"] = minilm_figures(resolve_model(args.minilm), pairs, work, Path(args.data_dir), gpu, args.smoke)
    if args.part in ("all", "mpnet"):
        results["mpnet"] = mpnet_figures(resolve_model(args.mpnet), table.slice(0, args.mpnet_pairs), work, gpu)
    results["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(results, indent=1)
    print(text, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
