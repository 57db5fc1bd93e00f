# Sourced by start.sh and stop.sh. The state dir holds the cluster's token and the session ids stop.sh
# kills, under a predictable default path (/tmp/augsbert-cluster-$USER): another user who made or can
# write that directory could read the token or plant session ids, so only a private one is used.

# require_private PATH: PATH is owned by this user, with no access for group or others; else exit 2.
require_private() {
    local path="$1" owner mode
    owner="$(stat -c %u -- "$path")"
    mode="$(stat -c %a -- "$path")"
    if [[ "$owner" != "$(id -u)" ]]; then
        echo "$(basename "$0"): error: $path is owned by uid $owner, not by you (uid $(id -u)); use a state dir of your own" >&2
        exit 2
    fi
    if (( 8#$mode & 8#077 )); then
        echo "$(basename "$0"): error: $path has mode $mode: group or others may access it; chmod go= $path (or use another state dir)" >&2
        exit 2
    fi
}
