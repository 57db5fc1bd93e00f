"""Candidate-generation benchmark: wall time and peak RSS of BM25 top-5, semantic top-5 and KDE selection.

Each measurement runs in a fresh subprocess with its own local Ray, so peak RSS (the driver plus every
process it started, Ray workers included, sampled every 0.1 s) belongs to that measurement alone.

    .venv/bin/python -m bench.sampling                      # the issue's sizes; writes bench/results/sampling.json
    .venv/bin/python -m bench.sampling --bm25 10000 --semantic 10000 --kde-rows 100000   # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent


class PeakRss:
    """Peak of the summed RSS of this process and all its descendants."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(self.interval)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure_bm25(size: int, data_dir: str) -> dict:
    from augsbert_ray.config import SamplingSpec
    from augsbert_ray.sampling import SentencePool, candidate_table
    from bench.corpus import edited_corpus

    pool = SentencePool(edited_corpus(size, data_dir=Path(data_dir)))
    spec = SamplingSpec(top_k=5, search_cpus=2)
    start = time.perf_counter()
    table = candidate_table("bm25", pool, np.empty(0, np.int64), spec, seed=0)
    return {"seconds": time.perf_counter() - start, "candidates": table.num_rows}


def measure_semantic(size: int, data_dir: str) -> dict:
    import augsbert_ray as ar
    from augsbert_ray.config import SamplingSpec
    from augsbert_ray.sampling import SentencePool, embed_sentences, faiss_search, top_k_pairs
    from bench.corpus import edited_corpus

    pool = SentencePool(edited_corpus(size, data_dir=Path(data_dir)))
    resources = ar.LabelingSpec(batch_size=128, cpus_per_actor=2)
    start = time.perf_counter()
    embedded = embed_sentences(pool.sentences, ar.resolve_model("minilm"), resources)
    embed_seconds = time.perf_counter() - start
    spec = SamplingSpec(top_k=5)
    ids, scores = faiss_search(embedded, len(pool), 6, spec.semantic_index, spec.ann_threshold, threads=2)
    codes, _ = top_k_pairs(pool, ids, scores, 5, np.empty(0, np.int64))
    total = time.perf_counter() - start
    return {"seconds": total, "embed_seconds": embed_seconds, "search_seconds": total - embed_seconds, "candidates": len(codes)}


def measure_kde(rows: int, data_dir: str) -> dict:
    import pyarrow as pa
    import ray.data
    from ray.data.expressions import col

    from augsbert_ray.selection import select

    rng = np.random.default_rng(0)
    silver = pa.table(
        {
            "sentence1": pa.array([f"sentence {i}" for i in range(rows)]),
            "sentence2": pa.array([f"other sentence {i * 7}" for i in range(rows)]),
            "score": np.clip(rng.beta(1.2, 6.0, rows), 0, 1),
        }
    )
    gold = np.clip(rng.beta(2.0, 2.0, 1000), 0, 1)
    dataset = ray.data.from_arrow(silver).repartition(16).materialize()
    start = time.perf_counter()
    selected, _ = select(dataset, gold, "regression", seed=0)
    kept = selected.filter(expr=col("accepted")).count()
    return {"seconds": time.perf_counter() - start, "kept": kept}


MEASURES = {"bm25": measure_bm25, "semantic": measure_semantic, "kde": measure_kde}


def child(kind: str, size: int, data_dir: str) -> None:
    import ray

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with PeakRss() as rss:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        result = MEASURES[kind](size, data_dir)
        ray.shutdown()
    result["peak_rss_mb"] = rss.peak / 2**20
    print("RESULT " + json.dumps(result), flush=True)


def run_child(kind: str, size: int, data_dir: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.sampling", "--child", kind, str(size), "--data-dir", data_dir],
        capture_output=True, text=True, check=False, cwd=HERE.parent,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} {size} failed:\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    print(f"{kind:9s} {size:>9,}  {result['seconds']:8.1f} s  peak RSS {result['peak_rss_mb']:8.0f} MB  {result}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bm25", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--semantic", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--kde-rows", type=int, default=1_000_000)
    parser.add_argument("--data-dir", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--output", default=str(HERE / "results" / "sampling.json"))
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.data_dir)
        return

    results: dict = {
        "bm25_top5_seconds": {}, "peak_rss_mb": {},  # peak_rss_mb: BM25 top-5, by corpus size
        "semantic_top5_seconds": {}, "semantic_embed_seconds": {}, "semantic_peak_rss_mb": {},
    }
    for size in args.bm25:
        r = run_child("bm25", size, args.data_dir)
        results["bm25_top5_seconds"][str(size)] = round(r["seconds"], 2)
        results["peak_rss_mb"][str(size)] = round(r["peak_rss_mb"])
    for size in args.semantic:
        r = run_child("semantic", size, args.data_dir)
        results["semantic_top5_seconds"][str(size)] = round(r["seconds"], 2)
        results["semantic_embed_seconds"][str(size)] = round(r["embed_seconds"], 2)
        results["semantic_peak_rss_mb"][str(size)] = round(r["peak_rss_mb"])
    r = run_child("kde", args.kde_rows, args.data_dir)
    results["kde_select_1m_seconds" if args.kde_rows == 1_000_000 else f"kde_select_{args.kde_rows}_seconds"] = round(r["seconds"], 2)
    results["kde_peak_rss_mb"] = round(r["peak_rss_mb"])
    results["machine"] = f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB"
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
