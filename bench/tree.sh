#!/usr/bin/env bash
# tree.sh — the web page's first paint at 10^6 files: GET /v1/tree's
# count of the whole tree by folder (internal/query.Tree) over an index
# filled without a tree on disk (BenchmarkTreeFirstPaint1M: 50,000
# folders, 15 % of the files copies of an earlier one), then the next
# level from the count kept.
#
# Usage: bench/tree.sh [FILES] [RUNS]
#   FILES (default 1000000), RUNS (default 3) first paints after one fill.
# Each round counts the first level twice on the one index, alternately:
# after (internal/query.Tree, store.DupFiles) and before (refCountTree:
# the duplicate groups listed by store.Dups with a path per member). It
# prints for each the first level's wall (-ms) and CPU time (-cpu-ms,
# steadier on a shared machine), the bytes it allocated (-alloc-MB) and
# the heap's peak above its start (-peak-MB); after-next-us and
# after-next-alloc-KB for the next level, from the count kept; x-cpu and
# x-alloc (after over before); and the load average before and after.
# Filling the index takes about a minute and is not timed.
set -euo pipefail
files=${1:-1000000} runs=${2:-3}
cd "$(dirname "$0")/.."
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
ANNEXD_BENCH_TREE_N=$files nice -n 0 go test -run '^$' -bench '^BenchmarkTreeFirstPaint1M$' -benchtime "${runs}x" -benchmem -count=1 ./internal/query/ |
	grep -E '^(Benchmark|ok|FAIL)'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
