#!/usr/bin/env bash
# audit_daemon.sh — the audit through the real daemon and CLI, each figure
# beside its anchor measured in the same run (not run by CI):
#
#   1. annexd indexes TREE (daemon start to idle), then
#      `annexctl audit run --full-speed --wait` reads all of it again on
#      the same daemon (goal: ≥ 0.9× the index's throughput); with a warm
#      page cache and with a cold one (the page cache dropped before the
#      index and before the audit, as root: it slows everyone on the
#      machine), alternated in each run;
#   2. lookup latency of random indexed files, idle and during a second
#      full-speed audit: one `annexctl lookup FILE` process each, and one
#      line at a time through `annexctl lookup --batch` (warm runs only).
#
# The audit reads the device with O_DIRECT, so a warm page cache helps the
# index and not the audit. BASE=REV builds annexd and annexctl of that git
# revision too (an audit that read through the page cache, say) and
# measures both builds alternately in each run, for ratios side by side.
#
# Usage: bench/audit_daemon.sh [TREE (default /work/corpus/T)] [RUNS (default 3)]
# MODES="warm cold" (default) chooses the cache states; BASE=REV adds a build.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=$(cd "${1:-/work/corpus/T}" && pwd)
runs=${2:-3}
modes=${MODES:-warm cold}
work=$(mktemp -d /tmp/annexd-auditd-bench.XXXXXX)
chmod 700 "$work"
daemon_pid=
stop_daemon() {
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
		daemon_pid=
	fi
}
trap 'stop_daemon; rm -rf "$work"' EXIT
builds=(new)
(cd "$repo" && go build -o "$work/new/" ./cmd/annexd ./cmd/annexctl)
if [[ -n ${BASE:-} ]]; then
	mkdir -p "$work/base-src"
	git -C "$repo" archive "$BASE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/base/" ./cmd/annexd ./cmd/annexctl)
	builds+=(base)
fi
export XDG_CONFIG_HOME=$work/config XDG_STATE_HOME=$work/state XDG_RUNTIME_DIR=$work/xdgrun
export ANNEXD_SOCKET=$work/run/annexd.sock
mkdir -p -m 700 "$work/run" "$work/xdgrun"
mkdir -p "$XDG_CONFIG_HOME/annexd"
# No scheduled runs: only the runs the script asks for read the files.
printf '[audit]\ndisabled = true\n' >"$XDG_CONFIG_HOME/annexd/annexd.toml"

dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
warm() { find "$1" -type f -print0 | xargs -0 -P2 -n 256 cat >/dev/null; }
now() { date +%s.%N; }
# cpu PID: user+system seconds of a process so far.
cpu() { awk -v t="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); printf "%.2f\n", ($12 + $13) / t}' "/proc/$1/stat"; }

files=$(find "$tree" -type f | wc -l)
bytes=$(find "$tree" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f\n", s}')
echo "corpus: $tree, $files files, $bytes bytes; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); modes: $modes; builds: ${builds[*]}${BASE:+ (base $BASE)}" >&2
mkdir -p "$work/empty"
"$work/new/annexd" --socket "$ANNEXD_SOCKET" --no-default-ignores --exit-when-idle --index "$work/calibrated.db" "$work/empty" 2>>"$work/log"
find "$tree" -type f >"$work/list"

: >"$work/pass"
for r in $(seq "$runs"); do
	for mode in $modes; do
		for b in "${builds[@]}"; do
			ctl=$work/$b/annexctl
			cp "$work/calibrated.db" "$work/index.db"
			if [[ $mode == cold ]]; then dropcaches; else warm "$tree"; fi
			load=$(cut -d' ' -f1 /proc/loadavg)
			t0=$(now)
			"$work/$b/annexd" --socket "$ANNEXD_SOCKET" --no-default-ignores --index "$work/index.db" "$tree" 2>>"$work/log" &
			daemon_pid=$!
			until "$ctl" status --wait --timeout 10m >/dev/null 2>&1; do
				kill -0 "$daemon_pid" || { tail "$work/log" >&2; exit 1; }
				sleep 0.05
			done
			t1=$(now)
			icpu=$(cpu "$daemon_pid")
			[[ $mode == cold ]] && dropcaches
			t2=$(now)
			"$ctl" audit run --full-speed --wait --json >"$work/run.json"
			t3=$(now)
			acpu=$(cpu "$daemon_pid")
			python3 - "$work/run.json" "$files" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
if run["counts"] != {"ok": int(sys.argv[2])} or run["stopped_by"] != "done":
    sys.exit(f"the audit did not verify every file once: {run}")
if run.get("cache_only"):
    print(f"  note: verified from the page cache only: {run['cache_only']}", file=sys.stderr)
EOF
			line=$(python3 - "$t0" "$t1" "$t2" "$t3" "$icpu" "$acpu" "$load" <<'EOF'
import sys
t0, t1, t2, t3, icpu, acpu, load = map(float, sys.argv[1:])
print(f"{t1 - t0:.2f} {icpu:.2f} {t3 - t2:.2f} {acpu - icpu:.2f} {load:.2f}")
EOF
)
			echo "$mode $b $line" >>"$work/pass"
			read -r iw ic aw ac ld <<<"$line"
			echo "  run $r, $mode, $b: index $iw s (daemon CPU $ic s), audit run --full-speed --wait $aw s (daemon CPU $ac s); load $ld at start" >&2
			if [[ $mode == warm ]]; then
				python3 "$repo/bench/audit_lookup.py" "$ctl" "$work/list" "$r" "$b" >>"$work/lookups"
				tail -n 2 "$work/lookups" >&2
			fi
			stop_daemon
		done
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$work" "$files" "$bytes" <<'EOF'
import collections, json, os, statistics, sys
work, files, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gb, med = nbytes / 1e9, statistics.median
rows = collections.defaultdict(list)  # (mode, build) → [(iw, ic, aw, ac, load)]
order = []
for l in open(f"{work}/pass"):
    if l.strip():
        mode, b, *v = l.split()
        rows[mode, b].append(tuple(map(float, v)))
        order.append((mode, b))
print(f"\n| cache | build | runs | load | annexd initial index (wall / CPU) | `annexctl audit run --full-speed --wait` (wall / CPU) | audit ÷ index throughput |")
print("|---|---|---|---|---|---|---|")
for key in dict.fromkeys(order):
    rs = rows[key]
    iw, ic, aw, ac, ld = (med([r[i] for r in rs]) for i in range(5))
    ratio = med([r[0] / r[2] for r in rs])
    print(f"| {key[0]} | {key[1]} | {len(rs)} | {ld:.1f} | {iw:.2f} / {ic:.2f} s ({gb / iw * 1e3:.0f} MB/s) | "
          f"{aw:.2f} / {ac:.2f} s ({gb / aw * 1e3:.0f} MB/s) | **{ratio:.2f}×** (goal ≥ 0.9×) |")
modes = list(dict.fromkeys(m for m, _ in order))
if any(b == "base" for _, b in order):
    print("\n| cache | audit throughput, this build ÷ base (median of the runs' ratios) | audit CPU, this build ÷ base |")
    print("|---|---|---|")
    for m in modes:
        new, base = rows[m, "new"], rows[m, "base"]
        n = min(len(new), len(base))
        thr = med([base[i][2] / new[i][2] for i in range(n)])
        cpu = med([new[i][3] / base[i][3] for i in range(n) if base[i][3] > 0] or [0])
        print(f"| {m} | {thr:.2f}× | {cpu:.2f}× |")
if os.path.exists(f"{work}/lookups"):
    lk = [json.loads(l) for l in open(f"{work}/lookups")]
    print("\n| build | lookup of a random indexed file | idle p50 / p99 / max (n) | during a full-speed audit p50 / p99 / max (n) | p99 during ÷ idle |")
    print("|---|---|---|---|---|")
    for mode, name in (("process", "`annexctl lookup FILE`, one process each"), ("batch", "`annexctl lookup --batch`, one line at a time")):
        for l in lk:
            if l["mode"] == mode:
                i, d = l["idle"], l["during"]
                print(f"| {l.get('label', '')} | {name}, run {l['run']} | {i['p50']:.2f} / {i['p99']:.2f} / {i['max']:.2f} ms ({i['n']}) | "
                      f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} ms ({d['n']}) | {d['p99'] / i['p99'] if i['p99'] else 0:.2f}× |")
EOF
