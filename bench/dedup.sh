#!/usr/bin/env bash
# dedup.sh — deduplication on an XFS image (reflink=1) holding a slice of the
# benchmark corpus with all its duplicates, beside `duperemove -dr` and
# `jdupes -B -r` on identical copies, in one run:
#
#   1. time from command to done, with the page cache dropped before each
#      tool (annexd's index already built, as the daemon keeps it);
#   2. bytes freed (statfs free bytes after minus before, after syncfs),
#      against the slice's true duplicate bytes from the corpus manifest
#      (bytes, and 4 KiB blocks, since a small file frees a whole block);
#   3. annexd's second run on the same image (goal: ≤ 0.05× the first),
#      right after the first (warm) and with the page cache dropped (cold);
#   4. annexd's first scan of the slice, for reference (the daemon does it
#      once, in the background, and keeps the index current);
#   5. `duperemove -dr -b 4k`, for reference: by default duperemove works in
#      128 KiB blocks and leaves out what is smaller.
#
# annexd is the real daemon on the image (without its default ignores, so
# it sees every file the other tools see), asked with `annexctl dedup`; each
# run's time is annexctl's, from the command to its result. Needs root,
# xfsprogs, duperemove and jdupes. Not run in CI.
#
# Usage: bench/dedup.sh [TREE (default /work/corpus/T)] [SLICE_GIB (default 1)]
# A missing TREE is generated with /work/shared/bench/gen_corpus.py (never
# inside the repository). Images and copies live under a temp dir in /tmp.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-/work/corpus/T}
slice_gib=${2:-1}
gen=/work/shared/bench/gen_corpus.py
for tool in mkfs.xfs duperemove jdupes python3; do
	command -v "$tool" >/dev/null || { echo "dedup.sh: $tool is missing" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "dedup.sh: loop mounts need root" >&2; exit 2; }
