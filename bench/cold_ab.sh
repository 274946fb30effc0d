#!/usr/bin/env bash
# cold_ab.sh — cold first scans of the corpus by several annexd builds and
# `cat` on N readers, alternated round by round, the page cache dropped
# before each (root). Prints one line a run: wall, user and system CPU-s
# (GNU time), and the load.
#
# Usage: bench/cold_ab.sh ROUNDS SIDE...
#   SIDE is NAME=BINARY (an annexd build: --exit-when-idle on the tree,
#   each run into a copy of an index that holds a calibration, made once
#   by the first build on an empty root) or NAME=cat:N (cat on N readers).
# TREE=/work/corpus/T (default) chooses the tree. Example:
#   bench/cold_ab.sh 5 cat16=cat:16 before=/tmp/annexd-old after=/tmp/annexd-new
set -euo pipefail
rounds=$1; shift
tree=${TREE:-/work/corpus/T}
work=$(mktemp -d "${TMPDIR:-/tmp}/cold_ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/empty" -m 700 "$work/run"
first=""
for side in "$@"; do
	bin=${side#*=}
	if [[ $bin != cat:* && -z $first ]]; then first=$bin; fi
done
if [[ -n $first ]]; then
	"$first" --socket "$work/run/s" --no-default-ignores --index "$work/cal.db" --exit-when-idle "$work/empty" >/dev/null 2>&1
fi
for r in $(seq 1 "$rounds"); do
	for side in "$@"; do
		name=${side%%=*} bin=${side#*=}
		sync
		echo 3 >/proc/sys/vm/drop_caches
		if [[ $bin == cat:* ]]; then
			/usr/bin/time -o "$work/t" -f '%e %U %S' bash -c "find '$tree' -type f -print0 | xargs -0 -P${bin#cat:} -n 64 cat >/dev/null"
		else
			cp "$work/cal.db" "$work/ab.db"
			/usr/bin/time -o "$work/t" -f '%e %U %S' "$bin" --socket "$work/run/s" --no-default-ignores --index "$work/ab.db" \
				--exit-when-idle "$tree" >/dev/null 2>&1
		fi
		read -r wall user sys <"$work/t"
		echo "round $r  $name  wall $wall s  cpu $user + $sys s  load $(cut -d' ' -f1 /proc/loadavg)"
	done
done
