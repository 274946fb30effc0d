#!/usr/bin/env python3
"""Seeded generator of a large tree for scale benchmarks.

Usage: python3 bench/gen_tree.py OUTDIR [--files 1000000] [--dirs 1000]
                                        [--subdirs 20] [--max-size 30000]
                                        [--dup-frac 0.1] [--seed 7]

Writes OUTDIR (must not exist) and OUTDIR.manifest.tsv. OUTDIR holds DIRS
top directories with SUBDIRS subdirectories each, and FILES files spread
evenly over the subdirectories. Sizes are mixed and small, like a home
directory's: a third under 1 KiB, a third from 1 KiB to 8 KiB, a third from
8 KiB to MAX_SIZE, uniform within each band; DUP_FRAC of the files are byte
copies of a recent earlier file. Every file's mtime is fixed (a day before
2026-01-01 plus its number in seconds), so the tree is never racily clean.
The defaults give 10^6 files in 20,000 directories, the tree
of the scale figures (8.1 GB). Same arguments, same bytes and mtimes.

The manifest has gen_corpus.py's columns: relpath, size, sha256, kind
(uniq | dup | empty), group (the file number a dup copies, else -1), so
bench/verify_corpus.py and the scale script can check keys against it.
Prints the totals when done.
"""
import argparse
import hashlib
import os
import random
import sys

EPOCH = 1767139200  # 2025-12-31 00:00:00 UTC


def size_of(rng, max_size):
    band = rng.randrange(3)
    if band == 0:
        return rng.randint(0, 1023)
    if band == 1:
        return rng.randint(1024, 8191)
    return rng.randint(8192, max(max_size, 8192))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--subdirs", type=int, default=20)
    ap.add_argument("--max-size", type=int, default=30000)
    ap.add_argument("--dup-frac", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    out = a.out.rstrip("/")
    if os.path.exists(out):
        sys.exit(f"gen_tree: {out} exists; give a new directory")
    rng = random.Random(a.seed)
    leaves = [os.path.join(f"d{d:04d}", f"s{s:02d}")
              for d in range(a.dirs) for s in range(a.subdirs)]
    for leaf in leaves:
        os.makedirs(os.path.join(out, leaf))
    pool = []  # recent contents to copy from: (data, digest, file number)
    total = dups = 0
    with open(out + ".manifest.tsv", "w", encoding="utf-8") as m:
        for i in range(a.files):
            if pool and rng.random() < a.dup_frac:
                data, digest, src = rng.choice(pool)
                kind, group = "dup", src
                dups += 1
            else:
                data = rng.randbytes(size_of(rng, a.max_size))
                digest = hashlib.sha256(data).hexdigest()
                kind, group = ("uniq" if data else "empty"), -1
                entry = (data, digest, i)
                if len(pool) < 4096:
                    pool.append(entry)
                else:
                    pool[rng.randrange(len(pool))] = entry
            rel = os.path.join(leaves[i % len(leaves)], f"f{i:07d}.dat")
            p = os.path.join(out, rel)
            with open(p, "wb") as f:
                f.write(data)
            t = EPOCH - 86400 + i
            os.utime(p, (t, t))
            m.write(f"{rel}\t{len(data)}\t{digest}\t{kind}\t{group}\n")
            total += len(data)
    print(f"files={a.files} dirs={len(leaves)} bytes={total} dups={dups}")


if __name__ == "__main__":
    main()