if [[ ! -d $tree ]]; then
	case "$(realpath -m "$tree")" in "$repo" | "$repo"/*)
		echo "dedup.sh: refusing to generate the corpus inside the repository: $tree" >&2
		exit 2
		;;
	esac
	echo "generating the corpus at $tree (about 25 s)" >&2
	python3 "$gen" "$tree" >&2
fi
tree=$(cd "$tree" && pwd)
manifest=$tree.manifest.tsv
work=$(mktemp -d /tmp/annexd-dedup-bench.XXXXXX)
mounts=()
daemon=
cleanup() {
	if [[ -n $daemon ]]; then kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true; fi
	for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/bin"
(cd "$repo" && go build -o "$work/bin/" ./cmd/annexd ./cmd/annexctl)
ctl() { "$work/bin/annexctl" --socket "$work/run/annexd.sock" "$@"; }

# The slice: whole top-level directories in name order until SLICE_GIB,
# then every other copy of any file in it, wherever it lives.
python3 - "$manifest" "$slice_gib" "$work/list" "$work/truth" <<'EOF'
import collections, sys
manifest, gib, out, truth = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [l.rstrip("\n").split("\t") for l in open(manifest, encoding="utf-8")]
by_top = collections.defaultdict(list)
for r in rows:
    by_top[r[0].split("/")[0]].append(r)
chosen, total = [], 0
for top in sorted(by_top):
    if total >= gib * (1 << 30):
        break
    chosen += by_top[top]
    total += sum(int(r[1]) for r in by_top[top])
digests = {r[2] for r in chosen}
paths = {r[0] for r in chosen} | {r[0] for r in rows if r[2] in digests}
sel = [r for r in rows if r[0] in paths]
groups = collections.Counter(r[2] for r in sel)
size = {r[2]: int(r[1]) for r in sel}
dup = sum(size[h] * (n - 1) for h, n in groups.items() if n > 1 and size[h] > 0)
dupblk = sum(-(-size[h] // 4096) * 4096 * (n - 1) for h, n in groups.items() if n > 1 and size[h] > 0)
with open(out, "wb") as f:
    for p in sorted(paths):
        f.write(p.encode() + b"\0")
with open(truth, "w") as f:
    f.write("%d %d %d %d %d\n" % (len(sel), sum(int(r[1]) for r in sel),
            sum(1 for h, n in groups.items() if n > 1 and size[h] > 0), dup, dupblk))
EOF
read -r nfiles nbytes ngroups dupbytes dupblocks <"$work/truth"

# image NAME: a fresh XFS image with a copy of the slice, mounted at $work/NAME.
image() {
	local img=$work/$1.img mnt=$work/$1
	truncate -s $((nbytes * 2 + (2 << 30))) "$img"
	mkfs.xfs -q -f -m reflink=1 "$img"
	mkdir -p "$mnt"
	mount -o loop "$img" "$mnt"
	mounts+=("$mnt")
	tar -C "$tree" --null -T "$work/list" -cf - | tar -C "$mnt" -xf -
	sync -f "$mnt"
}
free_bytes() { sync -f "$1"; echo $(($(stat -f -c '%f' "$1") * $(stat -f -c '%S' "$1"))); }
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# timed NAME CMD...: wall seconds of CMD into $work/NAME.secs, output into $work/NAME.out.
timed() {
	local name=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	"$@" >"$work/$name.out" 2>"$work/$name.err" || { echo "$name failed:" >&2; cat "$work/$name.err" >&2; exit 1; }
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l >"$work/$name.secs"
}

for t in annexd duperemove jdupes duperemove4k; do image "$t"; done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# The daemon indexes the slice once (its first scan), then serves the runs.
t0=$(date +%s.%N)
"$work/bin/annexd" --index "$work/index.db" --socket "$work/run/annexd.sock" --calibrate never --no-default-ignores "$work/annexd" 2>"$work/annexd.log" &
daemon=$!
until ctl status --wait --timeout 10m >/dev/null 2>&1; do
	kill -0 "$daemon" 2>/dev/null || { echo "annexd exited:" >&2; cat "$work/annexd.log" >&2; exit 1; }
	sleep 0.1
done
echo "$(date +%s.%N) - $t0" | bc -l >"$work/index.secs"
ctl status | sed -n 2p >"$work/index.out"
before=$(free_bytes "$work/annexd")
cold
timed annexd ctl dedup
freed_annexd=$(($(free_bytes "$work/annexd") - before))
timed annexd2 ctl dedup
cold
timed annexd2cold ctl dedup
kill "$daemon"
wait "$daemon" || true
daemon=

before=$(free_bytes "$work/duperemove")
cold
timed duperemove duperemove -dr "$work/duperemove"
freed_duperemove=$(($(free_bytes "$work/duperemove") - before))

before=$(free_bytes "$work/jdupes")
cold
timed jdupes jdupes -B -r "$work/jdupes"
freed_jdupes=$(($(free_bytes "$work/jdupes") - before))
before=$(free_bytes "$work/duperemove4k")
cold
timed duperemove4k duperemove -dr -b 4k "$work/duperemove4k"
freed_duperemove4k=$(($(free_bytes "$work/duperemove4k") - before))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

pct() { echo "scale=1; 100 * $1 / $2" | bc -l; }
secs() { printf '%.2f' "$(cat "$work/$1.secs")"; }
ratio() { printf '%.3f' "$(echo "$(cat "$work/$1.secs") / $(cat "$work/$2.secs")" | bc -l)"; }
echo "slice: $nfiles files, $nbytes bytes, $ngroups duplicate groups, $dupbytes duplicate bytes ($dupblocks in 4 KiB blocks)"
echo "load average before: $load_before; after: $load_after; $(nproc) CPUs"
printf '%-28s %9s %14s %9s %9s\n' tool seconds freed "% bytes" "% blocks"
printf '%-28s %9s %14s %9s %9s\n' "annexd (index kept)" "$(secs annexd)" "$freed_annexd" "$(pct "$freed_annexd" "$dupbytes")" "$(pct "$freed_annexd" "$dupblocks")"
printf '%-28s %9s %14s %9s %9s\n' "duperemove -dr" "$(secs duperemove)" "$freed_duperemove" "$(pct "$freed_duperemove" "$dupbytes")" "$(pct "$freed_duperemove" "$dupblocks")"
printf '%-28s %9s %14s %9s %9s\n' "jdupes -B -r" "$(secs jdupes)" "$freed_jdupes" "$(pct "$freed_jdupes" "$dupbytes")" "$(pct "$freed_jdupes" "$dupblocks")"
printf '%-28s %9s %14s %9s %9s\n' "duperemove -dr -b 4k" "$(secs duperemove4k)" "$freed_duperemove4k" "$(pct "$freed_duperemove4k" "$dupbytes")" "$(pct "$freed_duperemove4k" "$dupblocks")"
echo "annexd vs duperemove: $(ratio annexd duperemove)x the time; vs jdupes: $(ratio annexd jdupes)x; vs duperemove -b 4k: $(ratio annexd duperemove4k)x"
echo "annexd second run, warm: $(secs annexd2) s = $(ratio annexd2 annexd)x the first; $(cat "$work/annexd2.out")"
echo "annexd second run, cold: $(secs annexd2cold) s = $(ratio annexd2cold annexd)x the first"
echo "annexd first run: $(head -1 "$work/annexd.out"); $(grep -E '^(freed|skipped)' "$work/annexd.out" | tr '\n' ' ')"
echo "annexd first scan of the slice (reference, warm cache): $(secs index) s; $(cat "$work/index.out")"
