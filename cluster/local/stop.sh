#!/usr/bin/env bash
# Stop the cluster that start.sh started from STATE_DIR, and nothing else: every node was
# started in its own session (setsid), so its processes -- `ray start --block`, raylet, GCS,
# dashboard, agents and Ray workers -- share that session id, even after their parent died.
# TERM first, KILL after a grace period. Never `ray stop` (it would end every Ray on the host).
#
#   cluster/local/stop.sh [STATE_DIR]   (GRACE seconds before KILL, default 10)
set -uo pipefail

STATE="$(realpath -m "${1:-${AUGSBERT_CLUSTER_DIR:-/tmp/augsbert-cluster-${USER:-$(id -un)}}}")"
GRACE="${GRACE:-10}"
if [[ ! -f "$STATE/pids" ]]; then
    echo "stop.sh: nothing to stop ($STATE/pids not found)"
    exit 0
fi
source "$(dirname "$0")/private.sh"
require_private "$STATE"  # its pids name the sessions to kill

SESSIONS=$(awk '{print $2}' "$STATE/pids")

# members: PIDs whose session id is one of ours (zombies are already dead; no name matching).
members() {
    ps -e -o pid=,sid=,stat= | awk -v ours=" $(echo $SESSIONS) " '$3 !~ /^Z/ && index(ours, " " $2 " ") {print $1}'
}

signal_all() {
    local sig="$1" pids
    pids="$(members)"
    [[ -z "$pids" ]] && return 1
    kill "-$sig" $pids 2>/dev/null
    return 0
}

if signal_all TERM; then
    deadline=$((SECONDS + GRACE))
    while [[ -n "$(members)" ]] && ((SECONDS < deadline)); do sleep 0.5; done
    if signal_all KILL; then
        deadline=$((SECONDS + GRACE))
        while [[ -n "$(members)" ]] && ((SECONDS < deadline)); do sleep 0.5; done
    fi
fi
left="$(members)"
if [[ -n "$left" ]]; then
    echo "stop.sh: error: processes still alive: $left" >&2
    exit 1
fi
temp_dir="$(cat "$STATE/temp_dir" 2>/dev/null || true)"
[[ "$temp_dir" == /tmp/augray-* ]] && rm -rf "$temp_dir"
rm -f "$STATE/pids" "$STATE/cluster.env" "$STATE/temp_dir"
echo "stopped the cluster in $STATE"
