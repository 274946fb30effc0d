#!/usr/bin/env bash
# idle.sh — what an idle daemon costs: CPU seconds a minute and system calls
# a second while nothing changes (not run by CI).
#
# annexd watches TREE (20,000 files by default, generated once with
# bench/gen_tree.py under /tmp) with the default configuration, the way a
# new user runs it: audit and everything else as shipped. Once the first
# scan is done (`annexctl status --wait`), the script waits SETTLE seconds
# (30), then measures, one after the other:
#
#   1. CPU: user+system seconds of the process over WINDOW seconds (60),
#      from /proc/PID/stat, scaled to a minute;
#   2. system calls: `strace -c -f -p PID` over WINDOW seconds, scaled to
#      a second, with the calls made most.
#
# strace slows what it traces, so the CPU figure is taken without it.
# The daemon runs in a mount namespace of its own (unshare, as root), so
# that file systems others mount and unmount on a shared machine do not
# wake it: annexd follows the mount table, and each change is an event
# it reads. NOUNSHARE=1 runs it in the machine's namespace.
# Goal (issue 38): ≤ 0.05 CPU-s a minute and ≤ 10 system calls a second.
# BASE=REV builds annexd of that git revision too and measures both, one
# after the other, for a before/after side by side.
#
# Usage: bench/idle.sh [TREE (default /tmp/annexd-idle-tree)] [WINDOW] [SETTLE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-/tmp/annexd-idle-tree}
window=${2:-60}
settle=${3:-30}
if [[ ! -d $tree ]]; then
	echo "generating $tree (20,000 files)" >&2
	python3 "$repo/bench/gen_tree.py" "$tree" --files 20000 --dirs 50 --subdirs 20 >&2
fi
tree=$(cd "$tree" && pwd)
work=$(mktemp -d /tmp/annexd-idle-bench.XXXXXX)
chmod 700 "$work"
daemon_pid=
stop_daemon() {
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
		daemon_pid=
	fi
}
trap 'stop_daemon; rm -rf "$work"' EXIT

builds=(new)
(cd "$repo" && go build -o "$work/new/" ./cmd/annexd ./cmd/annexctl)
if [[ -n ${BASE:-} ]]; then
	mkdir -p "$work/base-src"
	git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/base/" ./cmd/annexd ./cmd/annexctl)
	builds=(base new)
fi

tck=$(getconf CLK_TCK)
# cpu PID: user+system clock ticks of a process so far.
cpu() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }

measure() {
	local b=$1
	local state=$work/$b-state
	export XDG_CONFIG_HOME=$work/$b-config XDG_STATE_HOME=$state XDG_RUNTIME_DIR=$work/$b-xdgrun
	export ANNEXD_SOCKET=$work/$b-run/annexd.sock
	mkdir -p -m 700 "$work/$b-run" "$XDG_RUNTIME_DIR" "$XDG_CONFIG_HOME"
	local wrap=()
	if [[ -z ${NOUNSHARE:-} ]]; then
		wrap=(unshare --mount --propagation private)
	fi
	"${wrap[@]}" "$work/$b/annexd" --socket "$ANNEXD_SOCKET" "$tree" 2>"$work/$b.log" &
	daemon_pid=$!
	"$work/$b/annexctl" status --wait >/dev/null
	sleep "$settle"
	local c0 c1
	c0=$(cpu "$daemon_pid")
	sleep "$window"
	c1=$(cpu "$daemon_pid")
	strace -c -f -q -p "$daemon_pid" -o "$work/$b.strace" &
	local st=$!
	sleep "$window"
	kill -INT "$st"
	wait "$st" 2>/dev/null || true
	stop_daemon
	local calls
	calls=$(awk '$NF == "total" {print $4}' "$work/$b.strace")
	awk -v b="$b" -v c="$((c1 - c0))" -v t="$tck" -v w="$window" -v n="${calls:-0}" 'BEGIN {
		printf "%s: %.3f CPU-s a minute, %.1f system calls a second\n", b, c / t * 60 / w, n / w
	}'
	# The five calls made most, with their count a second.
	awk '$1 ~ /^[0-9.]+$/ && $NF != "total" {print $4, $NF}' "$work/$b.strace" |
		sort -rn | head -5 | awk -v w="$window" '{printf "    %-20s %.1f/s\n", $2, $1 / w}'
}

echo "tree: $tree, $(find "$tree" -type f | wc -l) files; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "settle ${settle}s after the first scan, then ${window}s of CPU and ${window}s of strace" >&2
for b in "${builds[@]}"; do
	measure "$b"
done
