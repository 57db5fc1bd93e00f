#!/usr/bin/env bash
# The GPU path of a whole run, on a lent GPU machine: `augsbert run` of JOB with use_gpu fits, GPU labeling actors and
# bf16 (training and labeling), SIGKILLed with its whole process tree (driver and embedded Ray) once the teacher's
# fit has passed step KILL_AT (a training state every 50 steps), then `augsbert run --resume` to the end. Prints the
# step the fit went on from, the metrics and each stage's wall time; logs and metrics.json go to $OUT (or ./gpu_check).
# Needs the packages and data importable as on a CPU machine (PYTHONPATH, AUGSBERT_DATA_DIR): on a lent machine
# of this workplace, bench/device_kit.sh brings them. docs/BENCHMARKS.md has what this printed.
#   bench/gpu_resume_check.sh [JOB] [KILL_AT] [SETTING...]    (SETTINGs as --set takes them, after the GPU ones)
set -euo pipefail
cd "$(dirname "$0")/.."
JOB="${1:-jobs/stsb_indomain_bm25.yaml}"
KILL_AT="${2:-120}"
shift $(( $# < 2 ? $# : 2 ))
OUT="${OUT:-gpu_check}"
PYTHON="${PYTHON:-python3}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
runs="$(mktemp -d /tmp/gpu_check.XXXX)"
settings=(output_dir="$runs" training.use_gpu=true training.bf16=true training.checkpoint_every=50
          training.cpus_per_worker=4 labeling.precision=bf16 labeling.gpus_per_actor=0.5 labeling.cpus_per_actor=4
          evaluation.gpus=0.5 "$@")
overrides=(); for setting in "${settings[@]}"; do overrides+=(--set "$setting"); done
"$PYTHON" -c "import torch; print('device:', torch.cuda.get_device_name(), '| torch', torch.__version__)"

RAY_TMPDIR=/tmp/ray-first "$PYTHON" -m augsbert_ray.cli run "$JOB" "${overrides[@]}" > "$OUT/first.log" 2>&1 &
first=$!
# the teacher (the run's first fit) past KILL_AT: the kill lands between two training states
until grep -qE "^fit [a-z_]+: step ([0-9]+)/" "$OUT/first.log" \
        && [ "$(grep -oE '^fit [a-z_]+: step [0-9]+' "$OUT/first.log" | tail -1 | grep -oE '[0-9]+$')" -ge "$KILL_AT" ]; do
    kill -0 "$first" 2> /dev/null || { echo "the first run ended before step $KILL_AT:"; tail -30 "$OUT/first.log"; exit 1; }
    sleep 1
done
grep -E "^fit " "$OUT/first.log" | tail -1
"$PYTHON" - "$first" <<'EOF'
import sys, psutil
root = psutil.Process(int(sys.argv[1]))
tree = [root, *root.children(recursive=True)]
for process in tree:
    try:
        process.kill()
    except psutil.Error:
        pass
psutil.wait_procs(tree, timeout=30)
print(f"killed the run: {len(tree)} processes")
EOF
run_dir="$(ls -d "$runs"/*/ | head -1)"
RAY_TMPDIR=/tmp/ray-second "$PYTHON" -m augsbert_ray.cli run --resume "$run_dir" > "$OUT/second.log" 2>&1
grep -hE "resuming from step|no training state" "$run_dir/run.log" | sed 's/^.*\(resuming\|the latest\)/\1/' | head -3
cp "$run_dir"/{metrics.json,run.log} "$OUT/"
"$PYTHON" - "$run_dir/metrics.json" <<'EOF'
import json, sys
metrics = json.load(open(sys.argv[1]))
print("dev ", {name: round(score, 2) for name, score in metrics["dev"].items()})
print("test", {name: round(score, 2) for name, score in metrics["test"].items()})
print("wall seconds", metrics["wall_seconds"])
EOF
