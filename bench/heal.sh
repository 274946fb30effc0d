#!/usr/bin/env bash
# heal.sh — heal throughput on one host against `cp` of the same bytes, in
# one run, on loop-mounted images: ext4, XFS reflink=0 and XFS reflink=1.
#
# For each: N files of SIZE MiB, each with one copy, are indexed by the real
# daemon; a byte of each file is flipped in the image (behind the file
# system's back), `annexctl audit run --wait --full-speed` flags them, and
# `annexctl audit heal` restores them (timed, page cache dropped first). Then
# `cp` copies the same bytes (the copies onto new files in the same folder,
# then sync; cache dropped first; `cp --reflink=auto`, as coreutils does by
# default). A heal reads each copy from the device and hashes it, writes or
# reflinks it, fsyncs, reads the result back from the device and hashes it,
# and commits twice to the index: the ratio heal/cp says what that costs.
#
# Usage: bench/heal.sh [N (default 16)] [SIZE_MIB (default 16)]. Needs root,
# xfsprogs, e2fsprogs, filefrag. Not run in CI.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-16}
size=${2:-16}
[[ $(id -u) == 0 ]] || { echo "heal.sh: loop mounts need root" >&2; exit 2; }
work=$(mktemp -d /tmp/annexd-heal-bench.XXXXXX)
mnt=""
pid=""
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	[[ -n $mnt ]] && { umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT
(cd "$repo" && go build -o "$work/bin/" ./cmd/annexd ./cmd/annexctl)
ctl() { "$work/bin/annexctl" --socket "$work/run/annexd.sock" "$@"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }

# flip IMG FILE: inverts a byte 4 KiB into FILE's first extent, in the image.
flip() {
	local img=$1 f=$2 bs blk
	bs=$(stat -f -c %S "$f")
	blk=$(filefrag -e "$f" | awk '/^ *0:/ {gsub(/\.\./," "); print $4; exit}')
	python3 - "$img" $((blk * bs + 4096)) <<'PY'
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xff]))
PY
}

run() {
	local name=$1; shift
	local img=$work/$name.img
	mnt=$work/$name
	truncate -s $((n * size * 3 + 400))M "$img"
	"$@" "$img" >/dev/null
	mkdir -p "$mnt" && mount -o loop "$img" "$mnt"
	mkdir -p "$mnt/tree/copies"
	for i in $(seq 1 "$n"); do
		head -c $((size << 20)) /dev/urandom >"$mnt/tree/f$i.bin"
		cp --reflink=never "$mnt/tree/f$i.bin" "$mnt/tree/copies/f$i.bin"
	done
	touch -d '-1 hour' "$mnt"/tree/*.bin "$mnt"/tree/copies/*.bin
	rm -rf "$work/run" "$work/index.db"; mkdir -m 700 -p "$work/run"
	"$work/bin/annexd" --index "$work/index.db" --socket "$work/run/annexd.sock" --calibrate never "$mnt/tree" 2>"$work/$name.log" &
	pid=$!
	until ctl status --wait >/dev/null 2>&1; do kill -0 "$pid" || { cat "$work/$name.log" >&2; exit 1; }; sleep 0.2; done
	sync
	for i in $(seq 1 "$n"); do flip "$img" "$mnt/tree/f$i.bin"; done
	echo 3 >/proc/sys/vm/drop_caches
	ctl audit run --wait --full-speed >/dev/null || true
	drop
	local t0 t1 t2 t3
	t0=$(now); ctl audit heal >"$work/$name.heal" || { cat "$work/$name.heal" >&2; exit 1; }; t1=$(now)
	mkdir -p "$mnt/tree/cp"
	drop
	t2=$(now); cp "$mnt"/tree/copies/*.bin "$mnt/tree/cp/"; sync; t3=$(now)
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
	umount "$mnt"; mnt=""
	python3 - "$name" "$n" "$size" "$t0" "$t1" "$t2" "$t3" <<'PY'
import sys
name, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0, t1, t2, t3 = map(float, sys.argv[4:8])
mib = n * size
h, c = t1 - t0, t3 - t2
print(f"{name:14s} {n} × {size} MiB: heal {h:6.2f} s ({mib / h:7.1f} MiB/s)   cp {c:6.2f} s ({mib / c:7.1f} MiB/s)   heal/cp {h / c:5.2f}")
PY
}
echo "heal.sh: $n files of $size MiB, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
run ext4 mkfs.ext4 -q -F
run xfs-noreflink mkfs.xfs -q -f -m reflink=0
run xfs-reflink mkfs.xfs -q -f -m reflink=1
