#!/usr/bin/env python3
"""partial_cache.py — first scans with part of the tree out of the page cache.

Usage: bench/partial_cache.py TREE K RUNS BIN... (annexd binaries, or scripts
that exec one with a different environment, e.g. GOMAXPROCS=2)
Before each run every file is read into the page cache except every K-th
(in sorted walk order), which is dropped with POSIX_FADV_DONTNEED; then one
build's first scan of TREE into a copy of one calibration index is timed
with wait4. The builds alternate between rounds; medians of all rounds.
K=300 is a cache that is nearly warm (a few pages of the scan from
storage), K=10 one that is a tenth cold. Needs no root.
"""
import os, sys, subprocess, shutil, time, statistics, tempfile
tree, k, runs, bins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
files = []
for root, ds, fs in os.walk(tree):
    ds.sort(); fs.sort()
    files += [os.path.join(root, f) for f in fs]
work = tempfile.mkdtemp(prefix="pt.")
env = dict(os.environ, XDG_CONFIG_HOME=work+"/c", XDG_STATE_HOME=work+"/s", XDG_RUNTIME_DIR=work+"/r")
for d in "csr": os.makedirs(work+"/"+d, mode=0o700)
os.makedirs(work+"/empty")
sock = work + "/r/a.sock"
def argv(b, idx, t): return [b, "--socket", sock, "--no-default-ignores", "--index", idx, "--exit-when-idle", t]
def timed(a):
    t0 = time.perf_counter(); p = subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read(); _, st, ru = os.wait4(p.pid, 0); w = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(st) != 0: print("FAIL", a, err[-2000:], file=sys.stderr); sys.exit(1)
    return w, ru.ru_utime + ru.ru_stime
def settle(evict):
    dropped = 0
    for i, f in enumerate(files):
        fd = os.open(f, os.O_RDONLY)
        if evict and i % k == 0:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); dropped += os.fstat(fd).st_size
        else:
            while os.read(fd, 1 << 20): pass
        os.close(fd)
    return dropped
cal = work + "/cal.db"; timed(argv(bins[0], cal, work + "/empty"))
res = {b: [] for b in bins}
for r in range(runs):
    for b in (bins if r % 2 == 0 else bins[::-1]):
        d = settle(True); idx = work + "/idx.db"; shutil.copyfile(cal, idx)
        w, c = timed(argv(b, idx, tree)); os.remove(idx); res[b].append((w, c))
        print("round %d %-24s dropped %.0f MB wall %.2f cpu %.2f" % (r, os.path.basename(b), d/1e6, w, c), flush=True)
for b, v in res.items():
    print("%-24s median wall %.3f cpu %.3f (n=%d)" % (os.path.basename(b), statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), len(v)))
shutil.rmtree(work)
