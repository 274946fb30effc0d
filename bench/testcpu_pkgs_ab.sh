#!/usr/bin/env bash
# testcpu_pkgs_ab.sh — the CPU time (user + sys, children included) of packages'
# race-detector test runs at two commits, side by side in one run,
# alternating, so that a shared machine's load falls on both. CPU-seconds,
# not wall time: on a busy machine they move far less.
#
# Usage: bench/testcpu_pkgs_ab.sh OLD_REV NEW_REV ROUNDS PACKAGE...
#   OLD_REV, NEW_REV: commits of this repository ("" for NEW_REV: HEAD).
#   ROUNDS ("" for 2): runs per side. PACKAGE: ./cmd/annexd …
#   RUN=regexp limits the tests (-test.run).
# Prints each run, then per package the mean CPU-s of each side and new/old.
# Run it as root (the tests need it) and quietly: nice -n 10 is applied.
set -euo pipefail
old=$1 new=${2:-HEAD} rounds=${3:-2}
shift 3
work=$(mktemp -d /tmp/testcpu-pkgs-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
for s in old new; do
	rev=$old
	[ "$s" = new ] && rev=$new
	mkdir -p "$work/$s/src"
	git archive "$rev" | tar -x -C "$work/$s/src"
	for p in "$@"; do
		(cd "$work/$s/src" && GOFLAGS=-buildvcs=false nice -n 10 go test -race -c -o "$work/$s/$(echo "$p" | tr / _).test" "$p")
	done
done
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$rounds"); do
	for p in "$@"; do
		for s in old new; do
			bin=$work/$s/$(echo "$p" | tr / _).test
			(cd "$work/$s/src/$p" && GOFLAGS=-buildvcs=false nice -n 10 /usr/bin/time -f "$s $p %U %S %e" -o "$work/t" \
				"$bin" -test.count=1 -test.timeout=20m ${RUN:+-test.run "$RUN"} >"$work/log" 2>&1) ||
				{ echo "$s $p FAILED:" >&2; tail -20 "$work/log" >&2; }
			awk '{ printf "%s %s cpu-s %.1f wall-s %.1f\n", $1, $2, $3 + $4, $5 }' "$work/t"
		done
	done
done | tee "$work/out"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '{ sum[$2, $1] += $4; n[$2, $1]++; pkgs[$2] = 1 }
	END { for (p in pkgs) printf "%s old %.1f new %.1f cpu-s new/old %.2f\n", p, sum[p, "old"] / n[p, "old"], sum[p, "new"] / n[p, "new"], (sum[p, "new"] / n[p, "new"]) / (sum[p, "old"] / n[p, "old"]) }' "$work/out" | sort
