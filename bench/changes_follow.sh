#!/usr/bin/env bash
# changes_follow.sh — changes a second through `annexctl changes --follow`
# (issue 41 item 3), each beside its anchor measured in the same run (not
# run by CI):
#
#   1. follow: N new files are written into a watched root while
#      `annexctl changes --since CURSOR --follow -z` runs; the rate is N
#      over the time from the first write until --follow has printed all
#      N changes;
#   2. index: the anchor, the same N files over the time until
#      `annexctl status --wait` says the daemon is idle (the indexer's
#      own rate: --follow cannot be faster);
#   3. read: the N changes read back afterwards with
#      `annexctl changes --since CURSOR -z` (the feed alone, no indexing).
#
# Usage: bench/changes_follow.sh [N (default 20000)] [RUNS (default 3)]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-20000}
runs=${2:-3}
work=$(mktemp -d /tmp/annexd-changes-bench.XXXXXX)
chmod 700 "$work"
daemon_pid=
follow_pid=
cleanup() {
	[[ -n $follow_pid ]] && kill -INT "$follow_pid" 2>/dev/null && wait "$follow_pid" 2>/dev/null || true
	if [[ -n $daemon_pid ]]; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
(cd "$repo" && go build -o "$work/bin/" ./cmd/annexd ./cmd/annexctl)
ctl() { "$work/bin/annexctl" --socket "$work/sock" "$@"; }
now() { date +%s.%N; }

mkdir -p "$work/root"
"$work/bin/annexd" --socket "$work/sock" --index "$work/index.db" --calibrate never \
	--quiet-delay 50ms "$work/root" 2>"$work/daemon.log" &
daemon_pid=$!
ctl status --wait --timeout 2m >/dev/null

printf 'run\tN\tfollow/s\tindex/s\tread/s\tfollow÷index\n'
for run in $(seq 1 "$runs"); do
	dir="$work/root/r$run"
	mkdir "$dir"
	ctl status --wait --timeout 2m >/dev/null
	cursor=$(ctl changes --now)
	out="$work/follow.$run"
	# the binary itself, not the ctl function: a background function is
	# a subshell, which would take the SIGINT meant for annexctl
	"$work/bin/annexctl" --socket "$work/sock" changes --since "$cursor" --follow -z >"$out" &
	follow_pid=$!
	t0=$(now)
	python3 - "$dir" "$n" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f"f{i:06d}"), "w") as f:
        f.write(f"changes bench {i}\n")
PY
	ctl status --wait --timeout 10m >/dev/null
	t_index=$(now)
	# six NUL-terminated fields a change
	while (($(tr -cd '\0' <"$out" | wc -c) < 6 * n)); do sleep 0.05; done
	t_follow=$(now)
	kill -INT "$follow_pid"
	wait "$follow_pid" || true
	follow_pid=
	t1=$(now)
	got=$(ctl changes --since "$cursor" -z | tr -cd '\0' | wc -c)
	t2=$(now)
	if ((got != 6 * n)); then
		echo "read back $((got / 6)) changes, want $n" >&2
		exit 1
	fi
	python3 -c "
n=$n; f=$t_follow-$t0; i=$t_index-$t0; r=$t2-$t1
print(f'$run\t{n}\t{n/f:.0f}\t{n/i:.0f}\t{n/r:.0f}\t{i/f:.2f}')"
done
