#!/usr/bin/env bash
# testcpu_ab.sh — CPU of one package's race test run at two commits, side
# by side in one run.
#
# Usage: bench/testcpu_ab.sh OLD_REV NEW_REV PKG [TESTS]
#   PKG: a package path such as ./store/ or ./internal/indexer/.
#   TESTS: an optional -run pattern (default: every test).
# It builds both test binaries first (compile time is left out), then runs
# them at the same time, each under /usr/bin/time, and prints user, sys
# and wall seconds of each. CPU-seconds are the measure: wall time varies
# with the machine's load.
set -euo pipefail
old=$1 new=$2 pkg=$3 run=${4:-.}
work=$(mktemp -d /tmp/testcpu-ab.XXXXXX)
trap 'git worktree remove --force "$work/old" 2>/dev/null; git worktree remove --force "$work/new" 2>/dev/null; rm -rf "$work"' EXIT
for s in old new; do
	rev=$old
	[ "$s" = new ] && rev=$new
	git worktree add --detach -q "$work/$s" "$rev"
	(cd "$work/$s" && nice -n 10 go test -race -c -o "$work/$s.test" "$pkg")
done
dir=${pkg#./}
for s in old new; do
	rev=$old
	[ "$s" = new ] && rev=$new
	(cd "$work/$s/$dir" && /usr/bin/time -f "$s $rev: %U user %S sys %e wall" \
		nice -n 10 "$work/$s.test" -test.count=1 -test.run "$run" >"$work/$s.out" 2>"$work/$s.err"; tail -n 3 "$work/$s.out"; tail -n 1 "$work/$s.err") &
done
wait
