#!/usr/bin/env bash
# In-domain runs missing from docs/RESULTS.md (QUEUE; all committed now, so it skips them), one --part at a time (each part is one resumable
# `augsbert run`; a part copies the cross-encoder of a finished part of its seed on this machine). Stopped anywhere,
# rerun it: finished parts are skipped and the stopped one resumes from its last training state (on the same
# machine: a new machine starts the part again). Then collect:
#   bench/reproduce_queue.sh
#   mkdir -p bench/results/reproduce_runs/RUN && cp runs/reproduce/RUN/{metrics.json,spec.yaml,host.json} ...
#   .venv/bin/python -m bench.reproduce --collect --runs bench/results/reproduce_runs --beside bench/results/reproduce_best_teacher_runs
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
RUNS="${RUNS:-runs/reproduce}"
# "experiment seed part...": three parts, each short enough to finish in a session even on cores shared with other work
QUEUE=(
    "mrpc 44 lexical semantic kde"
)
for item in "${QUEUE[@]}"; do
    read -r experiment seed parts <<< "$item"
    for part in $parts; do
        # committed by an earlier session (perhaps on another machine): not run again
        if compgen -G "bench/results/reproduce_runs/$experiment-full-seed${seed}_$part-*/metrics.json" > /dev/null; then
            echo "$experiment seed $seed, $part part: committed in bench/results/reproduce_runs, skipped"
            continue
        fi
        echo "$(date '+%F %T') $experiment seed $seed, $part part"
        # per-part tables go to /tmp: docs/RESULTS.md is made from the committed runs only
        "$PYTHON" -m bench.reproduce --only "$experiment" --seeds "$seed" --part "$part" --runs "$RUNS" \
            --results /tmp/reproduce_part_RESULTS.md --json /tmp/reproduce_part.json
    done
done
