#!/usr/bin/env python3
"""scale.py — how the store and the watcher grow toward 10^7 files.

Runs the store's BenchmarkStoreScale at each record count of RECORDS
(default 100000,1000000,10000000) and the watcher's
BenchmarkWatchMemoryPerDir at each directory count of DIRS (default
10000,100000,1000000; a made tree, 100 directories of many) and on each
real tree of TREES (default /usr; their directories hold fewer
subdirectories each, so more maps), one process each, and prints markdown
tables: every figure at every size, and its growth against the smallest size
(1.00 is flat; the per-record and per-directory figures should stay near
it, the whole-index ones grow with the index).

The store's row holds its anchor from the same process: raw bbolt given
the same records, three puts each (insert-cpu-x-anchor is annexd's insert
CPU over it). 10^7 records take about 4 GB in TMPDIR (383 B a record)
and, with 10^5 and 10^6, 28 minutes on two cores (stop 49). A watcher size beyond fs.inotify.max_user_watches raises it for
the run (root) and sets it back afterwards; each watch also costs the
kernel about 1 KiB.

Usage: bench/scale.py [store] [watcher]   (both when none is given)
Run it from the repository's top directory; load and date are printed.
"""
import os
import re
import subprocess
import sys
import time

WATCHES = "/proc/sys/fs/inotify/max_user_watches"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def bench(pkg, name, env):
    """One benchmark run; its metrics as {unit: value}."""
    cmd = ["go", "test", "-run", "^$", "-bench", "^Benchmark%s$" % name, "-benchtime", "1x", "-timeout", "3h", pkg]
    log("running", " ".join("%s=%s" % kv for kv in env.items()), " ".join(cmd), "load", load())
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (name, out.stdout, out.stderr))
    for line in out.stdout.splitlines():
        if line.startswith("Benchmark" + name):
            log(line)  # kept even if a later size is cut short
            fields = line.split()[2:]
            return {u: float(v) for v, u in zip(fields[0::2], fields[1::2]) if u != "ns/op"}
    sys.exit("%s printed no result:\n%s" % (name, out.stdout))


def table(title, sizes, runs):
    units = sorted({u for r in runs for u in r})
    print("\n### %s\n" % title)
    print("| figure | " + " | ".join("%g" % s for s in sizes) + " | growth, largest / smallest |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for u in units:
        vals = [r.get(u) for r in runs]
        cells = ["%.4g" % v if v is not None else "" for v in vals]
        growth = "%.2f×" % (vals[-1] / vals[0]) if vals[0] and vals[-1] is not None else ""
        print("| %s | %s | %s |" % (u, " | ".join(cells), growth))


def sizes(var, default):
    return [int(x) for x in os.environ.get(var, default).split(",") if x]


def store():
    ns = sizes("RECORDS", "100000,1000000,10000000")
    runs = [bench("./store/", "StoreScale", {"ANNEXD_BENCH_RECORDS": str(n)}) for n in ns]
    table("store, records (load %s)" % load(), ns, runs)


def watcher():
    ns = sizes("DIRS", "10000,100000,1000000")
    limit = int(open(WATCHES).read())
    need = max(ns) + max(ns) // 10 + 1000
    if need > limit:
        log("raising fs.inotify.max_user_watches from %d to %d for the run" % (limit, need))
        open(WATCHES, "w").write(str(need))
    try:
        runs = [bench("./watcher/", "WatchMemoryPerDir", {"ANNEXD_BENCH_DIRS": str(n)}) for n in ns]
    finally:
        if need > limit:
            open(WATCHES, "w").write(str(limit))
    for n, r in zip(ns, runs):
        if r.get("watches", 0) < n:
            sys.exit("only %d of %d directories watched" % (r.get("watches", 0), n))
    table("watcher, directories (load %s; fs.inotify.max_user_watches here: %d)" % (load(), limit), ns, runs)
    trees = [t for t in os.environ.get("TREES", "/usr").split(",") if t]
    if trees:
        print("\n| real tree | directories watched | heap-B/dir |\n|---|---|---|")
    for t in trees:
        r = bench("./watcher/", "WatchMemoryPerDir", {"ANNEXD_BENCH_TREE": t})
        print("| %s | %d | %.0f |" % (t, r["watches"], r["heap-B/dir"]))


def main():
    which = sys.argv[1:] or ["store", "watcher"]
    print("## scale.py, %s, %s" % (time.strftime("%Y-%m-%d %H:%M"), subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()))
    for w in which:
        {"store": store, "watcher": watcher}[w]()


if __name__ == "__main__":
    main()
