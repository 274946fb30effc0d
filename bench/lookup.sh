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
files=$(wc -l <"$work/list")

python3 - "$work" "$tree" "$runs" "$files" <<'EOF'
import os, random, statistics, subprocess, sys, time
work, tree, runs, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ctl = os.path.join(work, "annexctl")
paths = open(os.path.join(work, "list")).read().splitlines()
random.seed(1)
sample = random.sample(paths, 300)

def one(argv):
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]

# Interleave so both see the same machine load.
look, true = [], []
for p in sample:
    look.append(one([ctl, "lookup", p]))
    true.append(one(["/bin/true"]))
ms = lambda s: "%.2f ms" % (s * 1e3)
print("| measurement | figure |")
print("|---|---|")
print("| `annexctl lookup FILE`, process start included, p50 / p90 (300 files) | %s / %s |" % (ms(pct(look, 50)), ms(pct(look, 90))))
print("| `/bin/true` from the same harness, p50 (fork+exec floor) | %s |" % ms(pct(true, 50)))
print("| lookup minus the floor, p50 | %s |" % ms(pct(look, 50) - pct(true, 50)))

batch = []
for _ in range(runs):
    with open(os.path.join(work, "list"), "rb") as f:
        t = time.perf_counter()
        out = subprocess.run([ctl, "lookup", "--batch"], stdin=f, stdout=subprocess.PIPE, check=True).stdout
        batch.append(time.perf_counter() - t)
    keys = sum(1 for l in out.splitlines() if l)
    assert keys == files, "batch answered %d keys for %d files" % (keys, files)
b = statistics.median(batch)
print("| `annexctl lookup --batch`, %d paths (median of %d) | %.2f s = %s paths/s |" % (files, runs, b, format(int(files / b), ",")))

def timed(argv):
    xs = []
    for _ in range(runs):
        xs.append(one(argv))
    return statistics.median(xs)
dups = timed([ctl, "dups"])
jd = timed(["jdupes", "-r", "-q", tree])
print("| `annexctl dups` (median of %d) | %.3f s |" % (runs, dups))
print("| `jdupes -r` on the same tree (median of %d) | %.3f s |" % (runs, jd))
print("| dups ÷ jdupes | %.3f× |" % (dups / jd))
EOF
