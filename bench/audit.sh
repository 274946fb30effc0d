#!/usr/bin/env bash
# audit.sh — the audit's figures on the benchmark corpus, each beside its
# anchor measured in the same run (not run by CI):
#
#   1. an audit pass at full speed against annexd's own initial index of
#      the same tree (goal: ≥ 0.9× its throughput), against
#      `find | xargs -P2 sha256sum -c` of a manifest, and against a full
#      `git annex fsck` of a git-annex repository holding the same files;
#      warm page cache, and cold with COLD=1 (drops the page cache before
#      each command: it slows everyone else on the machine);
#   2. the rate cap: a pass capped at 20 MB/s over a slice of ≥ 200 MB
#      (goal: within ±15 %);
#   3. the page cache kept: on the slice, files read before the pass are
#      still cached after it, the others still not (fincore);
#   4. lookups while idle and during a full-speed pass, p50 / p99.
#
# The audit is driven by bench/auditbench over an index made by the real
# annexd; bench/audit_daemon.sh measures it through the daemon and annexctl.
#
# Usage: bench/audit.sh [TREE (default /work/corpus/T)] [RUNS (default 3)]
# SKIP_ANNEX=1 leaves out git annex (preparing its repository copies the
# tree and runs `git annex add`, minutes); ANNEX_REPO=DIR reuses one made
# before. A missing TREE is generated with /work/shared/bench/gen_corpus.py
# (never inside the repository).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-/work/corpus/T}
runs=${2:-3}
gen=/work/shared/bench/gen_corpus.py
if [[ ! -d $tree ]]; then
	case "$(realpath -m "$tree")" in "$repo" | "$repo"/*)
		echo "audit.sh: refusing to generate the corpus inside the repository: $tree" >&2
		exit 2
		;;
	esac
	echo "generating the corpus at $tree (about 25 s)" >&2
	python3 "$gen" "$tree" >&2
fi
tree=$(cd "$tree" && pwd)
work=$(mktemp -d /tmp/annexd-audit-bench.XXXXXX)
chmod 700 "$work"
trap 'rm -rf "$work"' EXIT
(cd "$repo" && go build -o "$work/" ./cmd/annexd ./bench/auditbench)
export XDG_CONFIG_HOME=$work/config XDG_STATE_HOME=$work/state XDG_RUNTIME_DIR=$work/run
mkdir -p -m 700 "$work/run"
annexd=("$work/annexd" --socket "$work/run/annexd.sock" --no-default-ignores)
auditbench=("$work/auditbench")

# timed CMD...: wall seconds and CPU seconds (user+system, children
# included) of CMD on one line.
timed() {
	/usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >"$work/out" 2>>"$work/log"
	awk '{printf "%s %.2f\n", $1, $2 + $3}' "$work/time"
}
cold() { [[ -n ${COLD:-} ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; }; true; }
warm() { find "$1" -type f -print0 | xargs -0 -P2 -n 256 cat >/dev/null; }

files=$(find "$tree" -type f | wc -l)
bytes=$(find "$tree" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f\n", s}')
echo "corpus: $tree, $files files, $bytes bytes; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); cache: $([[ -n ${COLD:-} ]] && echo cold || echo warm)" >&2
warm "$tree"
mkdir -p "$work/empty"
"${annexd[@]}" --exit-when-idle --index "$work/calibrated.db" "$work/empty" 2>>"$work/log"

# The manifest for sha256sum -c, in chunks for two processes.
(cd "$tree" && find . -type f -print0 | xargs -0 -P2 -n 256 sha256sum) >"$work/manifest"
split -n l/2 "$work/manifest" "$work/manifest."

annex=${ANNEX_REPO:-}
if [[ -z ${SKIP_ANNEX:-} && -z $annex ]]; then
	annex=$work/annex
	echo "preparing a git-annex repository with the same files (cp, git annex add: minutes)" >&2
	cp -a "$tree" "$annex"
	(cd "$annex" && git init -q && git config user.email bench@example.com && git config user.name bench &&
		git annex init -q bench >/dev/null 2>&1 && git annex add . >/dev/null 2>&1 && git commit -qm corpus)
fi

echo "1. full pass against the initial index, sha256sum -c and git annex fsck; $runs runs" >&2
: >"$work/pass"
for r in $(seq "$runs"); do
	cp "$work/calibrated.db" "$work/index.db"
	cold
	index=$(timed "${annexd[@]}" --exit-when-idle --index "$work/index.db" "$tree")
	cold
	pass=$(timed "${auditbench[@]}" -index "$work/index.db" -root "$tree" -full)
	grep -q '"ok":'"$files" "$work/out" || { echo "the pass did not verify every file:" >&2; cat "$work/out" >&2; exit 1; }
	cold
	sums=$(timed bash -c 'cd "$1" && shift && printf "%s\0" "$@" | xargs -0 -P2 -n1 sha256sum -c --quiet' _ "$tree" "$work"/manifest.a?)
	fsck="0 0"
	if [[ -n $annex ]]; then
		cold
		fsck=$(cd "$annex" && timed git annex fsck --quiet)
	fi
	echo "$index $pass $sums $fsck" >>"$work/pass"
	echo "  run $r: index $index, audit $pass, sha256sum -c $sums, git annex fsck $fsck (wall s, CPU s)" >&2
done

echo "2. rate cap 20 MB/s over a slice of the corpus" >&2
slice=$work/slice
mkdir -p "$slice"
# Files of 64 KiB to 16 MiB, in path order, until 300 MB.
(cd "$tree" && find . -type f -size +64k -size -16M -printf '%s %p\n' | LC_ALL=C sort -k2 |
	awk '{ if (s < 300000000) { s += $1; print substr($0, index($0, " ") + 1) } }') >"$work/slice.list"
(cd "$tree" && tr '\n' '\0' <"$work/slice.list" | xargs -0 cp --parents -t "$slice")
slice_bytes=$(find "$slice" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f\n", s}')
echo "  slice: $(wc -l <"$work/slice.list") files, $slice_bytes bytes" >&2
cp "$work/calibrated.db" "$work/slice.db"
"${annexd[@]}" --exit-when-idle --index "$work/slice.db" "$slice" 2>>"$work/log"
"${auditbench[@]}" -index "$work/slice.db" -root "$slice" -rate 20000000 >"$work/capped"
cat "$work/capped" >&2

echo "3. page cache kept: the first half of the slice read before the pass, the rest evicted" >&2
python3 - "$slice" <<'EOF'
import os, sys
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        fd = os.open(os.path.join(d, f), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
EOF
find "$slice" -type f | LC_ALL=C sort >"$work/slice.files"
half=$(($(wc -l <"$work/slice.files") / 2))
head -n "$half" "$work/slice.files" | tr '\n' '\0' | xargs -0 cat >/dev/null
fincore_sum() { tr '\n' '\0' <"$1" | xargs -0 fincore --bytes --noheadings --raw --output RES | awk '{s += $1} END {printf "%.0f\n", s}'; }
head -n "$half" "$work/slice.files" >"$work/read.files"
tail -n +"$((half + 1))" "$work/slice.files" >"$work/evicted.files"
read_before=$(fincore_sum "$work/read.files")
evicted_before=$(fincore_sum "$work/evicted.files")
"${auditbench[@]}" -index "$work/slice.db" -root "$slice" -full >"$work/kept"
read_after=$(fincore_sum "$work/read.files")
evicted_after=$(fincore_sum "$work/evicted.files")
echo "  cached bytes of the files read before: $read_before before the pass, $read_after after" >&2
echo "  cached bytes of the files evicted before: $evicted_before before the pass, $evicted_after after" >&2

echo "4. lookups, idle and during a full-speed pass" >&2
"${auditbench[@]}" -index "$work/index.db" -root "$tree" -full -lookups >"$work/lookups"
cat "$work/lookups" >&2

python3 - "$work" "$files" "$bytes" "$slice_bytes" "$read_before" "$read_after" "$evicted_before" "$evicted_after" <<'EOF'
import json, statistics, sys
work, files, nbytes, slice_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rb, ra, eb, ea = map(int, sys.argv[5:9])
rows = [list(map(float, l.split())) for l in open(f"{work}/pass") if l.strip()]
med = statistics.median
gb = nbytes / 1e9
def col(i): return med([r[i] for r in rows])
index, icpu, audit, acpu, sums, scpu, fsck, fcpu = (col(i) for i in range(8))
ratio = med([r[0] / r[2] for r in rows])  # audit throughput ÷ index throughput, per run
capped = json.loads(open(f"{work}/capped").read().splitlines()[-1])
lk = [json.loads(l) for l in open(f"{work}/lookups")]
idle, during = lk[0]["lookups"], lk[1]["lookups"]
print(f"""
| what | wall | CPU | throughput | audit's ratio |
|---|---|---|---|---|
| annexd initial index ({files:,} files, {gb:.2f} GB) | {index:.2f} s | {icpu:.2f} s | {gb / index * 1e3:.0f} MB/s | audit ÷ index throughput: **{ratio:.2f}×** (goal ≥ 0.9×) |
| audit pass, full speed | {audit:.2f} s | {acpu:.2f} s | {gb / audit * 1e3:.0f} MB/s | |
| `xargs -P2 sha256sum -c` of a manifest | {sums:.2f} s | {scpu:.2f} s | {gb / sums * 1e3:.0f} MB/s | {sums / audit:.2f}× faster |
| `git annex fsck` (full) | {fsck:.2f} s | {fcpu:.2f} s | {gb / fsck * 1e3 if fsck else 0:.0f} MB/s | {fsck / audit if fsck else 0:.2f}× faster |

rate cap 20 MB/s over {slice_bytes / 1e6:.0f} MB: {capped['mb_per_s']:.2f} MB/s ({(capped['mb_per_s'] / 20 - 1) * 100:+.1f} %; goal ±15 %)
page cache: files read before the pass {rb} → {ra} bytes cached; files evicted before {eb} → {ea}
lookups p50 / p99 / max: idle {idle['p50_ms']:.2f} / {idle['p99_ms']:.2f} / {idle['max_ms']:.2f} ms ({idle['n']:.0f}); during a full-speed pass {during['p50_ms']:.2f} / {during['p99_ms']:.2f} / {during['max_ms']:.2f} ms ({during['n']:.0f})
""")
EOF
