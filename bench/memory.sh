#!/usr/bin/env bash
# memory.sh — what the daemon holds in memory while it indexes a tree and
# once it is idle, with every key checked (not run by CI).
#
# For each build (the work tree, and BASE=REV's beside it), annexd starts
# on an index that holds only a hashing calibration and indexes TREE, the
# way a user runs it (no --exit-when-idle). /proc/PID/status is sampled
# every 20 ms. The script reports:
#
#   peak RSS   VmHWM: anonymous and file-backed pages together, the
#              kernel's own high-water mark (what `ps`, top and systemd's
#              MemoryPeak show);
#   RssAnon    the heap, the goroutine stacks and the runtime's own
#              memory: what the daemon costs the machine;
#   RssFile    file-backed pages mapped: the binary's text and bbolt's
#              mmap of the index, page cache the kernel reclaims;
#
# at its peak during the scan, at the scan's end (`annexctl status --wait`
# returns) and after IDLE seconds (60) of nothing to do. The daemon runs with
# GODEBUG=gctrace=1: the collector's cycles to the scan's end and its
# share of the CPU time since start (the runtime's own estimate) are
# reported beside them. Then every path of
# TREE is looked up (`annexctl lookup --batch`): each key must carry the
# manifest's size and SHA-256 (TREE.manifest.tsv, as gen_corpus.py and
# gen_tree.py and bench/gentree write it), and the daemon must hold as many files as the
# manifest lists; the script fails otherwise.
#
# LIMITS="default 64MiB 128MiB" adds first scans of each build at those
# soft memory limits (GOMEMLIMIT; "default" leaves it unset, and the daemon
# paces its collector itself), RUNS rounds (3) alternating the builds and
# limits, --exit-when-idle: wall, CPU seconds (wait4) and peak RSS, medians,
# and the last run's keys checked. Timings on a shared machine: read the
# ratios of one run, with the load it prints.
#
# PROFILE=DIR builds with -tags memprofile: the daemon writes a heap
# profile a second to DIR/BUILD/heap-NNNN.pb.gz (go tool pprof).
#
# Usage: bench/memory.sh [TREE] [IDLE]
#   TREE defaults to a corpus generated for the run under /tmp
#   (/work/shared/bench/gen_corpus.py, 60,000 files, 3 GB) and removed after.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/annexd-memory.XXXXXX)
chmod 700 "$work"
trap 'rm -rf "$work"' EXIT
tree=${1:-}
if [[ -z $tree ]]; then
	tree=$work/T
	echo "generating the corpus in $tree" >&2
	python3 /work/shared/bench/gen_corpus.py "$tree" >&2
fi
tree=$(cd "$tree" && pwd)
[[ -f $tree.manifest.tsv ]] || { echo "memory.sh: no manifest $tree.manifest.tsv (write TREE with gen_corpus.py or gen_tree.py)" >&2; exit 2; }

tags=()
[[ -n ${PROFILE:-} ]] && tags=(-tags memprofile)
build() { # build NAME SRC
	(cd "$2" && CGO_ENABLED=0 go build "${tags[@]}" -o "$work/$1/" ./cmd/annexd ./cmd/annexctl)
}
builds=(new)
build new "$repo"
if [[ -n ${BASE:-} ]]; then
	mkdir -p "$work/base-src"
	git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
	cp "$repo/cmd/annexd/memprofile.go" "$work/base-src/cmd/annexd/" 2>/dev/null || true
	build base "$work/base-src"
	builds=(base new)
fi
python3 "$repo/bench/memory.py" "$work" "$tree" "${2:-60}" "${builds[@]}"
