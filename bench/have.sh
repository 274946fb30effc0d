#!/usr/bin/env bash
# have.sh — `annexctl have` on FILES new files (default 10,000; a gen_tree.py
# tree outside the daemon's roots, so every file is hashed by annexctl and
# asked about) against the bare hash loop (bench/bareloop) over the same
# tree, alternated ROUNDS times (default 3) in one run, page cache warm for
# both (one untimed pass of each first). Prints each run's wall time, the
# medians and have ÷ bareloop.
#
# Usage: bench/have.sh [FILES] [ROUNDS]
set -euo pipefail
files=${1:-10000}
rounds=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
daemon=
cleanup() {
	if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
cd "$repo"
go build -o "$work/annexd" ./cmd/annexd
go build -o "$work/annexctl" ./cmd/annexctl
go build -o "$work/bareloop" ./bench/bareloop
python3 bench/gen_tree.py "$work/card" --files "$files" --dirs 10 --subdirs 10 >/dev/null
mkdir -p "$work/root" && echo "one file" >"$work/root/a"
mkdir -m 700 "$work/run"
export ANNEXD_SOCKET=$work/run/annexd.sock
"$work/annexd" --calibrate never --index "$work/index.db" --socket "$ANNEXD_SOCKET" "$work/root" 2>"$work/annexd.log" &
daemon=$!
"$work/annexctl" status --wait --timeout 60s >/dev/null

have() { "$work/annexctl" have --missing "$work/card" >/dev/null || [ $? -eq 1 ]; }
bare() { "$work/bareloop" "$work/card" >/dev/null; }
now() { date +%s.%N; }
have; bare # warm the page cache, untimed
: >"$work/times"
for _ in $(seq "$rounds"); do
	for what in bare have; do
		t0=$(now); $what; t1=$(now)
		echo "$what $(echo "$t1 - $t0" | bc)" | tee -a "$work/times"
	done
done
python3 - "$work/times" "$files" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    what, s = line.split()
    runs.setdefault(what, []).append(float(s))
b, h = statistics.median(runs["bare"]), statistics.median(runs["have"])
print(f"{sys.argv[2]} new files: bareloop {b:.3f} s, annexctl have {h:.3f} s (medians); have ÷ bareloop = {h / b:.2f}×")
PY
