"""What cutting a CSV input into shards costs `augsbert label` before any labeling: the scan for record and line ends
(plan_shards) against arrow reading the same file whole, side by side in one run, and the plan's peak memory
(tracemalloc: numpy's arrays and Python objects; the file is memory-mapped, not read).

Two files of the same pairs: written with minimal quoting (a field quoted only when it holds a comma, a quote or a
line end, as pandas and csv.writer write by default) and with every field quoted (the quote-heavy worst case: two
quoted fields and two escaped quotes per record).

    .venv/bin/python -m bench.csv_plan                 # 1,000,000 pairs
    .venv/bin/python -m bench.csv_plan --pairs 200000
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
import tracemalloc
from pathlib import Path

import pyarrow.csv as pacsv

from augsbert_ray.labeling import plan_shards


def write_pairs(path: Path, pairs: int, quoting: int) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=quoting)
        writer.writerow(["sentence1", "sentence2", "label"])
        for index in range(pairs):
            second = f'a "quoted" word, then\ntwo lines {index}' if index % 10 == 0 else f"another sentence {index}"
            writer.writerow([f"a sentence about {index} things", second, "0.5"])


def best_of(runs: int, work) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--shard-rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="best of this many timings of each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for name, quoting in (("minimal quoting", csv.QUOTE_MINIMAL), ("every field quoted", csv.QUOTE_ALL)):
            path = Path(work) / "pairs.csv"
            write_pairs(path, args.pairs, quoting)
            megabytes = path.stat().st_size / 1e6
            shards = plan_shards([str(path)], "csv", ("sentence1", "sentence2"), args.shard_rows)
            plan = best_of(args.runs, lambda: plan_shards([str(path)], "csv", ("sentence1", "sentence2"), args.shard_rows))
            multiline = pacsv.ParseOptions(newlines_in_values=True)
            read = best_of(args.runs, lambda: pacsv.read_csv(path, parse_options=multiline))
            tracemalloc.start()
            plan_shards([str(path)], "csv", ("sentence1", "sentence2"), args.shard_rows)
            peak = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            print(f"{name}: {args.pairs:,} pairs, {megabytes:.0f} MB, {len(shards)} shards; plan {plan:.2f} s "
                  f"({megabytes / plan:.0f} MB/s), arrow read_csv {read:.2f} s; plan / read {plan / read:.2f}; "
                  f"plan's peak memory {peak:.0f} MB", flush=True)


if __name__ == "__main__":
    main()
