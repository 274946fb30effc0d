#!/usr/bin/env python3
"""The measuring half of bench/lookup.sh: given a running annexd (its pid)
on TREE and the annexctl binary, print the API and CLI figures as a
markdown table. Every figure is a wall time and, because the build machine
is shared, also the CPU time of annexctl plus the daemon (from
/proc/PID/stat) or of the anchor program.

Usage: api_lookup.py WORKDIR TREE RUNS DAEMON_PID   (WORKDIR holds annexctl and list)
"""
import os
import random
import resource
import statistics
import subprocess
import sys
import time

work, tree, runs, dpid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ctl = os.path.join(work, "annexctl")
listfile = os.path.join(work, "list")
paths = open(listfile, "rb").read().splitlines()
random.seed(1)
sample = random.sample(paths, min(300, len(paths)))
tick = os.sysconf("SC_CLK_TCK")


def daemon_cpu():
    f = open("/proc/%d/stat" % dpid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(argv, stdin=None):
    """Wall seconds, and CPU seconds of the child plus the daemon."""
    c0, d0 = children_cpu(), daemon_cpu()
    t = time.perf_counter()
    subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    return wall, (children_cpu() - c0) + (daemon_cpu() - d0)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def ms(s):
    return "%.2f ms" % (s * 1e3)


print("load average at start: %.1f on %d CPUs" % (os.getloadavg()[0], os.cpu_count()))
print()
print("| measurement | figure |")
print("|---|---|")

# Interleave annexctl and /bin/true so both see the same machine load.
look, true, lcpu = [], [], []
for p in sample:
    w, c = one([ctl, "lookup", p])
    look.append(w)
    lcpu.append(c)
    true.append(one(["/bin/true"])[0])
print("| `annexctl lookup FILE`, process start included, wall p50 / p90 (%d files) | %s / %s |"
      % (len(sample), ms(pct(look, 50)), ms(pct(look, 90))))
print("| same, CPU per call (annexctl + daemon), mean | %s |" % ms(statistics.mean(lcpu)))
print("| `/bin/true` from the same harness, wall p50 (fork+exec floor) | %s |" % ms(pct(true, 50)))

bw, bc = [], []
for _ in range(runs):
    with open(listfile, "rb") as f:
        w, c = one([ctl, "lookup", "--batch"], stdin=f)
    bw.append(w)
    bc.append(c)
with open(listfile, "rb") as f:
    out = subprocess.run([ctl, "lookup", "--batch"], stdin=f, stdout=subprocess.PIPE, check=True).stdout
keys = sum(1 for line in out.splitlines() if line)
assert keys == len(paths), "batch answered %d keys for %d files" % (keys, len(paths))
b, c = statistics.median(bw), statistics.median(bc)
print("| `annexctl lookup --batch`, %s paths, wall (median of %d) | %.2f s = %s paths/s |"
      % (format(len(paths), ","), runs, b, format(int(len(paths) / b), ",")))
print("| same, CPU (annexctl + daemon) | %.2f s = %s paths per CPU-second |" % (c, format(int(len(paths) / c), ",")))


def timed(argv):
    ws, cs = [], []
    for _ in range(runs):
        w, c = one(argv)
        ws.append(w)
        cs.append(c)
    return statistics.median(ws), statistics.median(cs)


groups = len(subprocess.run([ctl, "dups", "--json"], stdout=subprocess.PIPE, check=True).stdout.splitlines())
jd_out = subprocess.run(["jdupes", "-r", "-q", tree], stdout=subprocess.PIPE, check=True).stdout
jgroups = sum(1 for blk in jd_out.split(b"\n\n") if blk.strip())
dw, dc = timed([ctl, "dups"])
jw, jc = timed(["jdupes", "-r", "-q", tree])
print("| `annexctl dups` (%d groups), wall / CPU incl. daemon (median of %d) | %.3f s / %.3f s |" % (groups, runs, dw, dc))
print("| `jdupes -r` (%d groups), wall / CPU | %.3f s / %.3f s |" % (jgroups, jw, jc))
print("| dups ÷ jdupes, wall / CPU | %.3f× / %.3f× |" % (dw / jw, dc / jc))
