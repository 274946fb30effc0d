#!/usr/bin/env bash
# hub_trust.sh — the figures of RELIABILITY.md's "One host's credentials
# against the hub": every attack test, verbose, then the lines that carry
# figures (operations refused, forged ids, the hub's memory before and
# after the bad batches, what the decoder allocated before refusing).
#
# The attacks run against the in-process hub; the memory test runs the hub
# in a process of its own (this test binary again), so its peak resident
# memory (VmHWM) is the hub's alone. Under load the times vary; the
# memory and the counts do not.
#
# Usage: bench/hub_trust.sh [RUNS (default 1)]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-1}
cd "$repo"
tests='TestForged|TestReplies|TestAClaim|TestBatchesThat|TestRemovedHost|TestHostsCannot|TestHubConnection|TestStaleAfterHolds|TestBadBatches|TestHandleDrops|TestViewUpgrade'
for run in $(seq "$runs"); do
	echo "== run $run"
	go test -count=1 -v -run "$tests" ./internal/hub/ >"/tmp/hub_trust.$$.log" 2>&1 || { cat "/tmp/hub_trust.$$.log"; exit 1; }
	grep -E '^(--- |    --- )|refused|forged|hub memory' "/tmp/hub_trust.$$.log" | grep -v '^=== RUN'
	go test -count=1 -v -run 'TestExpanding|TestBatchBounds|TestMsgID' ./internal/hubwire/ | grep -E '^--- |refused after'
	go test -count=1 -v -run TestStateOfAnotherHostIsIgnored ./internal/publish/ | grep -E '^--- '
	go test -count=1 -v -run TestHubForeignClaim ./e2e/ | grep -E '^--- '
done
rm -f "/tmp/hub_trust.$$.log"
