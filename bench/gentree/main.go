// Command gentree writes a large seeded tree for the scale figures, fast:
// bench/gen_tree.py's shape (DIRS top directories of SUBDIRS
// subdirectories, FILES files spread over them, sizes in three bands, a
// fraction of byte copies of recent files, fixed mtimes) written by
// several goroutines. Not the same bytes as gen_tree.py's (another random
// generator); the same arguments give the same tree.
//
//	go run ./bench/gentree [-files N] [-dirs N] [-subdirs N] [-max-size B] [-dup-frac F] [-seed S] OUTDIR
//
// Writes OUTDIR (which must not exist) and OUTDIR.manifest.tsv with
// gen_corpus.py's columns: relpath, size, sha256, kind (uniq | dup |
// empty), group (the file number a dup copies, else -1).
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// epoch is 2025-12-31 00:00:00 UTC, as in gen_tree.py.
const epoch = 1767139200

type file struct {
	rel    string
	data   []byte
	digest string
	kind   string
	group  int
	mtime  time.Time
}

func main() {
	files := flag.Int("files", 1_000_000, "files")
	dirs := flag.Int("dirs", 1000, "top directories")
	subdirs := flag.Int("subdirs", 20, "subdirectories of each")
	maxSize := flag.Int("max-size", 30000, "largest file of the top band, bytes")
	dupFrac := flag.Float64("dup-frac", 0.1, "fraction of files that copy a recent one")
	seed := flag.Uint64("seed", 7, "seed")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gentree [flags] OUTDIR")
		os.Exit(2)
	}
	out := filepath.Clean(flag.Arg(0))
	if _, err := os.Lstat(out); err == nil {
		fail(fmt.Errorf("%s exists; give a new directory", out))
	}
	leaves := make([]string, 0, *dirs**subdirs)
	for d := range *dirs {
		for s := range *subdirs {
			leaf := fmt.Sprintf("d%04d/s%02d", d, s)
			leaves = append(leaves, leaf)
			if err := os.MkdirAll(filepath.Join(out, leaf), 0o755); err != nil {
				fail(err)
			}
		}
	}
	mf, err := os.Create(out + ".manifest.tsv")
	if err != nil {
		fail(err)
	}
	m := bufio.NewWriterSize(mf, 1<<20)
	work := make(chan file, 1024)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range runtime.NumCPU() * 2 {
		wg.Go(func() {
			for f := range work {
				if err := write(filepath.Join(out, f.rel), f.data, f.mtime); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(*seed, 0x9e3779b97f4a7c15))
	type recent struct {
		data   []byte
		digest string
		n      int
	}
	var pool []recent
	var total int64
	dups := 0
	for i := range *files {
		f := file{rel: fmt.Sprintf("%s/f%07d.dat", leaves[i%len(leaves)], i), group: -1,
			mtime: time.Unix(epoch-86400+int64(i), 0)}
		if len(pool) > 0 && rng.Float64() < *dupFrac {
			r := pool[rng.IntN(len(pool))]
			f.data, f.digest, f.kind, f.group = r.data, r.digest, "dup", r.n
			dups++
		} else {
			f.data = make([]byte, sizeOf(rng, *maxSize))
			for j := 0; j < len(f.data); j += 8 {
				v := rng.Uint64()
				for k := 0; k < 8 && j+k < len(f.data); k++ {
					f.data[j+k] = byte(v >> (8 * k))
				}
			}
			sum := sha256.Sum256(f.data)
			f.digest, f.kind = hex.EncodeToString(sum[:]), "uniq"
			if len(f.data) == 0 {
				f.kind = "empty"
			}
			e := recent{f.data, f.digest, i}
			if len(pool) < 4096 {
				pool = append(pool, e)
			} else {
				pool[rng.IntN(len(pool))] = e
			}
		}
		fmt.Fprintf(m, "%s\t%d\t%s\t%s\t%d\n", f.rel, len(f.data), f.digest, f.kind, f.group)
		total += int64(len(f.data))
		work <- f
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		fail(err)
	default:
	}
	if err := m.Flush(); err != nil {
		fail(err)
	}
	if err := mf.Close(); err != nil {
		fail(err)
	}
	fmt.Printf("files=%d dirs=%d bytes=%d dups=%d\n", *files, len(leaves), total, dups)
}

// sizeOf draws a size: a third under 1 KiB, a third 1-8 KiB, a third from
// 8 KiB to top.
func sizeOf(rng *rand.Rand, top int) int {
	switch rng.IntN(3) {
	case 0:
		return rng.IntN(1024)
	case 1:
		return 1024 + rng.IntN(8192-1024)
	}
	return 8192 + rng.IntN(max(top, 8192)-8192+1)
}

func write(p string, data []byte, mtime time.Time) error {
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	return os.Chtimes(p, mtime, mtime)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gentree:", err)
	os.Exit(1)
}
