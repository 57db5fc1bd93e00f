"""Labeling throughput, side by side in one process, and peak memory of `augsbert label` at two sizes.

(a) sentence-transformers CrossEncoder.predict, batch 64 (the reference), and sentence-transformers' own ONNX
    backend (CrossEncoder(backend="onnx") and its dynamic int8 export), which needs an older sentence-transformers:
    it runs in .venv-st-onnx, made on first use (bench.st_onnx_reference); where it cannot, the output says why
(b) the labeling engine at fp32 (runtime auto: ONNX Runtime on CPU)   (c) the engine at int8 (ONNX Runtime)
and, for comparison, the engine at fp32 on torch (`--runtime torch`) and at bf16 (bf16 weights on torch,
fast where the CPU has bf16 instructions: AVX512-BF16 or AMX)
on STSb-recombined pairs with the packaged MiniLM and a fresh one-logit head (seed 0), or with `--teacher stsb_1k`,
the MiniLM cross-encoder fitted on STSb-1k as jobs/stsb_indomain_all_strategies.yaml fits it (kept in --work and
reused), whose Spearman against gold on STSb dev is then reported for fp32, int8 and bf16 as well, or with
`--teacher DIR --dev FILE`, any trained cross-encoder (e.g. the mpnet one bench.teacher_study fits) and the gold
dev split it is scored on (a parquet file with sentence1, sentence2, label).
FLOP utilization = useful transformer FLOPs (from the unpadded token counts the engine records)
per second of (b), over the fp32 peak of a 2048x2048 torch matmul measured in this run; per second of the
whole call, and per second spent inside the shards (start, model load and export left out); and over the
peak of the same matmul in ONNX Runtime, whose kernels (b) runs.
Peak RSS: the `augsbert label` process tree (driver, Ray services, actors), sampled every 0.5 s,
labeling N pairs with a tiny BERT.

    .venv/bin/python -m bench.label_throughput            # the figures in docs/BENCHMARKS.md
    .venv/bin/python -m bench.label_throughput --pairs 500 --rss-pairs 2000,20000   # a quick check
    .venv/bin/python -m bench.label_throughput --teacher stsb_1k --rss-pairs skip    # int8 on a trained teacher
    .venv/bin/python -m bench.label_throughput --teacher runs/teacher_study/bws_cross_topic-seed42/models/cross_encoder \
        --dev runs/teacher_study/bws_cross_topic-seed42/gold/dev.parquet --pairs 500 --rss-pairs skip \
        --out bench/results/label_throughput_mpnet_bws.json

bench.gpu_path measures the GPU path (bf16/fp16, actors sharing a GPU) on a machine that has one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import augsbert_ray as ar  # noqa: E402
from augsbert_ray.config import SamplingSpec  # noqa: E402
from augsbert_ray.models import build_tiny_bert  # noqa: E402
from augsbert_ray.pipeline import FitRecord, RunContext, read_gold, train_cross_encoder  # noqa: E402
from augsbert_ray.runtime import init_ray  # noqa: E402
from augsbert_ray.sampling import SentencePool, candidate_table  # noqa: E402

STSB_1K = ROOT / "jobs" / "stsb_indomain_all_strategies.yaml"
THREADS = 2  # this machine's cores; the reference uses torch's default (all cores), the actor reserves both
RAY_WORKER_NICENESS = 15  # what os.nice(0) reads inside a Ray worker (RAY_worker_niceness)
# sentence-transformers' ONNX backend needs optimum-onnx, whose only release (0.1.0) requires transformers < 4.58,
# while this project's sentence-transformers 6.2 requires transformers >= 5: the newest that loads it, in a venv of its own
ST_ONNX_VENV = ROOT / ".venv-st-onnx"
ST_ONNX_REQUIREMENTS = ["sentence-transformers[onnx]==5.7.0", "transformers==4.57.6", "optimum-onnx[onnxruntime]==0.1.0"]


def stsb_sentences(data_dir: Path) -> list[str]:
    sentences = []
    for split in ("train", "dev", "test"):
        for line in (data_dir / "stsb" / f"sts-{split}.csv").read_text(encoding="utf-8").splitlines():
            sentences += line.split("\t")[5:7]
    return sentences


def recombined_pairs(sentences: list[str], count: int, seed: int) -> pa.Table:
    """Random STSb-recombined pairs, made by the sampling package, with a pair_id to join results on."""
    pool = SentencePool(sentences)
    table = candidate_table("random", pool, np.zeros(0, dtype=np.int64), SamplingSpec(strategies=["random"]), seed, n_random=count)
    return table.append_column("pair_id", pa.array(np.arange(table.num_rows), pa.int64()))


def stsb_1k_teacher(work: Path, data_dir: Path, overrides: list[str]) -> tuple[FitRecord, Path]:
    """The MiniLM cross-encoder the STSb-1k job fits (on Ray Train; reused when ``work`` holds it already), and the
    job's gold dev split."""
    ctx = RunContext.open(ar.load_spec(STSB_1K, [f"output_dir={work}", *overrides]), work / "stsb_1k", data_dir)
    return train_cross_encoder(ctx, read_gold(ctx)), ctx.layout.split("gold", "dev")


