#!/usr/bin/env bash
# dirdups.sh — what `annexctl dups --dirs` costs the daemon at 10^6 files:
# internal/dirdups.Find over an index filled without a tree on disk
# (BenchmarkFind1M: 50,000 folders, 15 % of the files copies, one folder
# in fifty a copy of the one before, one in a hundred with a file not
# hashed yet), with the surveys the store keeps; and BenchmarkFindBackup1M,
# half of it a copy of the other half (every content has a copy: the most
# work for the contained-folder search and the reclaimable bytes).
#
# Usage: bench/dirdups.sh [FILES] [RUNS]
#   FILES (default 1000000), RUNS (default 3) calls of Find after one fill.
# It prints the wall time per call (ns/op), the CPU time per call
# (cpu-ms/op: steadier on a shared machine), that CPU time over the CPU
# time of listing the same index's duplicate groups beside it
# (x-dups-listing: the ratio the load moves least), the memory allocated
# per call and the load average before and after. Filling the index takes
# about a minute of CPU and is not timed.
set -euo pipefail
files=${1:-1000000} runs=${2:-3}
cd "$(dirname "$0")/.."
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
ANNEXD_BENCH_DIRS_N=$files nice -n 0 go test -run '^$' -bench '^BenchmarkFind(Backup)?1M$' -benchtime "${runs}x" -benchmem -count=1 ./internal/dirdups/ |
	grep -E '^(Benchmark|ok|FAIL)'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
