#!/usr/bin/env bash
# lookup.sh — the API and CLI figures: `annexctl lookup FILE` end to end
# (process start included) against the cost of starting /bin/true from the
# same harness; `annexctl lookup --batch` in paths/s; `annexctl dups`
# against `jdupes -r` on the same tree. Starts a real annexd on TREE with a
# temporary index and socket, waits until it is idle, measures, stops it.
#
# Usage: bench/lookup.sh [TREE (default /work/corpus/T)] [RUNS (default 3)]
set -euo pipefail
tree=$(cd "${1:-/work/corpus/T}" && pwd)
runs=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/annexd-bench.XXXXXX)
daemon_pid=
cleanup() {
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$repo" && go build -o "$work/annexd" ./cmd/annexd && go build -o "$work/annexctl" ./cmd/annexctl)
export ANNEXD_SOCKET=$work/run/annexd.sock
export XDG_CONFIG_HOME=$work/config
"$work/annexd" --index "$work/index.db" --socket "$ANNEXD_SOCKET" --no-default-ignores "$tree" 2>"$work/annexd.log" &
daemon_pid=$!
start=$(date +%s.%N)
until "$work/annexctl" status --wait --timeout 10m >/dev/null 2>&1; do
	kill -0 "$daemon_pid" || { cat "$work/annexd.log"; exit 1; }
	sleep 0.05
done
echo "indexed $tree in $(echo "$(date +%s.%N) - $start" | bc) s (daemon start to idle)" >&2

find "$tree" -type f >"$work/list"
python3 "$repo/bench/api_lookup.py" "$work" "$tree" "$runs" "$daemon_pid"
