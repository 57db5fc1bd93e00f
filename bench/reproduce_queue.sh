#!/usr/bin/env bash
# The in-domain runs still missing from docs/RESULTS.md, one --part at a time (each part is one resumable
# `augsbert run`; a kde part copies its finished rest part's cross-encoder). Stopped anywhere, rerun it: finished
# parts are skipped and the stopped one resumes from its last training state. Then collect:
#   bench/reproduce_queue.sh
#   mkdir -p bench/results/reproduce_runs/RUN && cp runs/reproduce/RUN/{metrics.json,spec.yaml,host.json} ...
#   .venv/bin/python bench/reproduce.py --collect --runs bench/results/reproduce_runs
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
RUNS="${RUNS:-runs/reproduce}"
QUEUE=(
    "bws_cross_topic 43" "mrpc 43" "mrpc 44"
)
for item in "${QUEUE[@]}"; do
    read -r experiment seed <<< "$item"
    for part in rest kde; do
        echo "$(date '+%F %T') $experiment seed $seed, $part part"
        # per-part tables go to /tmp: docs/RESULTS.md is made from the committed runs only
        "$PYTHON" bench/reproduce.py --only "$experiment" --seeds "$seed" --part "$part" --runs "$RUNS" \
            --results /tmp/reproduce_part_RESULTS.md --json /tmp/reproduce_part.json
    done
done
