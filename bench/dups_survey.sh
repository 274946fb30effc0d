#!/usr/bin/env bash
# dups_survey.sh — what the survey of block sharing costs `annexctl dups`,
# against a build without it, side by side in one run.
#
# Usage: bench/dups_survey.sh OLD_BIN NEW_BIN [GROUPS] [RUNS]
#   OLD_BIN, NEW_BIN: directories holding annexd and annexctl of each build.
#   GROUPS (default 50000): groups of two copies of a 4 KiB file, written
#   each on its own, so 2 × GROUPS duplicate members, on a fresh XFS image
#   (reflink=1) mounted under /tmp (needs root). RUNS (default 5) calls
#   of each kind, alternating between the builds.
# Both daemons index the same tree, each into its own index. It prints, per build: the first `dups` after a start, warm `dups` (median),
# and for the new build `dups --resurvey` (every member's extent map read
# again: what a listing costs with no survey kept) and the first `dups`
# after a restart (the surveys come from the index); with annexctl's CPU and
# the daemon's CPU per call. Figures are wall seconds; take them as ratios.
set -euo pipefail
old=$1 new=$2 groups=${3:-50000} runs=${4:-5}
work=$(mktemp -d /tmp/dups-survey.XXXXXX)
mnt=$work/mnt
cleanup() {
	for s in old new; do [ -f "$work/$s.pid" ] && kill "$(cat "$work/$s.pid")" 2>/dev/null; done
	sleep 0.5
	mountpoint -q "$mnt" && umount "$mnt"
	rm -rf "$work"
}
trap cleanup EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

truncate -s $((groups * 16 / 1024 + 400))M "$work/img"
mkfs.xfs -q -f -m reflink=1 "$work/img"
mkdir -p "$mnt"
mount -o loop "$work/img" "$mnt"
tree=$mnt/tree
python3 - "$tree" "$groups" <<'EOF'
import os, sys
tree, groups = sys.argv[1], int(sys.argv[2])
for g in range(groups):
    d = os.path.join(tree, "d%03d" % (g % 500))
    os.makedirs(d, exist_ok=True)
    data = os.urandom(4096)
    for c in ("a", "b"):
        with open(os.path.join(d, "%s%06d" % (c, g)), "wb") as f:
            f.write(data)
EOF
sync

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
# timed S ARGS: wall seconds, annexctl CPU seconds, daemon CPU seconds of one dups call.
timed() {
	local s=$1 pid t0 c0 out
	shift
	pid=$(cat "$work/$s.pid")
	c0=$(ticks "$pid")
	t0=$(date +%s.%N)
	out=$( { XDG_RUNTIME_DIR=$work/$s/run ANNEXD_SOCKET=$(sock "$s") /usr/bin/time -f '%U %S' "$(bin "$s")/annexctl" dups "$@" >/dev/null; } 2>&1 | tail -1)
	echo "$t0 $(date +%s.%N) $out $c0 $(ticks "$pid")" |
		awk -v hz="$hz" '{printf "%.3f %.3f %.3f\n", $2-$1, $3+$4, ($6-$5)/hz}'
}
median() { sort -n | awk -v what="$1" '{w[NR]=$1; c[NR]=$2; d[NR]=$3; all=all sprintf("%.2f ", $1)}
	END {m=int((NR+1)/2); printf "%s: median %.3f s (%s) annexctl CPU %.2f s, daemon CPU %.2f s\n", what, w[m], all, c[m], d[m]}'; }
# surveyed S: wait (up to 10 min) until the daemon's background survey
# covered every group.
surveyed() {
	local end=$((SECONDS + 600))
	until [ "$(curl -s --unix-socket "$(sock "$1")" http://annexd/metrics | awk '$1=="annexd_index_unsurveyed_duplicate_bytes"{print $2}')" = 0 ]; do
		[ $SECONDS -lt $end ] || { echo "new: the background survey did not finish in 10 min" >&2; return 1; }
		sleep 0.2
	done
}

for s in old new; do
	mkdir -p "$work/$s/run" "$work/$s/config" "$work/$s/state"
	chmod 700 "$work/$s/run"
done
echo "load at start: $(load); $groups groups, $((2 * groups)) members of 4 KiB on XFS"
for s in old new; do
	t0=$(date +%s.%N)
	start "$s"
	echo "$s: first scan $(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2-$1}') s"
done
t0=$(date +%s.%N)
surveyed new
echo "new: background survey of every group done $(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2-$1}') s after idle"
stop old
stop new
for r in 1 2; do
	for s in old new; do
		start "$s"
		echo "$s: first call after start $r: $(timed "$s") (wall, annexctl CPU, daemon CPU)"
		stop "$s"
	done
done
start old
start new
surveyed new
for s in old new; do timed "$s" >/dev/null; done # warm both
declare -A rows
for ((i = 0; i < runs; i++)); do
	for s in old new; do rows[$s]+="$(timed "$s")"$'\n'; done
	rows[resurvey]+="$(timed new --resurvey)"$'\n'
done
printf '%s' "${rows[old]}" | median "old: warm dups"
printf '%s' "${rows[new]}" | median "new: warm dups (surveys kept)"
printf '%s' "${rows[resurvey]}" | median "new: dups --resurvey (every extent map read again)"
ctl new dups | tail -1
stop old
stop new
for s in old new; do echo "$s: index file $(stat -c %s "$work/$s.db") bytes"; done
echo "load at end: $(load)"
