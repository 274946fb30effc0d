#!/usr/bin/env bash
# store_ab.sh — the store package's benchmarks of two commits side by side
# in one run, alternating, so that a shared machine's load falls on both.
#
# Usage: bench/store_ab.sh OLD_REV [NEW_REV] [ROUNDS] [BENCH]
#   OLD_REV, NEW_REV: commits of this repository (NEW_REV defaults to HEAD).
#   ROUNDS (default 3): runs per side. BENCH: a -test.bench pattern
#   (default: Get and PutBatch, whose records are synthetic unless the
#   corpus manifest exists; see store/bench_test.go).
# Prints each run's per-CPU-second figures (lookups/cpu-s, puts/cpu-s: less
# sensitive to load than wall time), then per benchmark the mean of each
# side and new/old.
set -euo pipefail
old=$1 new=${2:-HEAD} rounds=${3:-3} bench=${4:-'^(BenchmarkGet|BenchmarkPutBatch)$'}
work=$(mktemp -d /tmp/store-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
for s in old new; do
	rev=$old
	[ "$s" = new ] && rev=$new
	mkdir -p "$work/$s/src"
	git archive "$rev" | tar -x -C "$work/$s/src"
	(cd "$work/$s/src" && GOFLAGS=-buildvcs=false go test -c -o "$work/$s/store.test" ./store/)
done
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$rounds"); do
	for s in old new; do
		(cd "$work/$s/src/store" && "$work/$s/store.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1s -test.count 1) |
			awk -v s="$s" '/^Benchmark/ { for (i = 3; i < NF; i++) if ($(i+1) ~ /cpu-s$/) print s, $1, $(i+1), $i }'
	done
done | tee "$work/out"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '{ k = $2 " " $3; sum[k, $1] += $4; n[k, $1]++; keys[k] = 1 }
	END { for (k in keys) printf "%s old %.0f new %.0f new/old %.3f\n", k, sum[k, "old"] / n[k, "old"], sum[k, "new"] / n[k, "new"], (sum[k, "new"] / n[k, "new"]) / (sum[k, "old"] / n[k, "old"]) }' "$work/out" | sort