def gold_spearman(model: str, dev_file: Path, work: Path, precisions: list[str], gpus: float = 0) -> dict[str, float]:
    """Spearman x100 of the model's scores against gold on ``dev_file``, labeled by the engine at each precision."""
    from scipy.stats import spearmanr

    gold = pq.read_table(dev_file)
    pq.write_table(gold.select(["sentence1", "sentence2"]).append_column("pair_id", pa.array(np.arange(gold.num_rows))), work / "dev.parquet")
    figures = {}
    for precision in precisions:
        spec = ar.LabelingSpec(batch_size=64, cpus_per_actor=THREADS if not gpus else 1, gpus_per_actor=gpus, precision=precision)
        ar.label_files(work / "dev.parquet", work / f"dev_{precision}", ar.Teacher.cross_encoder(model), spec)
        figures[precision] = round(100 * float(spearmanr(scores_by_id(work / f"dev_{precision}"), gold.column("label").to_numpy())[0]), 2)
    return figures


def many_pairs(sentences: list[str], count: int, path: Path, seed: int) -> None:
    """``count`` random pairs (repeats allowed) written in row groups, without building them all at once."""
    strings = pa.array(sorted(set(sentences)))
    rng = np.random.default_rng(seed)
    step = 100_000
    with pq.ParquetWriter(path, pa.schema([("sentence1", pa.string()), ("sentence2", pa.string()), ("pair_id", pa.int64())])) as writer:
        for start in range(0, count, step):
            n = min(step, count - start)
            i, j = rng.integers(0, len(strings), n), rng.integers(0, len(strings), n)
            writer.write_table(pa.table({"sentence1": strings.take(i), "sentence2": strings.take(j), "pair_id": np.arange(start, start + n)}), row_group_size=50_000)


def matmul_flops_per_s(matmul, size: int, repeats: int = 10) -> float:
    """Best of ``repeats`` timed calls of a size x size matmul, after one warm-up call."""
    matmul()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def matmul_peak(threads: int, size: int = 2048) -> float:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    return matmul_flops_per_s(lambda: torch.mm(a, b), size)


