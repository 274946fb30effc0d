#!/usr/bin/env python3
"""ab.py — alternated warm first scans of several annexd builds, the bare loop in every round.

Usage: bench/ab.py TREE RUNS BIN... (annexd binaries; bench/bareloop is built here)
Each run copies its build's calibration index (made by that build on
CALTREE, default an empty directory, so CALTREE=DIR measures a scan into an
index that holds DIR) and
runs annexd --exit-when-idle on TREE, timed with wait4; the order of the
builds alternates between rounds, and medians leave out round 1.
EVICT_EVERY=K: before every run (the bare loop's too), every file is read
into the page cache except every K-th in sorted walk order, which is
dropped with POSIX_FADV_DONTNEED: K=300 is a cache that is nearly warm (a
few pages of the scan from storage), K=10 one that is a tenth cold. Needs
no root.
REWARM=1: read the whole tree again before every run. Where the kernel
pages out what was not touched for a while (DAMON's pageout scheme on the
benchmark machine evicts pages idle for 60 s), one read at the start
leaves later rounds partly cold.
"""
import os, subprocess, sys, shutil, time, statistics, tempfile
tree, runs, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = [os.path.basename(b) for b in bins]
path = dict(zip(names, bins))
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = tempfile.mkdtemp(prefix="ab.")
bare = work + "/bareloop"
subprocess.run(["go", "build", "-o", bare, "./bench/bareloop"], cwd=repo, check=True, env=dict(os.environ, CGO_ENABLED="0"))
env = dict(os.environ, XDG_CONFIG_HOME=work+"/c", XDG_STATE_HOME=work+"/s", XDG_RUNTIME_DIR=work+"/r")
for d in "csr": os.makedirs(work+"/"+d, mode=0o700)
os.makedirs(work+"/empty")
sock = work + "/r/annexd.sock"
def argv(b, idx, t): return [b, "--socket", sock, "--no-default-ignores", "--index", idx, "--exit-when-idle", t]
def timed(a):
    t0 = time.perf_counter(); p = subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read(); _, st, ru = os.wait4(p.pid, 0); w = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(st) != 0: print("FAIL", a, err[-2000:], file=sys.stderr); sys.exit(1)
    return w, ru.ru_utime + ru.ru_stime
# One calibration index per build: a build whose calibration format or
# fingerprint differs from another's would calibrate again in every run.
cal = {n: work + "/cal-%d.db" % i for i, n in enumerate(names)}
for n in names:
    timed(argv(path[n], cal[n], os.environ.get("CALTREE", work + "/empty")))
evict = int(os.environ.get("EVICT_EVERY", "0"))
files = []
if evict:
    for root, ds, fs in os.walk(tree):
        ds.sort(); fs.sort()
        files += [os.path.join(root, f) for f in fs]
def settle():
    """Reads every file into the page cache but every evict-th, which it drops."""
    dropped = 0
    for i, f in enumerate(files):
        fd = os.open(f, os.O_RDONLY)
        if i % evict == 0:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); dropped += os.fstat(fd).st_size
        else:
            while os.read(fd, 1 << 20): pass
        os.close(fd)
    return dropped
if evict:
    print("dropping every %d-th file: %.0f MB of the tree out of the page cache before each run" % (evict, settle() / 1e6), flush=True)
else:
    subprocess.run("find '%s' -type f -print0 | xargs -0 -P2 -n 256 cat >/dev/null" % tree, shell=True)
rewarm = os.environ.get("REWARM") == "1"
def warm():
    subprocess.run("find '%s' -type f -print0 | xargs -0 -P4 -n 256 cat >/dev/null" % tree, shell=True)
res = {n: [] for n in names + ["bare"]}
for r in range(runs):
    order = names + ["bare"]
    if r % 2: order = order[::-1]
    for n in order:
        if evict: settle()
        elif rewarm: warm()
        if n == "bare":
            w, c = timed([bare, tree])
        else:
            idx = work + "/idx.db"; shutil.copyfile(cal[n], idx)
            w, c = timed(argv(path[n], idx, tree)); os.remove(idx)
        res[n].append((w, c)); print("round %d %-10s wall %.2f cpu %.2f load %s" % (r, n, w, c, open("/proc/loadavg").read().split()[0]), flush=True)
for n, v in res.items():
    v2 = v[1:] if len(v) > 1 else v
    print("%-10s median wall %.3f cpu %.3f (n=%d)" % (n, statistics.median(x[0] for x in v2), statistics.median(x[1] for x in v2), len(v2)))
shutil.rmtree(work)
