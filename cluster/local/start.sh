#!/usr/bin/env bash
# A real multi-node Ray cluster on one host: a head (no CPUs, like the KubeRay head) and two
# worker nodes, each its own `ray start --address` with its own custom resource. Everything
# binds to 127.0.0.1 and token authentication is on. Every node runs `ray start --block` in its
# own session (setsid); the session ids go to $STATE/pids so that stop.sh ends exactly these
# processes and nothing else (never `ray stop`: other Ray instances may run on this host).
#
#   cluster/local/start.sh [STATE_DIR]        default: $AUGSBERT_CLUSTER_DIR or /tmp/augsbert-cluster-$USER
#                                             (made mode 700; an existing one must be yours and private)
#   source STATE_DIR/cluster.env              RAY_AUTH_*, AUGSBERT_RAY_ADDRESS, AUGSBERT_DASHBOARD
#   cluster/local/stop.sh [STATE_DIR]
#
# Knobs (environment): RAY (the ray executable), WORKER_CPUS (per worker, default 2),
# DASHBOARD_PORT and GCS_PORT (default: free ports), START_TIMEOUT (seconds, default 300).
set -euo pipefail

STATE="$(realpath -m "${1:-${AUGSBERT_CLUSTER_DIR:-/tmp/augsbert-cluster-${USER:-$(id -un)}}}")"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/private.sh"
if [[ ! -e "$STATE" ]]; then
    mkdir -p -- "$(dirname "$STATE")"
    mkdir -m 700 -- "$STATE"  # fails, and so stops here, if another user made it since the test above
fi
require_private "$STATE"
if [[ -e "$STATE/auth_token" ]]; then
    require_private "$STATE/auth_token"  # reused below: it must not be readable by anyone else
fi
ROOT="$(cd "$HERE/../.." && pwd)"
RAY="${RAY:-$ROOT/.venv/bin/ray}"
[[ -x "$RAY" ]] || RAY="$(command -v ray)" || { echo "start.sh: error: no ray executable (set RAY=...)" >&2; exit 2; }
PYTHON="$(dirname "$RAY")/python"
WORKER_CPUS="${WORKER_CPUS:-2}"
START_TIMEOUT="${START_TIMEOUT:-300}"

if [[ -s "$STATE/pids" ]]; then
    echo "start.sh: error: $STATE/pids exists; a cluster from this state dir may be running (run stop.sh first)" >&2
    exit 2
fi
mkdir -p "$STATE/logs"
# Ray puts unix sockets under the temp dir: keep its path short (sockets are limited to 107 bytes).
TEMP_DIR="$(mktemp -d /tmp/augray-XXXXXX)"
echo "$TEMP_DIR" > "$STATE/temp_dir"

# Ray 2.60's `ray start` maps --node-ip-address 127.0.0.1 to the host's own address
# (services.resolve_ip_for_localhost), so the nodes register under that address; ask Ray for it.
IP="$("$PYTHON" -c 'from ray._private.services import get_node_ip_address; print(get_node_ip_address())')"
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GCS_PORT="${GCS_PORT:-$(free_port)}"
DASHBOARD_PORT="${DASHBOARD_PORT:-$(free_port)}"

# Token authentication: one random token per cluster, in a file only this user can read.
if [[ ! -s "$STATE/auth_token" ]]; then
    (umask 077 && "$PYTHON" -c 'import secrets; print(secrets.token_hex(32), end="")' > "$STATE/auth_token")
fi
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$STATE/auth_token"
unset RAY_AUTH_TOKEN RAY_ADDRESS
# Job entrypoints (`augsbert`, `python`) resolve to the same environment as the nodes.
export PATH="$(dirname "$RAY"):$PATH"
export RAY_USAGE_STATS_ENABLED=0
# A busy host can take minutes to bring a raylet up; Ray's own wait is 60 s by default.
export RAY_raylet_start_wait_time_s="${RAY_raylet_start_wait_time_s:-$START_TIMEOUT}"

# start_node NAME ARGS...: `ray start --block` in a new session; records "NAME SID" in $STATE/pids.
start_node() {
    local name="$1"; shift
    # Each node its own temp dir, as on separate hosts: a shared one lets one node's runtime-env
    # agent delete a job's working_dir that another node's driver is running in.
    mkdir -p "$TEMP_DIR/$name"
    setsid "$RAY" start --block --node-ip-address "$IP" --temp-dir "$TEMP_DIR/$name" \
        --dashboard-agent-listen-port "$(free_port)" --metrics-export-port "$(free_port)" \
        --disable-usage-stats "$@" > "$STATE/logs/$name.log" 2>&1 < /dev/null &
    echo "$name $!" >> "$STATE/pids"
}

# wait_for_nodes N: until N nodes are alive (or fail with the logs' tails).
wait_for_nodes() {
    local want="$1" deadline=$((SECONDS + START_TIMEOUT))
    until "$PYTHON" - "$IP:$GCS_PORT" "$want" <<'EOF' 2>/dev/null
import sys
from ray._raylet import GcsClient
nodes = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=5)
alive = [n for n in nodes.values() if n.state == 0]  # 0 = ALIVE
sys.exit(0 if len(alive) >= int(sys.argv[2]) else 1)
EOF
    do
        local name pid
        while read -r name pid; do
            if ! kill -0 "$pid" 2>/dev/null; then
                echo "start.sh: error: node $name exited; its log:" >&2
                tail -n 20 "$STATE/logs/$name.log" >&2
                exit 1
            fi
        done < "$STATE/pids"
        if ((SECONDS > deadline)); then
            echo "start.sh: error: $want node(s) not up after ${START_TIMEOUT}s; logs in $STATE/logs" >&2
            tail -n 20 "$STATE"/logs/*.log >&2 || true
            exit 1
        fi
        sleep 2
    done
}

start_node head --head --port "$GCS_PORT" --num-cpus 0 --num-gpus 0 \
    --include-dashboard true --dashboard-host 127.0.0.1 --dashboard-port "$DASHBOARD_PORT" \
    --ray-client-server-port "$(free_port)"
wait_for_nodes 1
# One node at a time, so that a failure names its node.
start_node worker-a --address "$IP:$GCS_PORT" --num-cpus "$WORKER_CPUS" --num-gpus 0 --resources '{"node_a": 1}'
wait_for_nodes 2
start_node worker-b --address "$IP:$GCS_PORT" --num-cpus "$WORKER_CPUS" --num-gpus 0 --resources '{"node_b": 1}'
wait_for_nodes 3

cat > "$STATE/cluster.env" <<EOF
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH=$STATE/auth_token
export AUGSBERT_RAY_ADDRESS=$IP:$GCS_PORT
export AUGSBERT_DASHBOARD=http://127.0.0.1:$DASHBOARD_PORT
EOF
echo "ray cluster up: 3 nodes (head + worker-a, worker-b with $WORKER_CPUS CPUs each)"
echo "  gcs:       $IP:$GCS_PORT          (augsbert label/run --address $IP:$GCS_PORT)"
echo "  dashboard: http://127.0.0.1:$DASHBOARD_PORT   (augsbert submit/status/logs --address, ray job submit --address)"
echo "  token:     $STATE/auth_token   (source $STATE/cluster.env)"
echo "  stop:      $HERE/stop.sh $STATE"
