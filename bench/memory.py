#!/usr/bin/env python3
"""memory.py — the measuring half of bench/memory.sh (read its comment).

Usage: bench/memory.py WORK TREE IDLE BUILD... (WORK/BUILD/annexd and
annexctl built by memory.sh). Environment: LIMITS, RUNS, PROFILE.
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def status(pid):
    """The FIELDS of /proc/PID/status in KiB; {} once the process is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in FIELDS:
                    out[k] = int(line.split()[1])
    except OSError:
        pass
    return out


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Peaks of FIELDS of a process, sampled every 20 ms."""

    def __init__(self, pid):
        self.pid, self.peak, self.done = pid, {k: 0 for k in FIELDS}, threading.Event()
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def loop(self):
        while not self.done.is_set():
            for k, v in status(self.pid).items():
                self.peak[k] = max(self.peak[k], v)
            self.done.wait(0.02)

    def stop(self):
        self.done.set()
        self.th.join()
        return self.peak


def mib(kib):
    return "%.0f" % (kib / 1024)


class Bench:
    def __init__(self, work, tree, idle, builds):
        self.work, self.tree, self.idle, self.builds = work, tree, idle, builds
        for d in ("run", "empty", "config", "state"):
            os.makedirs(self.w(d), exist_ok=True)
        os.chmod(self.w("run"), 0o700)
        self.sock = self.w("run", "annexd.sock")
        self.env = dict(os.environ, XDG_CONFIG_HOME=self.w("config"), XDG_STATE_HOME=self.w("state"),
                        XDG_RUNTIME_DIR=self.w("run"), ANNEXD_SOCKET=self.sock,
                        ANNEXD_TEST_CALIBRATION_BUDGET="60s")
        for k in ("GOMEMLIMIT", "GOGC"):
            self.env.pop(k, None)
        self.want = self.manifest()
        self.calibrated = self.w("calibrated.db")
        subprocess.run([self.bin(builds[-1], "annexd"), "--socket", self.sock, "--index", self.calibrated,
                        "--exit-when-idle", self.w("empty")], env=self.env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def w(self, *p):
        return os.path.join(self.work, *p)

    def bin(self, build, name):
        return self.w(build, name)

    def manifest(self):
        want = {}
        root = os.fsencode(self.tree)
        with open(self.tree + ".manifest.tsv", "rb") as f:
            for line in f:
                c = line.rstrip(b"\n").split(b"\t")
                want[os.path.join(root, c[0])] = b"SHA256E-s%s--%s" % (c[1], c[2])
        return want

    def fresh_index(self):
        dst = self.w("index.db")
        shutil.copyfile(self.calibrated, dst)
        return dst

    def argv(self, build, index, *flags):
        return [self.bin(build, "annexd"), "--socket", self.sock, "--no-default-ignores", "--index", index,
                *flags, self.tree]

    def env_for(self, build, limit=None):
        env = dict(self.env)
        if limit and limit != "default":
            env["GOMEMLIMIT"] = limit
        prof = os.environ.get("PROFILE")
        if prof:
            d = os.path.join(prof, build)
            os.makedirs(d, exist_ok=True)
            env["ANNEXD_HEAP_PROFILE"] = d
        return env

    def ctl(self, build, *args, **kw):
        return subprocess.run([self.bin(build, "annexctl"), *args], env=self.env, check=True, **kw)

    def check_keys(self, build):
        """Looks up every path of the manifest; returns (wrong keys, files held)."""
        paths = list(self.want)
        inp = b"\0".join(paths) + b"\0"
        # Exit status 1 when a path has no key: counted below.
        out = subprocess.run([self.bin(build, "annexctl"), "lookup", "--batch", "-z"], env=self.env,
                             input=inp, stdout=subprocess.PIPE).stdout
        got = out.split(b"\n")
        if got and got[-1] == b"":
            got.pop()
        bad = abs(len(got) - len(paths))
        for p, k in zip(paths, got):
            if not (k == self.want[p] or k.startswith(self.want[p] + b".")):
                bad += 1
                if bad <= 5:
                    log("  key differs: %r: %r, manifest %r" % (p, k, self.want[p]))
        st = json.loads(self.ctl(build, "status", "--json", stdout=subprocess.PIPE).stdout)
        return bad, st["files"]

    def gc_at(self, build):
        """The collector so far, from the daemon's gctrace lines: cycles,
        and the share of the CPU time since start it took (the runtime's
        own estimate)."""
        n, pct = 0, 0
        with open(self.w(build + ".gc.log"), "rb") as f:
            for line in f:
                m = re.match(rb"gc (\d+) @[\d.]+s (\d+)%", line)
                if m:
                    n, pct = int(m.group(1)), int(m.group(2))
        return n, pct

    def resident(self, build):
        """One scan as a user runs it: peaks, at scan end, after idle."""
        env = dict(self.env_for(build), GODEBUG="gctrace=1")
        t0 = time.perf_counter()
        p = subprocess.Popen(self.argv(build, self.fresh_index()), env=env, stdout=subprocess.DEVNULL,
                             stderr=open(self.w(build + ".gc.log"), "wb"))
        s = Sampler(p.pid)
        try:
            self.ctl(build, "status", "--wait", "--timeout", "60m", stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            end, cpu = status(p.pid), cpu_s(p.pid)
            peak = s.stop()
            gcs, gcpct = self.gc_at(build)
            time.sleep(self.idle)
            idle = status(p.pid)
            bad, held = self.check_keys(build)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait()
        return dict(wall=wall, cpu=cpu, peak=peak, end=end, idle=idle, bad=bad, held=held, gcs=gcs, gcpct=gcpct)

    def first_scan(self, build, limit):
        """A first scan to idle with --exit-when-idle: wall, CPU, peak RSS."""
        idx = self.fresh_index()
        t0 = time.perf_counter()
        p = subprocess.Popen(self.argv(build, idx, "--exit-when-idle"), env=self.env_for(build, limit),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s = Sampler(p.pid)
        _, st, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        peak = s.stop()
        if os.waitstatus_to_exitcode(st) != 0:
            sys.exit("annexd %s (GOMEMLIMIT %s) failed" % (build, limit))
        return dict(wall=wall, cpu=ru.ru_utime + ru.ru_stime, hwm=ru.ru_maxrss, anon=peak["RssAnon"], index=idx)


def main():
    work, tree, idle, builds = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
    b = Bench(work, tree, idle, builds)
    n = len(b.want)
    print("memory.sh: %s, %d files; %d CPUs; load %s; %s" % (tree, n, os.cpu_count(), load(), time.strftime("%Y-%m-%d %H:%M:%S")))
    res = {}
    for build in builds:
        res[build] = b.resident(build)
        log("  %s: %s" % (build, res[build]))
    print("\n| build | peak RSS (VmHWM) | peak RssAnon / RssFile | at scan end: RssAnon / RssFile | idle %gs: RssAnon / RssFile | first scan wall / CPU | GC cycles, GC share of CPU | keys differing from the manifest | files held |" % idle)
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    for build in builds:
        r = res[build]
        print("| %s | %s MiB | %s / %s MiB | %s / %s MiB | %s / %s MiB | %.2f s / %.2f s | %d, %d %% | %d | %d of %d |" % (
            build, mib(r["peak"]["VmHWM"]), mib(r["peak"]["RssAnon"]), mib(r["peak"]["RssFile"]),
            mib(r["end"]["RssAnon"]), mib(r["end"]["RssFile"]), mib(r["idle"]["RssAnon"]), mib(r["idle"]["RssFile"]),
            r["wall"], r["cpu"], r["gcs"], r["gcpct"], r["bad"], r["held"], n))
        failed = failed or r["bad"] != 0 or r["held"] != n
    limits = os.environ.get("LIMITS", "").split()
    if limits:
        runs = int(os.environ.get("RUNS", "3"))
        log("first scans at soft memory limits %s, %d rounds; load %s" % (limits, runs, load()))
        got = {}
        last = {}
        for r in range(runs):
            order = [(bd, lim) for bd in builds for lim in limits]
            if r % 2:
                order.reverse()
            for bd, lim in order:
                x = b.first_scan(bd, lim)
                got.setdefault((bd, lim), []).append(x)
                last[bd] = x
                log("  round %d %s %s: %.2f s wall, %.2f CPU-s, VmHWM %s MiB, RssAnon %s MiB" % (
                    r + 1, bd, lim, x["wall"], x["cpu"], mib(x["hwm"]), mib(x["anon"])))
        ref = (builds[-1], limits[0])
        med = lambda k, key: statistics.median(x[key] for x in got[k])
        print("\nfirst scans, %d rounds alternated, medians; load at end %s\n" % (runs, load()))
        print("| build | GOMEMLIMIT | wall | CPU | wall / CPU against %s %s | peak RSS (VmHWM) | peak RssAnon |" % ref)
        print("|---|---|---|---|---|---|---|")
        for k in got:
            print("| %s | %s | %.2f s | %.2f s | %.2f× / %.2f× | %s MiB | %s MiB |" % (
                k[0], k[1], med(k, "wall"), med(k, "cpu"), med(k, "wall") / med(ref, "wall"),
                med(k, "cpu") / med(ref, "cpu"), mib(max(x["hwm"] for x in got[k])), mib(max(x["anon"] for x in got[k]))))
        for bd in builds:
            d = subprocess.Popen(b.argv(bd, last[bd]["index"]), env=b.env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            try:
                b.ctl(bd, "status", "--wait", "--timeout", "30m", stdout=subprocess.DEVNULL)
                bad, held = b.check_keys(bd)
            finally:
                d.send_signal(signal.SIGTERM)
                d.wait()
            print("\n%s, last first scan: %d keys differ from the manifest, %d of %d files held" % (bd, bad, held, n))
            failed = failed or bad != 0 or held != n
    if failed:
        sys.exit("memory.sh: keys differ from the manifest")


if __name__ == "__main__":
    main()
