#!/usr/bin/env python3
"""The lookup half of bench/audit_daemon.sh: with annexd running and idle,
time lookups of random indexed files, idle and then during a full-speed
audit run that this script starts. Each mode prints one JSON line:
{"run", "mode", "idle": {p50, p99, max, n}, "during": {...}} in ms.

Modes: "process" runs `annexctl lookup FILE` once per file (process start
included); "batch" writes one path at a time to `annexctl lookup --batch`
and waits for its line. Only the samples that ended before the audit run
did count as "during".

Usage: audit_lookup.py ANNEXCTL LISTFILE RUN [LABEL]
LABEL, when given, is added to each line as "label" (which build ran).
"""
import json
import random
import statistics
import subprocess
import sys
import time

ctl, listfile, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
label = sys.argv[4] if len(sys.argv) > 4 else ""
paths = [p for p in open(listfile, "rb").read().split(b"\n") if p]
rng = random.Random(run)
IDLE_PROCESS, IDLE_BATCH = 200, 2000


def stats(ms):
    ms = sorted(ms)
    if not ms:
        return {"p50": 0, "p99": 0, "max": 0, "n": 0}
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else [ms[0]] * 99
    return {"p50": q[49], "p99": q[98], "max": ms[-1], "n": len(ms)}


def one_process(path):
    t = time.perf_counter()
    r = subprocess.run([ctl, "lookup", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - t) * 1e3
    if r.returncode != 0 or not r.stdout.startswith(b"SHA256E-"):
        sys.exit(f"lookup {path!r}: exit {r.returncode} {r.stdout!r} {r.stderr!r}")
    return ms


class Batch:
    def __init__(self):
        self.p = subprocess.Popen([ctl, "lookup", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def one(self, path):
        t = time.perf_counter()
        self.p.stdin.write(path + b"\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        ms = (time.perf_counter() - t) * 1e3
        if not line.startswith(b"SHA256E-"):
            sys.exit(f"lookup --batch {path!r}: {line!r}")
        return ms

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def during(fn):
    """Runs fn on random paths while a full-speed audit runs."""
    audit = subprocess.Popen([ctl, "audit", "run", "--full-speed", "--wait", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.2)  # let the run begin before the first sample
    out = []
    while audit.poll() is None:
        ms = fn(rng.choice(paths))
        if audit.poll() is None:
            out.append(ms)
    stdout, stderr = audit.communicate()
    run_ = json.loads(stdout)
    if audit.returncode != 0 or run_["stopped_by"] != "done":
        sys.exit(f"audit run: exit {audit.returncode} {stdout!r} {stderr!r}")
    return out


idle = [one_process(rng.choice(paths)) for _ in range(IDLE_PROCESS)]
busy = during(one_process)
print(json.dumps({"run": run, "label": label, "mode": "process", "idle": stats(idle), "during": stats(busy)}), flush=True)

b = Batch()
idle = [b.one(rng.choice(paths)) for _ in range(IDLE_BATCH)]
busy = during(b.one)
b.close()
print(json.dumps({"run": run, "label": label, "mode": "batch", "idle": stats(idle), "during": stats(busy)}), flush=True)
