package dirdups

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// BenchmarkFind1M: Find over an index of 10^6 files in 50,000 folders
// (ANNEXD_BENCH_DIRS_N sets another count), filled through the writer
// without a tree on disk, as store's BenchmarkDups1M fills its own: 15 %
// of the files copies of an earlier one, one folder in fifty a copy of
// the folder before it, one in a hundred holding a file not hashed yet.
func BenchmarkFind1M(b *testing.B) {
	benchFind(b, benchTree(benchFiles()))
}

// BenchmarkFindBackup1M: the same with half the files a copy of the
// other half under /home/u/backup, inode by inode: every content has a
// copy, so no folder is ruled out by a content of its own (the most
// work for the contained-folder search), and the report is one pair.
func BenchmarkFindBackup1M(b *testing.B) {
	half := benchTree(benchFiles() / 2)
	all := slices.Clone(half)
	for i, c := range half {
		c.Path = append([]byte("/home/u/backup/"), c.Path[len("/home/u/"):]...)
		c.Record.Ino = uint64(len(half) + i + 1)
		all = append(all, c)
	}
	benchFind(b, all)
}

// benchFiles is 10^6, or ANNEXD_BENCH_DIRS_N.
func benchFiles() int {
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_DIRS_N")); err == nil {
		return v
	}
	return 1_000_000
}

// benchFind fills an index with cs and times Find over it, and beside
// it, each time, what listing the index's duplicate groups costs (the
// store's part of annexctl dups): x-dups-listing is the ratio of their
// CPU times, which the machine's load moves less than either. ns/op
// counts Find alone.
func benchFind(b *testing.B, cs []store.Change) {
	st, err := store.Open(filepath.Join(b.TempDir(), "index.db"), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = st.Run(ctx) })
	b.Cleanup(func() { cancel(); wg.Wait(); st.Close() })
	if err := st.SubmitAll(context.Background(), cs); err != nil {
		b.Fatal(err)
	}
	if err := st.Settle(context.Background()); err != nil { // the writer merges now, not while Find is timed
		b.Fatal(err)
	}
	var (
		res           Result
		find, listing time.Duration // CPU of Find, and of a dups listing beside it
	)
	for b.Loop() {
		c0 := cpuTime()
		if res, err = Find(context.Background(), StoreSource{st}, Options{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c1 := cpuTime()
		if err := st.Dups(context.Background(), store.DupOptions{Brief: true}, func(store.Group) error { return nil }); err != nil {
			b.Fatal(err)
		}
		find, listing = find+c1-c0, listing+cpuTime()-c1
		b.StartTimer()
	}
	b.ReportMetric(float64(find.Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(find)/float64(listing), "x-dups-listing")
	b.ReportMetric(float64(res.Files), "files")
	b.ReportMetric(float64(len(res.Reports)), "reports")
	b.ReportMetric(float64(len(res.Unknown)), "unknown")
}

// benchTree makes n records in n/20 folders of the shape BenchmarkFind1M
// describes.
func benchTree(n int) []store.Change {
	rng := rand.New(rand.NewPCG(5, 6))
	tops := []string{"Documents", "Music", "Pictures", "Downloads", "src", "Videos"}
	dirs := max(n/20, 1)
	cs := make([]store.Change, 0, n)
	var prev []store.Record
	for d := range dirs {
		dir := fmt.Sprintf("/home/u/%s/project%d/sub%d/", tops[d%len(tops)], d/37, d)
		var recs []store.Record
		if d%50 == 49 && prev != nil {
			recs = prev // a copy of the folder before, under other inodes
		} else {
			for range n / dirs {
				c := len(cs) + len(recs)
				if rng.Float64() < 0.15 {
					c = rng.IntN(c + 1)
				}
				recs = append(recs, benchRecord(c))
			}
		}
		for i, r := range recs {
			r.Ino = uint64(len(cs) + 1)
			if d%100 == 7 && i == 0 {
				r = store.Record{Size: r.Size, Dev: 1, Ino: r.Ino, State: store.StatePending}
			}
			cs = append(cs, store.Change{Op: store.OpPut, Path: fmt.Appendf(nil, "%sfile_%d.dat", dir, i), Record: r})
		}
		prev = recs
	}
	return cs
}

func benchRecord(c int) store.Record {
	d := sha256.Sum256(binary.AppendUvarint(nil, uint64(c)))
	return store.Record{Backend: key.SHA256E, Digest: d[:], Size: int64(1000 + c%50000), Dev: 1,
		MtimeNs: 1_700_000_000_000_000_000, CtimeNs: 1_700_000_000_000_000_000, HashedAt: 1_700_000_000_000_000_001}
}

// cpuTime is the process's user+system CPU time: steadier than the wall
// clock on a loaded machine (store's benchmarks report it too).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
