#!/usr/bin/env bash
# dedup_attack.sh — the deduplication attack of RELIABILITY.md ("Deduplication
# under attack"): e2e/dedupattack_test.go (build tag dedupattack) with the real
# daemon and `annexctl dedup --hardlink` on loop-mounted ext4 and btrfs images,
# then the cost of one untouched hardlink run (TestDedupHardlinkCost).
#
# With BASE=<commit> the same tests also run on the code of that commit (its
# tree, extracted under /tmp, with this tree's e2e test files copied in), for
# the before/after table; the cost is printed for both, side by side.
#
# Needs root, loop devices, mkfs.ext4, mkfs.btrfs, losetup and git-annex.
# Usage: [BASE=commit] bench/dedup_attack.sh [RUNS (default 3)] [PAIRS (default 300)]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
pairs=${2:-300}
[[ $(id -u) == 0 ]] || { echo "dedup_attack.sh: loop mounts need root" >&2; exit 2; }
work=$(mktemp -d /tmp/annexd-dedup-attack.XXXXXX)
trap 'rm -rf "$work"' EXIT

# tree DIR: the short commit of the module at DIR, or BASE.
tree() { (cd "$1" && git rev-parse --short HEAD 2>/dev/null) || echo "$BASE"; }

# attack DIR LABEL: run the attack in the module at DIR.
attack() {
	local dir=$1 label=$2
	echo "== attack: $label ($(tree "$dir")), load $(cut -d' ' -f1-3 /proc/loadavg)"
	(cd "$dir" && go test -count=1 -timeout 60m -tags dedupattack -run 'TestDedupAttack' -v ./e2e/ \
		-attack.runs="$runs" -attack.pairs="$pairs" 2>&1) | grep -E 'FIGURES|^(--- |ok|FAIL)|_test.go:[0-9]+: ' | grep -v '^=== ' || true
}

# cost DIR: seconds of one untouched hardlink run of PAIRS pairs.
cost() {
	(cd "$1" && go test -count=1 -timeout 20m -tags dedupattack -run 'TestDedupHardlinkCost$' -v ./e2e/ \
		-attack.pairs="$pairs" 2>&1) | sed -n 's/.*FIGURES cost: pairs [0-9]*; seconds //p'
}

dirs=("$repo")
attack "$repo" "this tree"
if [[ -n ${BASE:-} ]]; then
	mkdir "$work/base"
	git -C "$repo" archive "$BASE" | tar -x -C "$work/base"
	for f in scribe_test.go dedup_hardlink_test.go dedupattack_test.go; do cp "$repo/e2e/$f" "$work/base/e2e/"; done
	attack "$work/base" "base $BASE"
	dirs+=("$work/base")
fi
# The cost, each tree in turn, three times: ratios from neighbouring runs.
echo "== cost of one hardlink run of $pairs untouched pairs (seconds), load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in 1 2 3; do
	line="run $i:"
	for d in "${dirs[@]}"; do line+=" $(tree "$d") $(cost "$d")"; done
	echo "$line"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
