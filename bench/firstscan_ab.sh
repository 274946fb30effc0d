#!/usr/bin/env bash
# firstscan_ab.sh — warm first scans of annexd built at a base revision and
# at the work tree, side by side (bench/ab.py: the builds alternate, the bare
# loop runs in every round, medians leave out round 1), for a change that
# must not move them. Before the scans, each build starts on the index whose
# hashing calibration the other build stored, and must reuse it: the stored
# calibration's encoding is the same in both.
#
# Usage: bench/firstscan_ab.sh [BASE (default: where HEAD left main)] [FILES (default 12000)] [RUNS (default 5)]
# The corpus (/work/shared/bench/gen_corpus.py, seed 42, FILES files: 1.6 GB
# at 12,000) is generated under /tmp, never inside the repository, and kept
# for the next run as /tmp/annexd-firstscan-FILES.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-$(git -C "$repo" merge-base HEAD main)}
files=${2:-12000}
runs=${3:-5}
tree=/tmp/annexd-firstscan-$files
if [[ ! -d $tree ]]; then
	python3 /work/shared/bench/gen_corpus.py "$tree" --files "$files" >&2
fi
work=$(mktemp -d /tmp/annexd-firstscan-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/empty" "$work/c" "$work/s" "$work/r"
chmod 700 "$work/r"
git -C "$repo" archive "$base" | tar -x -C "$work/src"
(cd "$work/src" && CGO_ENABLED=0 go build -o "$work/before" ./cmd/annexd)
(cd "$repo" && CGO_ENABLED=0 go build -o "$work/after" ./cmd/annexd)
export XDG_CONFIG_HOME=$work/c XDG_STATE_HOME=$work/s XDG_RUNTIME_DIR=$work/r
# A calibration cut short by its 1 s budget (a loaded machine) is not kept,
# and every start would calibrate again: give it a minute (the daemon's
# test seam), so that it completes and is stored.
export ANNEXD_TEST_CALIBRATION_BUDGET=60s
run() { "$1" --socket "$work/r/annexd.sock" --no-default-ignores --index "$2" --exit-when-idle "$work/empty" 2>&1; }
for pair in "before after" "after before"; do
	set -- $pair
	rm -f "$work/idx.db"
	first=$(run "$work/$1" "$work/idx.db")
	grep -q "calibrating hashing" <<<"$first" || { echo "$1 did not calibrate: $first" >&2; exit 1; }
	second=$(run "$work/$2" "$work/idx.db")
	if grep -q "reusing stored hashing calibration" <<<"$second"; then
		echo "$2 reuses the calibration $1 stored"
	else
		echo "$2 does NOT reuse the calibration $1 stored" >&2
		exit 1
	fi
done
python3 "$repo/bench/ab.py" "$tree" "$runs" "$work/before" "$work/after"
