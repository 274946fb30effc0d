#!/usr/bin/env python3
"""verify_corpus.py — is the daemon's index of the benchmark corpus exactly the truth?

Copies the corpus to a scratch directory, indexes the copy with the real
annexd, and checks through the real annexctl that every file's key has the
corpus manifest's SHA-256 and size and that `annexctl dups` lists exactly the
duplicate groups the manifest's digests make (files of at least one byte;
the wasted bytes too). Then it changes the copy while the daemon runs
(rewrites keeping size and mtime, appends, truncations, renames and moves
of files and directories, deletions, new copies, hardlinks, new trees), and
again while it is stopped, and after each round checks the index against
digests computed by this script from the files themselves. Every path the
daemon calls current must have its true key; every file must be indexed;
no deleted file may be. Exits 1 on any difference.

Usage: bench/verify_corpus.py [TREE (default /work/corpus/T)] [--ops N] [--seed S]
Needs TREE.manifest.tsv beside TREE (gen_corpus.py writes it) and ~2× the
corpus's size free under /tmp. Takes about a minute on the 3 GB corpus.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def truth_from_tree(root):
    """path (bytes, absolute) → (size, sha256) for every regular file."""
    out = {}
    for dirpath, _, files in os.walk(os.fsencode(root)):
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not (st.st_mode & 0o170000 == 0o100000):
                continue
            out[p] = (st.st_size, sha256_file(p))
    return out


def truth_from_manifest(manifest, root):
    out = {}
    with open(manifest, "rb") as f:
        for line in f:
            rel, size, digest = line.rstrip(b"\n").split(b"\t")[:3]
            out[os.path.join(os.fsencode(root), rel)] = (int(size), digest.decode())
    return out


def parse_key(k):
    """SHA256E-s<size>--<hex>[.ext] → (size, hex)."""
    backend, rest = k.split("-s", 1)
    size, name = rest.split("--", 1)
    assert backend in ("SHA256E", "SHA256"), k
    return int(size), name[:64]


class Daemon:
    def __init__(self, work, tree):
        self.work, self.tree = work, tree
        self.env = dict(os.environ, XDG_RUNTIME_DIR=f"{work}/run", XDG_STATE_HOME=f"{work}/state",
                        XDG_CONFIG_HOME=f"{work}/config")
        self.env.pop("ANNEXD_SOCKET", None)
        self.proc = None

    def start(self):
        self.log = open(f"{self.work}/annexd.log", "ab")
        self.proc = subprocess.Popen(
            [f"{self.work}/annexd", "--no-default-ignores", "--index", f"{self.work}/index.db", self.tree],
            env=self.env, stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while self.ctl("status", check=False).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit(f"verify: annexd did not start; see {self.work}/annexd.log")
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        if self.proc.wait(timeout=30) != 0:
            sys.exit(f"verify: annexd exited with {self.proc.returncode}; see {self.work}/annexd.log")
        self.log.close()

    def ctl(self, *args, stdin=None, check=True):
        r = subprocess.run([f"{self.work}/annexctl", *args], env=self.env, input=stdin,
                           capture_output=True)
        if check and r.returncode not in (0, 1):
            sys.exit(f"verify: annexctl {' '.join(args)}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
        return r

    def wait_idle(self):
        self.ctl("status", "--wait", "--timeout", "10m")


def check(d, truth, label):
    """Compares the index with truth; returns the number of differences."""
    bad = 0
    paths = sorted(truth)
    out = d.ctl("lookup", "--batch", "-z", "--json", stdin=b"".join(p + b"\0" for p in paths)).stdout
    seen = 0
    for line in out.splitlines():
        o = json.loads(line)
        p = os.fsencode(o["path"]) if "path_b64" not in o else __import__("base64").b64decode(o["path_b64"])
        seen += 1
        size, digest = truth[p]
        if o["state"] != "current":
            bad += 1
            print(f"  {label}: {p!r}: state {o['state']}, want current ({o.get('message', '')})")
            continue
        if parse_key(o["key"]) != (size, digest):
            bad += 1
            print(f"  {label}: {p!r}: key {o['key']}, true size {size} sha256 {digest}")
    if seen != len(paths):
        bad += 1
        print(f"  {label}: {seen} answers for {len(paths)} paths")

    st = json.loads(d.ctl("status", "--json").stdout)
    if st["files"] != len(truth):
        bad += 1
        print(f"  {label}: index holds {st['files']} files, the tree {len(truth)}")

    want = {}
    for p, (size, digest) in truth.items():
        if size > 0:
            want.setdefault(digest, set()).add(p)
    inode = {p: (os.lstat(p).st_dev, os.lstat(p).st_ino) for ps in want.values() if len(ps) > 1 for p in ps}
    want_groups = {}
    for digest, ps in want.items():
        if len({inode[p] for p in ps} if len(ps) > 1 else ps) > 1:
            want_groups[digest] = (frozenset(ps), truth[next(iter(ps))][0] * (len({inode[p] for p in ps}) - 1))
    got_groups = {}
    for line in d.ctl("dups", "--json").stdout.splitlines():
        g = json.loads(line)
        ps = frozenset(__import__("base64").b64decode(f["path_b64"]) if "path_b64" in f else os.fsencode(f["path"])
                       for f in g["files"])
        got_groups[g["digest"]] = (ps, g["wasted"])
    for digest in sorted(set(want_groups) | set(got_groups)):
        if want_groups.get(digest) != got_groups.get(digest):
            bad += 1
            print(f"  {label}: group {digest[:16]}: index {got_groups.get(digest)}, truth {want_groups.get(digest)}")
    waste = sum(w for _, w in want_groups.values())
    print(f"{label}: {len(paths):,} files, {len(want_groups):,} duplicate groups, "
          f"{waste / 2**20:,.1f} MiB wasted: {bad} differences", flush=True)
    return bad


def mutate(root, rng, n, keep_mtime=True):
    """n random changes under root; returns a log of what was done.
    keep_mtime: rewrites set the mtime back, so only ctime shows them."""
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs]
    dirs = [dp for dp, _, _ in os.walk(root) if dp != root]
    done = []
    for i in range(n):
        op = rng.choice(["rewrite", "append", "truncate", "rename", "move", "delete", "copy",
                         "hardlink", "newtree", "mvdir"])
        if not files:
            break
        f = rng.choice(files)
        if not os.path.lexists(f):
            continue
        try:
            if op == "rewrite":  # same size, same mtime, new bytes
                st = os.stat(f)
                with open(f, "r+b") as fh:
                    fh.write(rng.randbytes(min(st.st_size, 4096)) if st.st_size else b"")
                if keep_mtime:
                    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
            elif op == "append":
                with open(f, "ab") as fh:
                    fh.write(rng.randbytes(rng.randint(1, 10000)))
            elif op == "truncate":
                os.truncate(f, rng.randint(0, max(0, os.path.getsize(f) - 1)))
            elif op == "rename":
                os.rename(f, f + f".r{i}")
                files.append(f + f".r{i}")
            elif op == "move":
                dst = os.path.join(rng.choice(dirs), f"moved{i}_" + os.path.basename(f))
                os.rename(f, dst)
                files.append(dst)
            elif op == "delete":
                os.remove(f)
            elif op == "copy":
                dst = os.path.join(rng.choice(dirs), f"copy{i}_" + os.path.basename(f))
                shutil.copyfile(f, dst)
                files.append(dst)
            elif op == "hardlink":
                dst = os.path.join(rng.choice(dirs), f"link{i}_" + os.path.basename(f))
                os.link(f, dst)
                files.append(dst)
            elif op == "newtree":
                d = os.path.join(rng.choice(dirs), f"new{i}", "a", "b")
                os.makedirs(d)
                for j in range(rng.randint(1, 20)):
                    with open(os.path.join(d, f"f{j}.txt"), "wb") as fh:
                        fh.write(rng.randbytes(rng.randint(0, 50000)))
                dirs.append(d)
            elif op == "mvdir":
                src = rng.choice(dirs)
                if not os.path.isdir(src) or src == root:
                    continue
                parent = rng.choice(dirs)
                if parent.startswith(src + "/") or parent == src or not os.path.isdir(parent):
                    continue
                dst = os.path.join(parent, f"mv{i}_" + os.path.basename(src))
                os.rename(src, dst)
                dirs = [dst + x[len(src):] if x == src or x.startswith(src + "/") else x for x in dirs]
                files = [dst + x[len(src):] if x.startswith(src + "/") else x for x in files]
            done.append(op)
        except OSError as e:
            done.append(f"{op} failed: {e}")
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree", nargs="?", default="/work/corpus/T")
    ap.add_argument("--ops", type=int, default=400, help="changes per round")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    tree = os.path.abspath(a.tree)
    manifest = tree + ".manifest.tsv"
    if not os.path.isfile(manifest):
        sys.exit(f"verify: no manifest at {manifest}; generate the corpus with gen_corpus.py")
    work = tempfile.mkdtemp(prefix="annexd-verify.")
    d = None
    try:
        for sub in ("run", "state", "config"):
            os.makedirs(f"{work}/{sub}", mode=0o700)
        subprocess.run(["go", "build", "-o", work, "./cmd/annexd", "./cmd/annexctl"], cwd=REPO, check=True)
        copy = f"{work}/T"
        subprocess.run(["cp", "-a", tree, copy], check=True)
        rng = random.Random(a.seed)
        bad = 0
        d = Daemon(work, copy)
        t0 = time.time()
        d.start()
        d.wait_idle()
        print(f"initial index: {time.time() - t0:.1f} s", flush=True)
        bad += check(d, truth_from_manifest(manifest, copy), "initial index vs manifest")
        for r in range(3):
            ops = mutate(copy, rng, a.ops)
            time.sleep(rng.uniform(0, 1.5))  # sometimes mid-debounce
            ops += mutate(copy, rng, a.ops // 4)
            d.wait_idle()
            bad += check(d, truth_from_tree(copy), f"live round {r + 1} ({len(ops)} changes)")
        d.stop()
        # While the daemon is down, a rewrite that sets the mtime back and
        # a rename of the same file cannot be told from a rename alone (see
        # internal/indexer/doc.go): offline rewrites move the mtime.
        ops = mutate(copy, rng, a.ops, keep_mtime=False)
        d.start()
        d.wait_idle()
        bad += check(d, truth_from_tree(copy), f"after changes while stopped ({len(ops)} changes)")
        d.stop()
        d = None
        print("verify: OK" if bad == 0 else f"verify: {bad} differences (work dir kept: {work})")
        if bad:
            sys.exit(1)
        shutil.rmtree(work)
    finally:
        if d is not None and d.proc and d.proc.poll() is None:
            d.proc.terminate()
            d.proc.wait()


if __name__ == "__main__":
    main()