def onnxruntime_matmul_peak(threads: int, size: int = 2048) -> float:
    """The same matmul in ONNX Runtime (MLAS), the kernels the engine's fp32 path runs: on CPUs where torch's
    BLAS is slow (MKL on AMD), this peak is the higher and the fairer one."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    tensor = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [size, size]) for name in ("a", "b", "c")]
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul", tensor[:2], tensor[2:])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    inputs = {name: np.random.default_rng(0).standard_normal((size, size), dtype=np.float32) for name in ("a", "b")}
    return matmul_flops_per_s(lambda: session.run(None, inputs), size)


def transformer_flops(config, tokens: int, tokens_sq: int) -> float:
    """Per layer: Q,K,V,O and the two FFN matmuls on every real token; QK^T and AV on n^2 per pair."""
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return layers * (2 * (4 * d * d + 2 * d * ff) * tokens + 4 * d * tokens_sq)


def st_onnx_python(venv: Path = ST_ONNX_VENV) -> Path:
    """The python of a venv where sentence-transformers' ONNX backend loads, made on first use (about 40 s):
    this venv's torch, ONNX Runtime (the engine's kernels) and pyarrow, with ST_ONNX_REQUIREMENTS."""
    from importlib.metadata import version

    python = venv / "bin" / "python"
    pins = [f"{package}=={version(package)}" for package in ("torch", "onnxruntime", "pyarrow")]
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", pins[0]], check=True)  # as the Makefile: its CPU wheel
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    subprocess.run([uv, "pip", "install", "-q", "--compile-bytecode", "--python", str(python), *pins, *ST_ONNX_REQUIREMENTS], check=True)
    return python


def sentence_transformers_onnx(model_dir: Path, pairs_file: Path, work: Path) -> dict:
    """sentence-transformers' ONNX backend at fp32 and its dynamic int8 export, in its own venv
    (bench.st_onnx_reference): seconds and scores of each, or ``{"unavailable": reason}`` when that venv cannot be
    made or the backend fails."""
    own_dir = work / "st_onnx"  # the export writes onnx/ into the model's folder: a copy, not the engine's input
    shutil.copytree(model_dir, own_dir, ignore=shutil.ignore_patterns("onnx"))
    out = work / "st_onnx.npz"
    try:
        python = st_onnx_python()
        subprocess.run([str(python), "-m", "bench.st_onnx_reference", str(own_dir), str(pairs_file), str(out)],
                       check=True, capture_output=True, text=True, cwd=ROOT)
    except subprocess.CalledProcessError as exc:
        return {"unavailable": f"{exc.cmd[0]} exited {exc.returncode}: {(exc.stderr or '').strip().splitlines()[-1:]}"}
    except OSError as exc:
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
    measured = np.load(out)
    return {name: (float(measured[f"{name}_seconds"]), measured[f"{name}_scores"]) for name in ("st_onnx_fp32", "st_onnx_int8")}


def engine_run(model: str, input_file: Path, output: Path, spec: ar.LabelingSpec) -> tuple[float, dict]:
    """Seconds of the whole call, and the totals with ``shard_seconds``: the actors' summed time inside their shards
    (read, tokenize, score, write), which leaves out Ray's start, the model load and the ONNX export."""
    start = time.perf_counter()
    result = ar.label_files(input_file, output, ar.Teacher.cross_encoder(model), spec)
    seconds = time.perf_counter() - start
    shards = json.loads(result.manifest.read_text())["shards"].values()
    return seconds, {**result.totals, "shard_seconds": sum(shard["seconds"] for shard in shards)}


def cpu_spec(precision: str, runtime: str = "auto") -> ar.LabelingSpec:
    """The CPU engine of these figures: one actor with this machine's cores, batch 64."""
    return ar.LabelingSpec(batch_size=64, cpus_per_actor=THREADS, precision=precision, runtime=runtime, shard_rows=5_000)


def scores_by_id(output: Path) -> np.ndarray:
    table = pq.read_table(output, columns=["pair_id", "score"]).sort_by("pair_id")
    return table.column("score").to_numpy()


