#!/usr/bin/env bash
# The teacher study's remaining cells and the reproduction with the best-on-dev teacher and the MiniLM student
# (docs/RESULTS_BEST_TEACHER.md), one resumable step at a time, in the order of QUEUE. For an in-domain seed, the
# study cell (bench.teacher_study) comes first, and its fitted teachers are given to that seed's parts. The
# teacher of each task is fixed once in COMMITTED/choice.json, from the study's `best_on_dev` (dev scores only); the
# transfer experiments take STSb-1k's. A part whose study fits are not on this machine (the cell was committed from
# another) fits its teacher on its own gold train split, or copies it from a finished sibling part here.
# Parts already committed (perhaps by another machine) are skipped; a stopped step resumes from its last training
# state on the same machine. A finished part's metrics.json, spec.yaml and host.json are copied into COMMITTED; the
# study's cells accumulate in bench/results/teacher_study.json.
# Arguments, if any, replace QUEUE (e.g. one lane of a GPU machine), and REPRODUCE_ARGS goes to every
# `python -m bench.reproduce` (e.g. --gpu).
#   make models && bench/reproduce_best_teacher.sh
#   REPRODUCE_ARGS=--gpu RAY_TMPDIR=/tmp/ray-lane1 bench/reproduce_best_teacher.sh "mrpc 43 lexical kde" &
#   .venv/bin/python -m bench.reproduce --collect --runs bench/results/reproduce_best_teacher_runs \
#       --results docs/RESULTS_BEST_TEACHER.md --json bench/results/reproduce_best_teacher.json
#   .venv/bin/python -m bench.reproduce --collect --runs bench/results/reproduce_runs \
#       --beside bench/results/reproduce_best_teacher_runs      # RESULTS.md's side-by-side tables
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
RUNS="${RUNS:-runs/reproduce_best_teacher}"
COMMITTED=bench/results/reproduce_best_teacher_runs
STUDY=runs/teacher_study
# "experiment seed part...": an in-domain seed is lexical (BM25, RS) + kde; a transfer seed is one run ("whole")
# first each experiment's seed 42 (a new column of the results page each), then the other seeds
QUEUE=(
    "stsb_1k 43 lexical kde"
    "bws_cross_topic 42 lexical kde"
    "bws_in_topic 42 lexical kde"
    "mrpc 42 lexical kde"
    "transfer_stsb_bws 42 whole"
    "transfer_stsb_mrpc 42 whole"
    "bws_cross_topic 43 lexical kde"
    "stsb_1k 44 lexical kde"
    "bws_cross_topic 44 lexical kde"
    "bws_in_topic 43 lexical kde"
    "mrpc 43 lexical kde"
    "transfer_stsb_bws 43 whole"
    "transfer_stsb_mrpc 43 whole"
    "bws_in_topic 44 lexical kde"
    "mrpc 44 lexical kde"
    "transfer_stsb_bws 44 whole"
    "transfer_stsb_mrpc 44 whole"
)
[ $# -gt 0 ] && QUEUE=("$@")
read -ra more <<< "${REPRODUCE_ARGS:-}"
# labeling and fits at bf16 on a GPU or a CPU with bf16 instructions, else at fp32 (augsbert refuses CPU bf16 there:
# 8-45 times slower, bench.cpu_bf16); every run: small shards and a training state every 50 steps (little work
# lost when stopped, e.g. an mpnet teacher's fit at a session end)
if [[ " ${more[*]} " == *" --gpu "* ]] || "$PYTHON" -c "import sys; from augsbert_ray.runtime import cpu_has_bf16; sys.exit(not cpu_has_bf16())"; then
    BF16=true; COMMON=(labeling.precision=bf16 training.bf16=true)
else
    BF16=false; COMMON=()
fi
COMMON+=(labeling.shard_rows=5000 training.checkpoint_every=50)

teacher_settings() {  # TASK MODELS: the task's chosen teacher, as bench.teacher_study's reproduction_settings
    "$PYTHON" - "$1" "$2" "$COMMITTED/choice.json" <<'EOF'
import sys
from pathlib import Path
from bench.teacher_study import reproduction_settings
print(*reproduction_settings(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
EOF
}

for item in "${QUEUE[@]}"; do
    read -r experiment seed parts <<< "$item"
    case "$experiment" in transfer_*) task=stsb_1k ;; *) task="$experiment" ;; esac
    if [ "$task" = "$experiment" ]; then  # the study cell (fits at the parts' precision), then its fitted teachers
        "$PYTHON" -m bench.teacher_study --task "$task" --seeds "$seed" --work "$STUDY" --set training.bf16=$BF16
    fi
    # given the study cell's fits where they were made on this machine (a transfer fits its own on all of STSb)
    read -ra settings <<< "$(teacher_settings "$task" "$STUDY/$experiment-seed$seed/models")"
    for part in $parts; do
        if [ "$part" = whole ]; then suffix=""; part_args=()
        else suffix="_$part"; part_args=(--part "$part"); fi
        if [ "$experiment" = transfer_stsb_mrpc ]; then  # the teacher of transfer STSb->BWS: the same STSb fit
            for models in "$RUNS"/transfer_stsb_bws-full-seed"$seed"-*/models; do
                read -ra settings <<< "$(teacher_settings "$task" "$models")"
            done
        fi
        part_settings=("${settings[@]}")
        if [ "$part" = kde ]; then  # the bi-encoder scored beside a teacher is a shared row: the lexical part's
            part_settings=()
            for setting in "${settings[@]}"; do
                [ "$setting" = evaluation.teacher_bi_encoder=true ] || part_settings+=("$setting")
            done
        fi
        pattern="$experiment-full-seed${seed}$suffix-*"
        if compgen -G "$COMMITTED/$pattern/metrics.json" > /dev/null; then
            echo "$experiment seed $seed $part: committed in $COMMITTED, skipped"
            continue
        fi
        echo "$(date '+%F %T') $experiment seed $seed $part: ${part_settings[*]}"
        # per-part tables go to /tmp: the results page is made from the committed runs only
        "$PYTHON" -m bench.reproduce --only "$experiment" --seeds "$seed" "${part_args[@]}" --runs "$RUNS" \
            --set "${part_settings[@]}" "${COMMON[@]}" "${more[@]}" \
            --results "/tmp/reproduce_best_teacher_part.$$.md" --json "/tmp/reproduce_best_teacher_part.$$.json"
        for run in $RUNS/$pattern; do
            [ -f "$run/metrics.json" ] || continue
            mkdir -p "$COMMITTED/$(basename "$run")"
            cp "$run"/{metrics.json,spec.yaml,host.json} "$COMMITTED/$(basename "$run")/"
        done
    done
done
