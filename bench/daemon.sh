#!/usr/bin/env bash
# daemon.sh — the daemon's figures on the benchmark corpus, each beside its
# anchor measured in the same run, as ratios (warm page cache):
#
#   1. initial index, daemon start to idle, against
#      `find T -type f -print0 | xargs -0 -P2 -n 256 sha256sum`; peak RSS;
#   2. restart with nothing changed, start to idle, against
#      `find T -printf '%s %T@\n'`;
#   3. RSS of the running daemon once idle;
#   4. change latency, file closed → record in the index, p50/p99 over 1,000
#      files (BenchmarkChangeLatency in internal/daemon);
#   5. `git annex add .` on a 10,000-file subset, beside annexd on the same
#      subset.
#
# "Idle" is observed with annexd's hidden --exit-when-idle flag: the daemon
# exits once the initial scan is done and nothing is queued, being hashed,
# waiting to be written, or held back by the watcher. Start to idle is the
# process's wall time. Runs are interleaved with their anchor and the median
# is reported. The daemon indexes everything here (--no-default-ignores), so
# it hashes the same files as sha256sum.
#
# Each "initial index" run starts from an index that holds only a stored
# hashing calibration (made once at the start, as the first start on a
# machine does, ~1 s), so the figure is the steady cost of indexing a new
# tree; the first-ever start including calibration is reported on its own.
#
# Usage: bench/daemon.sh [TREE (default /work/corpus/T)] [RUNS (default 3)]
# SKIP_ANNEX=1 leaves out the (slow) git annex add.
# A missing TREE is generated with /work/shared/bench/gen_corpus.py (never
# inside the repository).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-/work/corpus/T}
runs=${2:-3}
gen=/work/shared/bench/gen_corpus.py
if [[ ! -d $tree ]]; then
	case "$(realpath -m "$tree")" in "$repo" | "$repo"/*)
		echo "daemon.sh: refusing to generate the corpus inside the repository: $tree" >&2
		exit 2
		;;
	esac
	echo "generating the corpus at $tree (about 25 s)" >&2
	python3 "$gen" "$tree" >&2
fi
tree=$(cd "$tree" && pwd)
work=$(mktemp -d /tmp/annexd-daemon-bench.XXXXXX)
daemon_pid=
cleanup() {
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$repo" && go build -o "$work/annexd" ./cmd/annexd && go build -o "$work/annexctl" ./cmd/annexctl)
mkdir -p "$work/run" "$work/empty" "$work/config"
chmod 700 "$work/run"
export XDG_CONFIG_HOME=$work/config XDG_STATE_HOME=$work/state XDG_RUNTIME_DIR=$work/run
export ANNEXD_SOCKET=$work/run/annexd.sock
annexd=("$work/annexd" --socket "$ANNEXD_SOCKET" --no-default-ignores)

now() { date +%s.%N; }
# timed CMD...: wall seconds, peak RSS (KiB) and CPU seconds (user+system,
# children included) of CMD on one line.
timed() {
	/usr/bin/time -f "%e %M %U %S" -o "$work/time" "$@" >/dev/null 2>>"$work/log"
	awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' "$work/time"
}
sha_anchor() { timed bash -c 'find "$1" -type f -print0 | xargs -0 -P2 -n 256 sha256sum' _ "$tree"; }
find_anchor() { timed find "$tree" -printf '%s %T@\n'; }
# The machine may be shared: CPU time is steadier than wall time, so both
# are reported.

files=$(find "$tree" -type f | wc -l)
bytes=$(du -sb "$tree" | cut -f1)
echo "corpus: $tree, $files files, $bytes bytes; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo "warming the page cache" >&2
for _ in 1 2; do find "$tree" -type f -print0 | xargs -0 -P2 -n 256 cat >/dev/null; done

# A first start on a fresh index calibrates the hasher (stored in the index).
first=$(timed "${annexd[@]}" --exit-when-idle --index "$work/calibrated.db" "$work/empty")
echo "first start on an empty tree (calibration included): $first (wall s, KiB, CPU s)" >&2

echo "1. initial index against sha256sum, $runs runs" >&2
: >"$work/initial"
for r in $(seq "$runs"); do
	cp "$work/calibrated.db" "$work/index.db"
	ours=$(timed "${annexd[@]}" --exit-when-idle --index "$work/index.db" "$tree")
	anchor=$(sha_anchor)
	echo "$ours $anchor" >>"$work/initial"
	echo "  run $r: annexd $ours, sha256sum $anchor (wall s, KiB, CPU s)" >&2
done
echo "1b. initial index by --hash-workers (files hashed at once), interleaved, $runs runs" >&2
: >"$work/workers"
for r in $(seq "$runs"); do
	for w in 2 4 8 16; do
		cp "$work/calibrated.db" "$work/index.db"
		echo "$w $(timed "${annexd[@]}" --hash-workers "$w" --exit-when-idle --index "$work/index.db" "$tree")" >>"$work/workers"
	done
done
sed 's/^/  workers, wall s, KiB, CPU s: /' "$work/workers" >&2
rm -f "$work/index.db"
cp "$work/calibrated.db" "$work/index.db"
"${annexd[@]}" --exit-when-idle --index "$work/index.db" "$tree" 2>>"$work/log"

echo "2. restart with nothing changed against find -printf, $((runs + 2)) runs" >&2
: >"$work/restart"
for r in $(seq $((runs + 2))); do
	ours=$(timed "${annexd[@]}" --exit-when-idle --index "$work/index.db" "$tree")
	anchor=$(find_anchor)
	echo "$ours $anchor" >>"$work/restart"
	echo "  run $r: annexd $ours, find $anchor (wall s, KiB, CPU s)" >&2
done
grep -q 'files_hashed=0 ' "$work/log" || echo "  warning: a restart hashed files (see $work/log)" >&2

echo "3. RSS once idle" >&2
"${annexd[@]}" --index "$work/index.db" "$tree" 2>>"$work/log" &
daemon_pid=$!
until "$work/annexctl" status --wait --timeout 10m >/dev/null 2>&1; do
	kill -0 "$daemon_pid"
	sleep 0.05
done
sleep 2
idle_rss=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon_pid/status")
idle_hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$daemon_pid/status")
kill -TERM "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=

echo "4. change latency (1,000 files, default quiet delay)" >&2
(cd "$repo" && go test -run '^$' -bench 'ChangeLatency$' -benchtime 1x ./internal/daemon) | tee "$work/latency" | grep -E 'Benchmark' >&2

echo "5. git annex add on a 10,000-file subset" >&2
sub=$work/subset
(cd "$tree" && find . -type f -print | LC_ALL=C sort >"$work/all.list")
head -n 10000 "$work/all.list" >"$work/subset.list"
mkdir -p "$sub"
(cd "$tree" && tr '\n' '\0' <"$work/subset.list" | xargs -0 cp --parents -t "$sub")
sub_bytes=$(du -sb "$sub" | cut -f1)
find "$sub" -type f -print0 | xargs -0 cat >/dev/null
cp "$work/calibrated.db" "$work/sub.db"
sub_ours=$(timed "${annexd[@]}" --exit-when-idle --index "$work/sub.db" "$sub")
echo "  annexd on the subset: $sub_ours (wall s, KiB, CPU s)" >&2
(cd "$sub" && git init -q && git config user.email bench@example.com && git config user.name bench &&
	git annex init -q bench >/dev/null 2>&1)
sub_annex=0
if [[ -z ${SKIP_ANNEX:-} ]]; then
	t0=$(now)
	(cd "$sub" && git annex add . >/dev/null 2>&1)
	sub_annex=$(echo "$(now) - $t0" | bc)
fi
echo "  git annex add: $sub_annex s" >&2

python3 - "$work" "$files" "$bytes" "$sub_bytes" "${sub_ours%% *}" "$sub_annex" "$idle_rss" "$idle_hwm" "${first%% *}" <<'EOF'
import re, statistics, sys
work, files, nbytes, sub_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sub_ours, sub_annex, idle_rss, idle_hwm, first = map(float, sys.argv[5:10])

def rows(name):
    return [list(map(float, l.split())) for l in open(f"{work}/{name}") if l.strip()]

def med(xs):
    return statistics.median(xs)

def ratio(a, b):
    return f"{a / b:.2f}×" if b > 0 else "–"

# each row: ours (wall, rss, cpu), anchor (wall, rss, cpu)
ini, rst = rows("initial"), rows("restart")
i_ours, i_rss, i_cpu = med([r[0] for r in ini]), max(r[1] for r in ini), med([r[2] for r in ini])
i_anchor, i_acpu = med([r[3] for r in ini]), med([r[5] for r in ini])
r_ours, r_rss, r_cpu = med([r[0] for r in rst]), max(r[1] for r in rst), med([r[2] for r in rst])
r_anchor, r_acpu = med([r[3] for r in rst]), med([r[5] for r in rst])
i_ratio = med([r[0] / max(r[3], 1e-3) for r in ini])
r_ratio = med([r[0] / max(r[3], 1e-3) for r in rst])
wk = {}
for w, wall, rss, cpu in rows("workers"):
    wk.setdefault(int(w), []).append((wall, cpu))
wk_line = ", ".join(f"{w}: {med([x[0] for x in v]):.2f} s wall / {med([x[1] for x in v]):.2f} s CPU" for w, v in sorted(wk.items()))
lat = open(f"{work}/latency").read()
m = {k: float(v) for v, k in re.findall(r"([\d.]+) (p50-ms|p99-ms|max-ms)", lat)}
mib = lambda kib: kib / 1024

print(f"""
| what | annexd | anchor | ratio | target |
|---|---|---|---|---|
| initial index, start to idle ({files:,} files, {nbytes/1e9:.2f} GB): wall | {i_ours:.2f} s | `find \\| xargs -P2 sha256sum` {i_anchor:.2f} s | {i_ratio:.2f}× | ≤ 0.40× |
| same, CPU time (user + system) | {i_cpu:.2f} s | {i_acpu:.2f} s | {ratio(i_cpu, i_acpu)} | |
| restart, nothing changed, start to idle: wall | {r_ours:.3f} s | `find -printf '%s %T@'` {r_anchor:.3f} s | {r_ratio:.2f}× | ≤ 2× |
| same, CPU time | {r_cpu:.2f} s | {r_acpu:.2f} s | {ratio(r_cpu, r_acpu)} | |
| peak RSS while indexing | {mib(i_rss):.0f} MiB | | | ≤ 100 MiB |
| peak RSS of a restart | {mib(r_rss):.0f} MiB | | | |
| RSS once idle (high-water mark) | {mib(idle_rss):.0f} MiB ({mib(idle_hwm):.0f} MiB) | | | |
| change latency, close → in the index, p50 / p99 / max (1,000 files, quiet delay 1 s) | {m.get('p50-ms', 0):.0f} / {m.get('p99-ms', 0):.0f} / {m.get('max-ms', 0):.0f} ms | | | |
| 10,000-file subset ({sub_bytes/1e6:.0f} MB), start to idle | {sub_ours:.2f} s | `git annex add .` {sub_annex:.1f} s | {ratio(sub_ours, sub_annex)} | |
| first start on an empty tree (hashing calibration) | {first:.2f} s | | | |

initial index by --hash-workers (medians): {wk_line}
""")
EOF
