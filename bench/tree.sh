#!/usr/bin/env bash
# tree.sh — the web page's first paint at 10^6 files: GET /v1/tree's
# count of the whole tree by folder (internal/query.Tree) over an index
# filled without a tree on disk (BenchmarkTreeFirstPaint1M: 50,000
# folders, 15 % of the files copies of an earlier one), then the next
# level from the count kept.
#
# Usage: bench/tree.sh [FILES] [RUNS]
#   FILES (default 1000000), RUNS (default 3) first paints after one fill.
# It prints cold-ms/op (the first level: the whole count; its CPU time
# cold-cpu-ms/op, steadier on a shared machine), warm-us/op
# (the next level, from the count kept), x-dups-listing (the count's CPU
# time over that of listing the duplicate groups beside it: the ratio the
# load moves least), the memory allocated per paint, and the load average
# before and after. Filling the index takes about a minute and is not
# timed.
set -euo pipefail
files=${1:-1000000} runs=${2:-3}
cd "$(dirname "$0")/.."
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
ANNEXD_BENCH_TREE_N=$files nice -n 0 go test -run '^$' -bench '^BenchmarkTreeFirstPaint1M$' -benchtime "${runs}x" -benchmem -count=1 ./internal/query/ |
	grep -E '^(Benchmark|ok|FAIL)'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
