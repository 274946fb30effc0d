#!/usr/bin/env bash
# hash_large.sh — one large file, warm page cache: `annexctl calckey` against
# `sha256sum` and `openssl dgst -sha256`, timed in the same run, REPS times
# (default 3), as throughputs and ratios; medians at the end.
#
# Usage: bench/hash_large.sh [SIZE_MIB (default 1024)] [REPS (default 3)]
# The file lives in $TMPDIR (default /tmp), never in the repository, and is
# removed on exit. Target: annexctl ≥ 0.95× the faster anchor.
set -euo pipefail

size_mib=${1:-1024}
reps=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hash_large.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "building annexctl…" >&2
(cd "$repo" && go build -o "$work/annexctl" ./cmd/annexctl)
file="$work/large.bin"
echo "writing a ${size_mib} MiB file…" >&2
head -c "$((size_mib << 20))" /dev/urandom >"$file"
cat "$file" >/dev/null # warm the page cache
bytes=$(stat -c %s "$file")

# seconds CMD… — run CMD (output discarded) and print "WALL CPU" in seconds:
# wall-clock time, and the user+system CPU time it used. Wall time is the
# target; CPU time is less disturbed by other load on a shared machine.
seconds() {
	python3 - "$work/out" "$@" <<'PY'
import resource, subprocess, sys, time
out = open(sys.argv[1], "wb")
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
wall = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
if rc != 0:
    sys.exit("FAILED: %s" % " ".join(sys.argv[2:]))
print("%.6f %.6f" % (wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)))
PY
}
gbps() { echo "scale=3; $bytes / $1 / 1000000000" | bc -l; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Keys must agree before any timing counts.
want=$(sha256sum <"$file" | cut -d' ' -f1)
got=$("$work/annexctl" calckey --backend SHA256 "$file")
[[ $got == "SHA256-s$bytes--$want" ]] || { echo "annexctl printed $got, sha256sum says $want" >&2; exit 1; }

printf '%-4s %14s %14s %14s %10s %10s  %s\n' rep annexctl sha256sum openssl "÷sha256sum" "÷openssl" "CPU-time throughput: annexctl / sha256sum / openssl"
r_a=() r_s=() r_o=() q_best=() c_a=() c_o=()
for ((i = 1; i <= reps; i++)); do
	# Rotate the order so that a burst of load elsewhere does not always
	# hit the same contender.
	case $((i % 3)) in
	1) order="a s o" ;; 2) order="s o a" ;; 0) order="o a s" ;;
	esac
	for c in $order; do
		case $c in
		a) read -r ta ca < <(seconds "$work/annexctl" calckey --backend SHA256 "$file") ;;
		s) read -r ts cs < <(seconds sha256sum "$file") ;;
		o) read -r to co < <(seconds openssl dgst -sha256 "$file") ;;
		esac
	done
	ga=$(gbps "$ta") gs=$(gbps "$ts") go=$(gbps "$to")
	rs=$(echo "scale=3; $ga / $gs" | bc -l) ro=$(echo "scale=3; $ga / $go" | bc -l)
	best=$(echo "if ($gs > $go) $gs else $go" | bc -l)
	q=$(echo "scale=3; $ga / $best" | bc -l)
	printf '%-4s %9.3f GB/s %9.3f GB/s %9.3f GB/s %9.2fx %9.2fx  %.3f / %.3f / %.3f GB/s\n' \
		"$i" "$ga" "$gs" "$go" "$rs" "$ro" "$(gbps "$ca")" "$(gbps "$cs")" "$(gbps "$co")"
	r_a+=("$ga") r_s+=("$gs") r_o+=("$go") q_best+=("$q") c_a+=("$(gbps "$ca")") c_o+=("$(gbps "$co")")
done
printf 'median wall: annexctl %.3f GB/s, sha256sum %.3f GB/s, openssl %.3f GB/s; annexctl / faster anchor = %.2fx (target >= 0.95x)\n' \
	"$(median "${r_a[@]}")" "$(median "${r_s[@]}")" "$(median "${r_o[@]}")" "$(median "${q_best[@]}")"
printf 'median CPU-time throughput: annexctl %.3f GB/s, openssl %.3f GB/s\n' "$(median "${c_a[@]}")" "$(median "${c_o[@]}")"
printf 'load average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