def peak_rss_of_label(model: str, input_file: Path, output: Path) -> tuple[float, float]:
    """Run `augsbert label` as a subprocess; return (peak RSS of its process tree in MB, seconds)."""
    command = [sys.executable, "-m", "augsbert_ray.cli", "label", "--model", model, "--input", str(input_file),
               "--output", str(output), "--cpus-per-actor", str(THREADS), "--batch-size", "256"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        total = 0
        try:
            for proc in [root, *root.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.5)
    if process.returncode != 0:
        raise RuntimeError(f"augsbert label exited {process.returncode}: {' '.join(command)}")
    return peak / 2**20, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--rss-pairs", default="200000,2000000", help="two sizes for the tiny-BERT peak RSS, or 'skip'")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--teacher", default="fresh",
                        help="fresh: MiniLM with an untrained head; stsb_1k: the cross-encoder fitted on STSb-1k, with gold "
                             "Spearman; or a trained cross-encoder's directory, with --dev")
    parser.add_argument("--dev", type=Path, help="with --teacher DIR: the gold dev split (parquet: sentence1, sentence2, label)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "label_throughput", help="where the stsb_1k teacher is kept")
    parser.add_argument("--out", type=Path, help="default: bench/results/label_throughput.json, or label_throughput_stsb_1k.json; "
                                                "needed with --teacher DIR")
    args = parser.parse_args()
    if (args.teacher not in ("fresh", "stsb_1k")) != (args.dev is not None):
        parser.error("--dev FILE goes with --teacher DIR, a trained cross-encoder's directory")
    if args.dev is not None and not (Path(args.teacher) / "config.json").is_file():
        parser.error(f"--teacher {args.teacher}: not a model directory (no config.json)")
    if args.dev is not None and args.out is None:
        parser.error("--teacher DIR needs --out FILE (the default files hold the fresh and stsb_1k figures)")
    args.out = args.out or ROOT / "bench" / "results" / ("label_throughput.json" if args.teacher == "fresh" else "label_throughput_stsb_1k.json")

    import ray
    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import CrossEncoder

    # Ray starts its workers at nice 15: measure the reference at the same priority, so that other processes'
    # load on the machine does not favour it over the engine's actors.
    os.nice(max(0, RAY_WORKER_NICENESS - os.nice(0)))
    work = Path(tempfile.mkdtemp(prefix="label_bench_"))
    sentences = stsb_sentences(args.data_dir)
    pairs_file = work / "pairs.parquet"
    table = recombined_pairs(sentences, args.pairs, seed=0)
    pq.write_table(table, pairs_file)
    pairs = list(zip(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist()))

    init_ray(num_cpus=THREADS)
    if args.teacher == "stsb_1k":
        teacher, dev_file = stsb_1k_teacher(args.work.resolve(), args.data_dir, [])
        model_dir = teacher.model_dir
    elif args.dev is not None:
        model_dir, dev_file = Path(args.teacher), args.dev
    else:
        torch.manual_seed(0)
        model_dir = work / "minilm_fresh_head"
        CrossEncoder(ar.resolve_model("minilm"), num_labels=1).save_pretrained(str(model_dir))
    load_before = os.getloadavg()[0]

    peak = matmul_peak(THREADS)
    peak_onnxruntime = onnxruntime_matmul_peak(THREADS)
    reference_model = CrossEncoder(str(model_dir))
    reference_model.predict(pairs[:64], batch_size=64, show_progress_bar=False)
    start = time.perf_counter()
    reference = reference_model.predict(pairs, batch_size=64, show_progress_bar=False)
    seconds = {"reference": time.perf_counter() - start}
    del reference_model
    st_onnx = sentence_transformers_onnx(model_dir, pairs_file, work)
    seconds.update({name: measured[0] for name, measured in st_onnx.items() if name != "unavailable"})

    seconds["fp32"], totals = engine_run(str(model_dir), pairs_file, work / "fp32", cpu_spec("fp32"))
    seconds["int8"], _ = engine_run(str(model_dir), pairs_file, work / "int8", cpu_spec("int8"))
    # the engine's fp32 on torch instead of ONNX Runtime, for comparison
    seconds["fp32_torch"], _ = engine_run(str(model_dir), pairs_file, work / "fp32_torch", cpu_spec("fp32", "torch"))
    seconds["bf16"], _ = engine_run(str(model_dir), pairs_file, work / "bf16", cpu_spec("bf16"))
    fp32, int8, fp32_torch, bf16 = (scores_by_id(work / name) for name in ("fp32", "int8", "fp32_torch", "bf16"))
    load_after = os.getloadavg()[0]
    dev = gold_spearman(str(model_dir), dev_file, work, ["fp32", "int8", "bf16"]) if args.teacher != "fresh" else None
    ray.shutdown()

    from transformers import AutoConfig

    flops = transformer_flops(AutoConfig.from_pretrained(model_dir), totals["tokens"], totals["tokens_sq"])
    rate = {name: args.pairs / s for name, s in seconds.items()}
    results = {
        "pairs": args.pairs,
        "pairs_per_s": {name: round(value, 1) for name, value in rate.items()},
        "ratio_fp32": round(rate["fp32"] / rate["reference"], 3),
        "ratio_int8": round(rate["int8"] / rate["reference"], 3),
        "ratio_fp32_torch": round(rate["fp32_torch"] / rate["reference"], 3),
        "ratio_bf16": round(rate["bf16"] / rate["reference"], 3),
        "max_abs_diff_fp32": float(np.max(np.abs(fp32 - reference))),
        "max_abs_diff_fp32_torch": float(np.max(np.abs(fp32_torch - reference))),
        "teacher": args.teacher,
        "spearman_int8": round(float(spearmanr(int8, reference)[0]), 5),
        "spearman_bf16": round(float(spearmanr(bf16, reference)[0]), 5),
        "score_range_fp32": [round(float(fp32.min()), 4), round(float(fp32.max()), 4)],
        **({"dev_spearman_x100": dev} if dev else {}),
        "flop_utilization_fp32": round(flops / seconds["fp32"] / peak, 4),
        # one actor labels the shards one after another: their summed time is the labeling without the start
        "flop_utilization_fp32_in_shards": round(flops / totals["shard_seconds"] / peak, 4),
        "matmul_peak_gflops": round(peak / 1e9, 1),
        "flop_utilization_fp32_of_onnxruntime_peak": round(flops / seconds["fp32"] / peak_onnxruntime, 4),
        "matmul_peak_gflops_onnxruntime": round(peak_onnxruntime / 1e9, 1),
        "useful_gflops_fp32": round(flops / seconds["fp32"] / 1e9, 1),
        "padding_overhead_fp32": round(totals["padded_tokens"] / totals["tokens"] - 1, 4),
        **({"st_onnx_unavailable": st_onnx["unavailable"]} if "unavailable" in st_onnx else {
            "st_onnx_requirements": ST_ONNX_REQUIREMENTS,
            "ratio_fp32_vs_st_onnx_fp32": round(rate["fp32"] / rate["st_onnx_fp32"], 3),
            "ratio_int8_vs_st_onnx_int8": round(rate["int8"] / rate["st_onnx_int8"], 3),
            "max_abs_diff_st_onnx_fp32": float(np.max(np.abs(st_onnx["st_onnx_fp32"][1] - reference))),
            "max_abs_diff_fp32_vs_st_onnx_fp32": float(np.max(np.abs(fp32 - st_onnx["st_onnx_fp32"][1]))),
            "spearman_st_onnx_int8": round(float(spearmanr(st_onnx["st_onnx_int8"][1], reference)[0]), 5),
        }),
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
        "niceness": os.nice(0),
    }
    print(json.dumps(results, indent=1), flush=True)
    if args.rss_pairs != "skip":
        peak_rss(results, args.rss_pairs, sentences, work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"written: {args.out}; work dir {work}")


def peak_rss(results: dict, rss_pairs: str, sentences: list[str], work: Path) -> None:
    """Peak RSS of `augsbert label` with a tiny BERT at two sizes, into ``results``."""
    import torch
    from sentence_transformers import CrossEncoder

    tiny = work / "tiny"

    build_tiny_bert(tiny / "bert")
    torch.manual_seed(0)
    CrossEncoder(str(tiny / "bert"), num_labels=1).save_pretrained(str(tiny / "cross_encoder"))
    small, large = (int(n) for n in rss_pairs.split(","))
    for label, count in (("200k", small), ("2m", large)):
        input_file = work / f"tiny_{count}.parquet"
        many_pairs(sentences, count, input_file, seed=1)
        rss, wall = peak_rss_of_label(str(tiny / "cross_encoder"), input_file, work / f"tiny_out_{count}")
        results[f"peak_rss_mb_{label}"] = round(rss, 1)
        results[f"tiny_pairs_per_s_{label}"] = round(count / wall, 1)
        input_file.unlink()
        print(f"tiny BERT, {count} pairs: peak RSS {rss:.0f} MB, {count / wall:.0f} pairs/s", flush=True)
    results["rss_pairs"] = [small, large]
    results["rss_ratio"] = round(results["peak_rss_mb_2m"] / results["peak_rss_mb_200k"], 3)


if __name__ == "__main__":
    main()
