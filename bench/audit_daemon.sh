#!/usr/bin/env bash
# audit_daemon.sh — the audit through the real daemon and CLI, each figure
# beside its anchor measured in the same run (not run by CI):
#
#   1. annexd indexes TREE (daemon start to idle), then
#      `annexctl audit run --full-speed --wait` reads all of it again on
#      the same daemon (goal: ≥ 0.9× the index's throughput); warm page
#      cache, and cold with COLD=1 (drops the page cache before the index
#      and before the audit, as root: it slows everyone on the machine);
#   2. lookup latency of random indexed files, idle and during a second
#      full-speed audit: one `annexctl lookup FILE` process each, and one
#      line at a time through `annexctl lookup --batch` (warm runs only).
#
# Usage: bench/audit_daemon.sh [TREE (default /work/corpus/T)] [RUNS (default 3)]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=$(cd "${1:-/work/corpus/T}" && pwd)
runs=${2:-3}
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
(cd "$repo" && go build -o "$work/" ./cmd/annexd ./cmd/annexctl)
export XDG_CONFIG_HOME=$work/config XDG_STATE_HOME=$work/state XDG_RUNTIME_DIR=$work/xdgrun
export ANNEXD_SOCKET=$work/run/annexd.sock
mkdir -p -m 700 "$work/run" "$work/xdgrun"
mkdir -p "$XDG_CONFIG_HOME/annexd"
# No scheduled runs: only the runs the script asks for read the files.
printf '[audit]\ndisabled = true\n' >"$XDG_CONFIG_HOME/annexd/annexd.toml"
annexd=("$work/annexd" --socket "$ANNEXD_SOCKET" --no-default-ignores)
ctl=$work/annexctl

cold() { [[ -n ${COLD:-} ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; }; true; }
warm() { find "$1" -type f -print0 | xargs -0 -P2 -n 256 cat >/dev/null; }
now() { date +%s.%N; }
# cpu PID: user+system seconds of a process so far.
cpu() { awk -v t="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); printf "%.2f\n", ($12 + $13) / t}' "/proc/$1/stat"; }

files=$(find "$tree" -type f | wc -l)
bytes=$(find "$tree" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f\n", s}')
echo "corpus: $tree, $files files, $bytes bytes; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg); cache: $([[ -n ${COLD:-} ]] && echo cold || echo warm)" >&2
[[ -n ${COLD:-} ]] || warm "$tree"
mkdir -p "$work/empty"
"${annexd[@]}" --exit-when-idle --index "$work/calibrated.db" "$work/empty" 2>>"$work/log"
find "$tree" -type f >"$work/list"

: >"$work/pass"
for r in $(seq "$runs"); do
	cp "$work/calibrated.db" "$work/index.db"
	cold
	load=$(cut -d' ' -f1 /proc/loadavg)
	t0=$(now)
	"${annexd[@]}" --index "$work/index.db" "$tree" 2>>"$work/log" &
	daemon_pid=$!
	until "$ctl" status --wait --timeout 10m >/dev/null 2>&1; do
		kill -0 "$daemon_pid" || { tail "$work/log" >&2; exit 1; }
		sleep 0.05
	done
	t1=$(now)
	icpu=$(cpu "$daemon_pid")
	cold
	t2=$(now)
	"$ctl" audit run --full-speed --wait --json >"$work/run.json"
	t3=$(now)
	acpu=$(cpu "$daemon_pid")
	python3 - "$work/run.json" "$files" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
if run["counts"] != {"ok": int(sys.argv[2])} or run["stopped_by"] != "done":
    sys.exit(f"the audit did not verify every file once: {run}")
EOF
	line=$(python3 - "$t0" "$t1" "$t2" "$t3" "$icpu" "$acpu" "$load" <<'EOF'
import sys
t0, t1, t2, t3, icpu, acpu, load = map(float, sys.argv[1:])
print(f"{t1 - t0:.2f} {icpu:.2f} {t3 - t2:.2f} {acpu - icpu:.2f} {load:.2f}")
EOF
)
	echo "$line" >>"$work/pass"
	read -r iw ic aw ac ld <<<"$line"
	echo "  run $r: index $iw s (daemon CPU $ic s), audit run --full-speed --wait $aw s (daemon CPU $ac s); load $ld at start" >&2
	if [[ -z ${COLD:-} ]]; then
		python3 "$repo/bench/audit_lookup.py" "$ctl" "$work/list" "$r" >>"$work/lookups"
		tail -n 2 "$work/lookups" >&2
	fi
	stop_daemon
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$work" "$files" "$bytes" <<'EOF'
import json, os, statistics, sys
work, files, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [list(map(float, l.split())) for l in open(f"{work}/pass") if l.strip()]
gb, med = nbytes / 1e9, statistics.median
print(f"\n| run | load | annexd initial index (wall / CPU) | `annexctl audit run --full-speed --wait` (wall / CPU) | audit ÷ index throughput |")
print("|---|---|---|---|---|")
for i, (iw, ic, aw, ac, ld) in enumerate(rows, 1):
    print(f"| {i} | {ld:.1f} | {iw:.2f} / {ic:.2f} s ({gb / iw * 1e3:.0f} MB/s) | {aw:.2f} / {ac:.2f} s ({gb / aw * 1e3:.0f} MB/s) | {iw / aw:.2f}× |")
print(f"| median | | {gb / med([r[0] for r in rows]) * 1e3:.0f} MB/s | {gb / med([r[2] for r in rows]) * 1e3:.0f} MB/s | **{med([r[0] / r[2] for r in rows]):.2f}×** (goal ≥ 0.9×) |")
if os.path.exists(f"{work}/lookups"):
    lk = [json.loads(l) for l in open(f"{work}/lookups")]
    print("\n| lookup of a random indexed file | idle p50 / p99 / max (n) | during a full-speed audit p50 / p99 / max (n) |")
    print("|---|---|---|")
    for mode, name in (("process", "`annexctl lookup FILE`, one process each"), ("batch", "`annexctl lookup --batch`, one line at a time")):
        for l in lk:
            if l["mode"] == mode:
                i, d = l["idle"], l["during"]
                print(f"| {name}, run {l['run']} | {i['p50']:.2f} / {i['p99']:.2f} / {i['max']:.2f} ms ({i['n']}) | {d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} ms ({d['n']}) |")
EOF
