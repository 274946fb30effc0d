#!/usr/bin/env bash
# heal_hub.sh — a heal's copy across the hub against cp of the same bytes,
# both in one run: BenchmarkFetchAgainstCp (internal/hubcopy) puts a file
# of SIZE MiB on an ext4 image under one host, fetches it through the
# in-process hub into another host's temporary file (the holder reads it
# from the device twice, the asker checks the key's digest, no pace), then
# copies the same file with cp; the source's cached pages are dropped
# before each. It prints both rates and their ratio; under load the rates
# vary, the ratio less.
#
# Needs root (loop devices) and e2fsprogs.
# Usage: bench/heal_hub.sh [SIZE_MIB (default 128)] [ROUNDS (default 3)]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
size=${1:-128}
rounds=${2:-3}
echo "== $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), file $size MiB, $rounds rounds"
HUBCOPY_BENCH_MIB=$size nice -n 10 go test -count=1 -run '^$' -bench BenchmarkFetchAgainstCp -benchtime "${rounds}x" ./internal/hubcopy/ 2>&1 |
	grep -E '^(Benchmark|cpu:|ok|FAIL)'
