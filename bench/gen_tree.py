#!/usr/bin/env python3
"""Seeded generator of a large flat-ish tree for scale benchmarks.

Usage: python3 bench/gen_tree.py OUTDIR [--files 1000000] [--dirs 1000]
                                        [--subdirs 20] [--max-size 30000]
                                        [--dup-frac 0.1] [--seed 7]

Writes OUTDIR (must not exist): DIRS top directories with SUBDIRS
subdirectories each, FILES files spread evenly over the subdirectories,
sizes uniform in [0, MAX_SIZE], of which DUP_FRAC are byte copies of an
earlier file. The defaults give 10^6 files in 20,000 directories, about
15 GB; --max-size 15200 gives the 7.6 GB tree of the scale figures. Same
arguments, same bytes. Prints the totals when done.
"""
import argparse
import os
import random
import sys


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
    if os.path.exists(a.out):
        sys.exit(f"gen_tree: {a.out} exists; give a new directory")
    rng = random.Random(a.seed)
    leaves = [os.path.join(a.out, f"d{d:04d}", f"s{s:02d}")
              for d in range(a.dirs) for s in range(a.subdirs)]
    for leaf in leaves:
        os.makedirs(leaf)
    pool = []  # recent contents to copy from
    total = dups = 0
    for i in range(a.files):
        if pool and rng.random() < a.dup_frac:
            data = rng.choice(pool)
            dups += 1
        else:
            data = rng.randbytes(rng.randint(0, a.max_size))
            if len(pool) < 4096:
                pool.append(data)
            else:
                pool[rng.randrange(len(pool))] = data
        leaf = leaves[i % len(leaves)]
        with open(os.path.join(leaf, f"f{i:07d}.dat"), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"files={a.files} dirs={len(leaves)} bytes={total} dups={dups}")


if __name__ == "__main__":
    main()
