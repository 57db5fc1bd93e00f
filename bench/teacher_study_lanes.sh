#!/usr/bin/env bash
# Cells of the teacher study in parallel lanes, for a GPU machine: one GPU's small-batch fits leave most of it idle,
# so each lane is a process of its own with its own local Ray (RAY_TMPDIR) that sees the whole GPU, and runs its
# cells one after the other. Lane N writes OUTDIR/laneN.json and laneN.log, its fits under $WORK (default
# OUTDIR/work); merge the lanes into the study's results with
#   .venv/bin/python -m bench.teacher_study --merge OUTDIR/lane*.json
# Usage: bench/teacher_study_lanes.sh OUTDIR "TASK:SEED TASK:SEED" "TASK:SEED" ... [-- bench.teacher_study arguments]
#   bench/teacher_study_lanes.sh /tmp/lanes "bws_in_topic:42 bws_in_topic:43" "mrpc:42" -- --gpu --no-labeling-speed
set -euo pipefail
out="$(realpath -m "$1")"; shift
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
lanes=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do lanes+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the rest goes to every bench.teacher_study
mkdir -p "$out"
for index in "${!lanes[@]}"; do
    (
        export RAY_TMPDIR="/tmp/ray-lane$index"  # short: Ray's socket paths have a length limit
        for cell in ${lanes[$index]}; do
            "$PYTHON" -m bench.teacher_study --task "${cell%:*}" --seeds "${cell#*:}" --work "${WORK:-$out/work}" \
                --results "$out/lane$index.json" "$@" || echo "lane $index: $cell failed" >&2
        done
    ) > "$out/lane$index.log" 2>&1 &
done
wait
echo "lanes done: $(ls "$out"/lane*.json 2>/dev/null | tr '\n' ' ')"
