#!/usr/bin/env bash
# hash_perfile.sh — git-annex's 2012 per-file table, redone: the whole-file
# cost (stat, open, read, hash, identity checks) of SHA-256 at 1 KiB … 100 MiB
# for inline hashing, the Hasher's pool, and external sha256sum and openssl,
# from `go test -bench PerFile`, COUNT runs (default 3), medians as a
# markdown table, plus each route's cost relative to inline.
#
# Usage: bench/hash_perfile.sh [COUNT] [BENCHTIME (default 1s)]
set -euo pipefail
count=${1:-3}
benchtime=${2:-1s}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
go test -run '^$' -bench '^BenchmarkPerFile$' -benchtime "$benchtime" -count "$count" ./hasher |
	tee /dev/stderr |
	python3 -c '
import re, statistics, sys
wall, cpu, order = {}, {}, []
for line in sys.stdin:
    m = re.match(r"BenchmarkPerFile/(\S+)/(\S+?)-\d+\s+\d+\s+([\d.]+) ns/op.*?([\d.]+) cpu-µs/op", line)
    if not m:
        continue
    size, route = m.group(1), m.group(2)
    if size not in wall:
        wall[size], cpu[size] = {}, {}
        order.append(size)
    wall[size].setdefault(route, []).append(float(m.group(3)) / 1e3)
    cpu[size].setdefault(route, []).append(float(m.group(4)))
routes = ["inline", "pool", "sha256sum", "openssl"]
def fmt(us):
    return "%.1f µs" % us if us < 1000 else "%.2f ms" % (us / 1e3)
def table(title, rows):
    print("\n%s\n" % title)
    print("| size | " + " | ".join(routes) + " | pool ÷ inline | best external ÷ inline |")
    print("|---|" + "---|" * (len(routes) + 2))
    for size in order:
        med = {r: statistics.median(v) for r, v in rows[size].items()}
        cells = [fmt(med[r]) if r in med else "-" for r in routes]
        ext = min(med.get("sha256sum", float("inf")), med.get("openssl", float("inf")))
        print("| %s | %s | %.2f× | %.1f× |" % (size, " | ".join(cells), med["pool"] / med["inline"], ext / med["inline"]))
table("wall time per file (median)", wall)
table("CPU time per file, this process and its children (median)", cpu)
'
