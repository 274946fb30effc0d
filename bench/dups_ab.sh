#!/usr/bin/env bash
# dups_ab.sh — `annexctl dups` of two builds side by side in one run.
#
# Usage: bench/dups_ab.sh OLD_BIN NEW_BIN INDEX TREE [RUNS]
#   OLD_BIN, NEW_BIN: directories holding annexd and annexctl of each build.
#   INDEX: an index of TREE (from `annexd --exit-when-idle TREE`); each side
#   gets its own copy (a build with a newer schema migrates its copy; that
#   start is timed). RUNS (default 5) warm calls per side, alternating.
# For each side it prints: the migration start, the first call after each
# of two daemon starts (the mapped index is then faulted in), the warm
# calls' wall time, annexctl's CPU and the daemon's CPU per call, and
# whether the outputs of both builds are identical for several flag sets.
set -euo pipefail
old=$1 new=$2 index=$3 tree=$4 runs=${5:-5}
work=$(mktemp -d /tmp/dups-ab.XXXXXX)
trap 'for s in old new; do [ -f "$work/$s.pid" ] && kill "$(cat "$work/$s.pid")" 2>/dev/null; done; rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

bin() { if [ "$1" = old ]; then echo "$old"; else echo "$new"; fi; }
sock() { echo "$work/$1/run/annexd.sock"; }
ctl() { local s=$1; shift; XDG_RUNTIME_DIR=$work/$s/run ANNEXD_SOCKET=$(sock "$s") "$(bin "$s")/annexctl" "$@"; }

start() {
	local s=$1
	XDG_CONFIG_HOME=$work/$s/config XDG_STATE_HOME=$work/$s/state XDG_RUNTIME_DIR=$work/$s/run \
		setsid "$(bin "$s")/annexd" --socket "$(sock "$s")" --no-default-ignores --index "$work/$s.db" "$tree" \
		>>"$work/$s.log" 2>&1 &
	echo $! >"$work/$s.pid"
	until ctl "$s" status --wait --timeout 30m >/dev/null 2>&1; do sleep 0.05; done
}
stop() {
	local pid
	pid=$(cat "$work/$1.pid")
	kill "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	rm -f "$work/$1.pid"
}
# timed S: wall seconds, annexctl CPU seconds, daemon CPU seconds of one call.
timed() {
	local s=$1 pid t0 c0 out
	pid=$(cat "$work/$s.pid")
	c0=$(ticks "$pid")
	t0=$(date +%s.%N)
	out=$( { XDG_RUNTIME_DIR=$work/$s/run ANNEXD_SOCKET=$(sock "$s") /usr/bin/time -f '%U %S' "$(bin "$s")/annexctl" dups >/dev/null; } 2>&1 | tail -1)
	echo "$t0 $(date +%s.%N) $out $c0 $(ticks "$pid")" |
		awk -v hz="$hz" '{printf "%.3f %.3f %.3f\n", $2-$1, $3+$4, ($6-$5)/hz}'
}

for s in old new; do
	mkdir -p "$work/$s/run" "$work/$s/config" "$work/$s/state"
	chmod 700 "$work/$s/run"
	cp "$index" "$work/$s.db"
done
echo "load at start: $(load)"
for s in old new; do
	t0=$(date +%s.%N)
	start "$s"
	echo "$s: first start (scan, migration if any) $(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2-$1}') s"
	stop "$s"
done
for r in 1 2; do
	for s in old new; do
		start "$s"
		echo "$s: first call after start $r: $(timed "$s") (wall, annexctl CPU, daemon CPU)"
		stop "$s"
	done
done
start old
start new
for s in old new; do timed "$s" >/dev/null; done # warm both
declare -A rows
for ((i = 0; i < runs; i++)); do
	for s in old new; do rows[$s]+="$(timed "$s")"$'\n'; done
done
for s in old new; do
	printf '%s' "${rows[$s]}" | sort -n | awk -v s="$s" '{w[NR]=$1; c[NR]=$2; d[NR]=$3; all=all sprintf("%.2f ", $1)}
		END {m=int((NR+1)/2); printf "%s: warm dups median %.2f s (%s) annexctl CPU %.2f s, daemon CPU %.2f s\n", s, w[m], all, c[m], d[m]}'
done
same=yes
for flags in "" "--json" "-z" "--bytes" "--min-size 1M" "--min-size 0" "--limit 3" "--limit 3 --json" "--all"; do
	# shellcheck disable=SC2086
	a=$(ctl old dups $flags | md5sum) b=$(ctl new dups $flags | md5sum)
	if [ "$a" != "$b" ]; then
		echo "outputs differ: dups $flags"
		same=no
	fi
done
echo "outputs identical for every flag set: $same"
echo "load at end: $(load)"
