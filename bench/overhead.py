"""What Ray costs on one machine: the engine against the same work without Ray, side by side and interleaved.

(1) Labeling, whole command: `augsbert label` with its defaults (one CPU actor with 2 CPUs, ONNX Runtime fp32,
    batch 64: the labeler runs in the command's own process, no Ray), the same on an embedded Ray's actor pool
    (`--actors 1:2`; with 2 CPUs per actor on 2 cores, one actor runs), and `python -m bench.overhead --plain-loop`
    (the same CrossEncoderScorer in a plain loop, windows of 4,096 pairs), each timed from process start to exit,
    on 2,000 and 20,000 random STSb pairs with MiniLM and a fresh one-logit head (seed 0); peak PSS of each
    process tree (sampled every 0.25 s); the commands' scores compared.
(2) BM25 top-5 over 100,000 edited STSb/BWS sentences: augsbert_ray.sampling.sample_bm25 against plain bm25s (numba
    backend, one index, every sentence a query, the same search depth): the candidate sets compared, and the sorted
    scores of the two sets (the same where only ties at the k-th neighbour are broken differently: the project
    breaks them by sentence id, so that any shard layout gives the same set).

(3) `--census N`: where the actor pool's time goes. The plain loop, then `augsbert label --actors 1:2` with Ray's
    default worker niceness (15) and with RAY_worker_niceness=0, on N pairs; for the pool runs, every process of
    the tree sampled every 0.5 s: its role, niceness, CPU seconds and peak PSS.

Ratios are speeds: engine / plain >= 1 means the engine is as fast. Each pair of runs alternates its order.

    .venv/bin/python -m bench.overhead                       # the figures in docs/BENCHMARKS.md
    .venv/bin/python -m bench.overhead --sizes 2000 --repeats 1 --bm25-sentences 10000   # a quick check
    .venv/bin/python -m bench.overhead --census 20000 --out bench/results/ray_processes.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

THREADS = 2  # this machine's cores: the engine's one actor reserves both, the plain loop runs on both
BATCH = 64
WINDOW = 4096  # the engine's window (labeling.scorer.WINDOW)
PLAIN_LOOP = [sys.executable, "-m", "bench.overhead", "--plain-loop"]  # run from ROOT (watched_command)


def plain_loop(input_file: Path, output: Path, model: str) -> None:
    """The engine's scorer with no Ray: read windows, score, write one Parquet file (what a user would write)."""
    from augsbert_ray.scoring import CrossEncoderScorer

    scorer = CrossEncoderScorer(model, BATCH, "fp32", THREADS, runtime="auto", cache_dir=output / "_onnx")
    output.mkdir(parents=True, exist_ok=True)
    writer = None
    for batch in pq.ParquetFile(input_file).iter_batches(batch_size=WINDOW):
        table = pa.Table.from_batches([batch])
        scores = scorer.score(table.column("sentence1").to_pylist(), table.column("sentence2").to_pylist())  # counts tokens, as the engine
        table = table.append_column("score", pa.array(scores, pa.float32()))
        writer = writer or pq.ParquetWriter(output / "scores.parquet", table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()


def watched_command(command: list[str], env: dict[str, str], every: float, sample: Callable[[list[psutil.Process]], None]) -> float:
    """Run ``command`` from the checkout's root (``bench`` importable) to its end, calling ``sample`` with its process
    tree every ``every`` seconds; its seconds."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True, cwd=ROOT)
    root = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            sample([root, *root.children(recursive=True)])
        except psutil.Error:
            pass
        time.sleep(every)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {process.stderr.read()[-2000:]}")
    return time.perf_counter() - start


def tree_pss(tree: list[psutil.Process]) -> int:
    """Proportional set size of a process tree: shared pages counted once in all."""
    total = 0
    for process in tree:
        try:
            total += process.memory_full_info().pss
        except psutil.Error:
            pass
    return total


def timed_command(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from start to exit, and the peak PSS of the process tree in MB."""
    peaks = [0]
    seconds = watched_command(command, env, 0.25, lambda tree: peaks.append(tree_pss(tree)))
    return seconds, max(peaks) / 2**20


def process_role(process: psutil.Process) -> str:
    """What a process of a local `augsbert label` run is: from a Ray worker's title (ray::...), the executable or the
    script it runs, or the name Ray's dashboard gives its module processes."""
    command = process.cmdline()
    scripts = {"dashboard.py": "dashboard", "monitor.py": "autoscaler monitor", "log_monitor.py": "log monitor",
               "default_worker.py": "worker (starting)", "bench.overhead": "plain loop"}
    titles = {"ray::MapWorker": "labeling actor", "ray::IDLE": "idle worker", "ray::DashboardAgent": "dashboard agent",
              "ray::RuntimeEnvAgent": "runtime env agent"}
    if command and command[0].startswith("ray::"):
        return titles.get(command[0].split("(")[0], "other worker")
    if "augsbert_ray.cli" in command:
        return "driver (augsbert label)"
    if command and Path(command[0]).name in ("gcs_server", "raylet"):
        return Path(command[0]).name
    if process.name().startswith("ray-dashboard-"):
        return "dashboard module"
    return next((scripts[Path(arg).name] for arg in command[1:] if Path(arg).name in scripts), process.name())


def census(command: list[str], env: dict[str, str]) -> dict:
    """Run ``command``; every 0.5 s read each process of its tree: the last CPU seconds, peak PSS and niceness per
    process, summed by role."""
    seen: dict[int, dict] = {}

    def sample(tree: list[psutil.Process]) -> None:
        for member in tree:
            try:
                with member.oneshot():
                    cpu = member.cpu_times()
                    record = seen.setdefault(member.pid, {"pss": 0})
                    # the last sight decides: a Ray worker takes its title only after it has started
                    record.update(role=process_role(member), nice=member.nice(), cpu=cpu.user + cpu.system)
                    record["pss"] = max(record["pss"], member.memory_full_info().pss)
            except psutil.Error:
                pass

    seconds = watched_command(command, env, 0.5, sample)
    roles: dict[str, dict] = {}
    for record in seen.values():
        role = roles.setdefault(record["role"], {"processes": 0, "cpu_seconds": 0.0, "peak_pss_mb": 0.0, "nice": record["nice"]})
        role["processes"] += 1
        role["cpu_seconds"] = round(role["cpu_seconds"] + record.get("cpu", 0.0), 1)
        role["peak_pss_mb"] = round(role["peak_pss_mb"] + record["pss"] / 2**20, 1)
    return {"seconds": round(seconds, 1), "roles": dict(sorted(roles.items(), key=lambda item: -item[1]["cpu_seconds"]))}


def ray_census(size: int, data_dir: Path, work: Path) -> dict:
    """Processes, CPU seconds and memory of the plain loop, then of the actor pool at Ray's default worker niceness and at niceness 0, on ``size`` pairs."""
    model, pairs, env = prepared_labeling(size, data_dir, work)
    label = [sys.executable, "-m", "augsbert_ray.cli", "label", "--model", str(model), "--input", str(pairs),
             "--cpus-per-actor", str(THREADS), "--batch-size", str(BATCH), "--actors", "1:2", "--output"]
    plain = [*PLAIN_LOOP, str(pairs), str(work / "census_plain"), str(model)]
    results: dict = {"pairs": size}
    for name, command, extra in (("plain", plain, {}), ("pool_default", [*label, str(work / "census_pool_default")], {}),
                                 ("pool_niceness_0", [*label, str(work / "census_pool_niceness_0")], {"RAY_worker_niceness": "0"})):
        results[name] = census(command, {**env, **extra})
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    return results


def prepared_labeling(size: int, data_dir: Path, work: Path) -> tuple[Path, Path, dict[str, str]]:
    """MiniLM with a fresh head (seed 0), ``size`` random STSb pairs, and the environment of the commands."""
    import torch
    from sentence_transformers import CrossEncoder

    import augsbert_ray as ar
    from bench.label_throughput import recombined_pairs, stsb_sentences  # imported here, not in the plain loop

    model = work / "minilm_fresh_head"
    if not model.exists():
        torch.manual_seed(0)
        CrossEncoder(ar.resolve_model("minilm"), num_labels=1).save_pretrained(str(model))
    pairs = work / f"pairs_{size}.parquet"
    pq.write_table(recombined_pairs(stsb_sentences(data_dir), size, seed=0), pairs)
    return model, pairs, {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp")}


def labeling(sizes: list[int], repeats: int, data_dir: Path, work: Path) -> dict:
    from bench.label_throughput import scores_by_id

    results = {}
    for size in sizes:
        model, pairs, env = prepared_labeling(size, data_dir, work)
        order = ("plain", "engine", "engine_ray")
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in order}
        for repeat in range(repeats):
            label = [sys.executable, "-m", "augsbert_ray.cli", "label", "--model", str(model), "--input", str(pairs),
                     "--cpus-per-actor", str(THREADS), "--batch-size", str(BATCH), "--output"]
            commands = {
                "plain": [*PLAIN_LOOP, str(pairs), str(work / f"plain_{size}_{repeat}"), str(model)],
                "engine": [*label, str(work / f"engine_{size}_{repeat}")],
                "engine_ray": [*label, str(work / f"engine_ray_{size}_{repeat}"), "--actors", "1:2"],
            }
            for name in order[repeat % 3:] + order[: repeat % 3]:  # each side first in turn
                runs[name].append(timed_command(commands[name], env))
                print(f"{size} pairs, {name}: {runs[name][-1][0]:.1f} s, peak PSS {runs[name][-1][1]:.0f} MB", flush=True)
        plain_scores = scores_by_id(work / f"plain_{size}_0" / "scores.parquet")
        results[str(size)] = {
            "seconds": {name: [round(s, 2) for s, _ in measured] for name, measured in runs.items()},
            "peak_pss_mb": {name: [round(m, 1) for _, m in measured] for name, measured in runs.items()},
        }
        for name in ("engine", "engine_ray"):
            speed = [plain[0] / engine[0] for plain, engine in zip(runs["plain"], runs[name])]
            memory = [engine[1] / plain[1] for plain, engine in zip(runs["plain"], runs[name])]
            results[str(size)][name] = {
                "speed_over_plain": [round(r, 3) for r in speed],
                "speed_median": round(statistics.median(speed), 3),
                "pss_over_plain_median": round(statistics.median(memory), 3),
                "max_abs_score_diff": float(np.max(np.abs(scores_by_id(work / f"{name}_{size}_0") - plain_scores))),
            }
    return results


def bm25(sentence_count: int, repeats: int, data_dir: Path) -> dict:
    import bm25s

    from augsbert_ray.sampling import SentencePool, bm25_neighbours, sample_bm25, search_depth, top_k_pairs
    from bench.corpus import edited_corpus

    pool = SentencePool(edited_corpus(sentence_count, data_dir=data_dir))
    none = np.zeros(0, dtype=np.int64)
    depth = search_depth(pool, 5, none)

    def project() -> tuple[np.ndarray, np.ndarray]:
        return sample_bm25(pool, 5, none, cpus=THREADS)

    hits = {}

    def plain() -> tuple[np.ndarray, np.ndarray]:
        tokens = bm25s.tokenize(pool.sentences, stopwords="en", show_progress=False)
        retriever = bm25s.BM25(backend="numba")
        retriever.index(tokens, show_progress=False)
        docs, scores = retriever.retrieve(tokens, k=depth, show_progress=False, n_threads=THREADS)
        hits["plain"] = scores.astype(np.float32)
        return top_k_pairs(pool, docs.astype(np.int64), scores.astype(np.float32), 5, none)

    sample = pool.sentences[:2000]
    bm25s.BM25(backend="numba").index(bm25s.tokenize(sample, show_progress=False), show_progress=False)
    sample_bm25(SentencePool(sample), 5, none)  # numba compiles its retrieval once per process: not timed for either
    timings: dict[str, list[float]] = {"project": [], "plain": []}
    candidates = {}
    for repeat in range(repeats):
        for name, run in ((("plain", plain), ("project", project)) if repeat % 2 == 0 else (("project", project), ("plain", plain))):
            start = time.perf_counter()
            candidates[name] = run()
            timings[name].append(time.perf_counter() - start)
            print(f"BM25 over {sentence_count} sentences, {name}: {timings[name][-1]:.1f} s", flush=True)
    speed = [p / q for p, q in zip(timings["plain"], timings["project"])]
    # each query's neighbours, untimed: where they differ from plain bm25s' only in which of the hits tied at the
    # depth are kept (bm25s' own choice, the project's lowest ids), every query's scores are the same
    project_scores = bm25_neighbours(pool.sentences, depth, len(pool), cpus=THREADS)[1]
    return {
        "sentences": sentence_count,
        "seconds": {name: [round(s, 2) for s in values] for name, values in timings.items()},
        "speed_project_over_plain": [round(r, 3) for r in speed],
        "speed_median": round(statistics.median(speed), 3),
        "candidates": int(len(candidates["project"][0])),
        "identical_candidates": bool(np.array_equal(np.sort(candidates["project"][0]), np.sort(candidates["plain"][0]))),
        "differing_candidates": int(len(np.setdiff1d(candidates["project"][0], candidates["plain"][0]))),
        "identical_neighbour_scores": bool(np.array_equal(project_scores, hits["plain"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2000,20000", help="pair counts to label; '' skips (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side per size (default: %(default)s)")
    parser.add_argument("--bm25-sentences", type=int, default=100_000, help="BM25 corpus size; 0 skips (default: %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here (e.g. bench/results/overhead.json)")
    parser.add_argument("--census", type=int, metavar="PAIRS", help="only (3): Ray's processes during an actor-pool run")
    parser.add_argument("--plain-loop", nargs=3, metavar=("INPUT", "OUTPUT", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:
        plain_loop(Path(args.plain_loop[0]), Path(args.plain_loop[1]), args.plain_loop[2])
        return

    work = Path(tempfile.mkdtemp(prefix="overhead_"))
    load_before = os.getloadavg()[0]
    if args.census:
        results = {"census": ray_census(args.census, args.data_dir, work)}
    else:
        sizes = [int(n) for n in args.sizes.split(",") if n]
        results = {"labeling": labeling(sizes, args.repeats, args.data_dir, work)} if sizes else {}
        if args.bm25_sentences:
            results["bm25"] = bm25(args.bm25_sentences, args.repeats, args.data_dir)
    results["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        print(f"written: {args.out}; work dir {work}")


if __name__ == "__main__":
    main()
