package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
)

// BenchmarkStoreScale measures what issue 40 item 4 asks of the store at
// ANNEXD_BENCH_RECORDS records (100,000 unless set; run it at 10^5, 10^6
// and 10^7 to see the growth): a first scan's inserts in walk order (20
// files a directory, 15 % copies of an earlier file, fsync off) and the
// end-of-scan merge, CPU and wall a record (the process's: the records'
// making included); the restart (Open with its check at open,
// warm); `dups` (every group, brief); `lookup --batch` (GetMany of 100,000
// paths in batches of one directory, random directories); the audit's
// verified index (its first chunk of 1,024 and a count of all); the
// index's bytes a record. The anchor, in the same run: raw bbolt given the
// same records (made the same way) as three puts each in batches of 4,096
// (the path's record, a digest entry, an inode entry), fsync off: what
// the B+tree itself costs at that size; then the same lookups as Gets in
// a read transaction a directory (lookup-cpu-x-anchor is annexd's CPU a
// path over it), and a cursor's walk of every digest key in order, the
// least `dups` reads (anchor-walk-cpu-ns/record). Records are made on the fly, not
// held: 10^7 take about 4 GB of index in the temp directory (383 B a
// record; the anchor's file, made first, is removed before), no more
// memory than 10^5.
//
//	ANNEXD_BENCH_RECORDS=10000000 go test -run '^$' -bench StoreScale -benchtime 1x -timeout 2h ./store/
func BenchmarkStoreScale(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_RECORDS")); err == nil && v > 0 {
		n = v
	}
	const perDir = 20
	for b.Loop() {
		anchor, anchorLook := anchorScale(b, n, perDir)
		b.ReportMetric(anchor.Seconds()*1e6/float64(n), "anchor-insert-cpu-µs/record")
		b.ReportMetric(anchorLook.perPath(), "anchor-lookup-cpu-µs/path")
		b.ReportMetric(anchorLook.walk.Seconds()*1e9/float64(n), "anchor-walk-cpu-ns/record")
		path := filepath.Join(b.TempDir(), "index.db")
		s, err := Open(path, Options{NoSync: true, MaxBatch: 4096})
		if err != nil {
			b.Fatal(err)
		}
		stop := runWriterB(b, s)
		now := time.Now().UnixNano()
		c0, w0 := cpuTime(), time.Now()
		for start := 0; start < n; start += 100_000 {
			loadRange(b, s, now, start, min(start+100_000, n), perDir)
		}
		ctx := context.Background()
		if err := s.Settle(ctx); err != nil {
			b.Fatal(err)
		}
		insertCPU, insertWall := cpuTime()-c0, time.Since(w0)
		b.ReportMetric(insertCPU.Seconds()*1e6/float64(n), "insert-cpu-µs/record")
		b.ReportMetric(insertCPU.Seconds()/anchor.Seconds(), "insert-cpu-x-anchor")
		b.ReportMetric(insertWall.Seconds()*1e6/float64(n), "insert-wall-µs/record")
		stop()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if fi, err := os.Stat(path); err == nil {
			b.ReportMetric(float64(fi.Size())/float64(n), "file-B/record")
		}

		t0 := time.Now()
		s, err = Open(path, Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds()*1e3, "restart-open-ms")
		stop = runWriterB(b, s)

		st, err := s.Stats()
		if err != nil || st.Files != int64(n) {
			b.Fatalf("stats %+v, %v; want %d files", st, err, n)
		}
		t0 = time.Now()
		groups := 0
		if err := s.Dups(ctx, DupOptions{Brief: true}, func(Group) error { groups++; return nil }); err != nil {
			b.Fatal(err)
		}
		if int64(groups) != st.DupGroups {
			b.Fatalf("dups listed %d groups, stats say %d", groups, st.DupGroups)
		}
		dupsTook := time.Since(t0)
		b.ReportMetric(dupsTook.Seconds()*1e3, "dups-ms")
		b.ReportMetric(dupsTook.Seconds()*1e6/float64(max(groups, 1)), "dups-µs/group")
		b.ReportMetric(float64(groups), "groups")

		looked, c1 := 0, cpuTime()
		t0 = time.Now()
		var out []Found
		lookupDirs(n, perDir, func(first int, paths [][]byte) {
			if out, err = s.GetMany(paths, out[:0]); err != nil {
				b.Fatal(err)
			}
			for k, f := range out {
				if !f.OK || f.Record.Size != scaleSize(first+k) {
					b.Fatalf("%s: %+v", paths[k], f)
				}
			}
			looked += len(paths)
		})
		lookCPU := cpuTime() - c1
		b.ReportMetric(float64(looked)/time.Since(t0).Seconds(), "lookups/s")
		b.ReportMetric(float64(looked)/lookCPU.Seconds(), "lookups/cpu-s")
		b.ReportMetric(lookCPU.Seconds()*1e6/float64(looked)/anchorLook.perPath(), "lookup-cpu-x-anchor")

		t0 = time.Now()
		got := 0
		if err := s.ByChecked(ctx, nil, math.MaxInt64, func(Due) error {
			if got++; got == 1024 {
				return ErrStop
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds()*1e3, "verified-first-chunk-ms")
		t0 = time.Now()
		c, err := s.CountChecked(ctx, math.MaxInt64)
		if err != nil || c.Files != int64(n) {
			b.Fatalf("counted %+v, %v; want %d", c, err, n)
		}
		b.ReportMetric(time.Since(t0).Seconds()*1e3, "verified-count-ms")
		stop()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// scalePath is record i's path: directory i/perDir, in walk order.
func scalePath(i, perDir int) []byte {
	d := i / perDir
	return fmt.Appendf(nil, "/home/user/d%04d/s%06d/file_%08d.dat", d/1000, d, i)
}

// scaleContent is the content record i holds: its own, or for 15 % of
// them an earlier record's.
func scaleContent(i int) int {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	if i > 0 && rng.Float64() < 0.15 {
		return rng.IntN(i)
	}
	return i
}

func scaleSize(i int) int64 { return int64(1000 + scaleContent(i)%50000) }

// loadRange submits records [start, end) and waits for the last commit.
func loadRange(b *testing.B, s *Store, now int64, start, end, perDir int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for i := start; i < end; i++ {
		c := scaleContent(i)
		d := sha256.Sum256(binary.AppendUvarint(nil, uint64(c)))
		mtime := now - int64(i)*1e6
		r := Record{Backend: key.SHA256E, Digest: d[:], Size: scaleSize(i), MtimeNs: mtime, CtimeNs: mtime,
			Dev: 2049, Ino: 1_000_000 + uint64(i), HashedAt: now + int64(i)*1000, State: StateOK, Generation: 1}
		wg.Add(1)
		s.Submit(Change{Op: OpPut, Path: scalePath(i, perDir), Record: r}, func(err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
}

// lookupDirs calls fn with the paths of random directories of the
// benchmark's tree, a directory at a time (lookup --batch of one folder),
// until 100,000 paths (or n) were given; first is the index of the first.
func lookupDirs(n, perDir int, fn func(first int, paths [][]byte)) {
	rng := rand.New(rand.NewPCG(5, 6))
	dirs := (n + perDir - 1) / perDir
	for looked := 0; looked < min(100_000, n); {
		d := rng.IntN(dirs)
		var paths [][]byte
		for i := d * perDir; i < min((d+1)*perDir, n); i++ {
			paths = append(paths, scalePath(i, perDir))
		}
		fn(d*perDir, paths)
		looked += len(paths)
	}
}

// anchorReads is what raw bbolt's reads cost in the anchor's file: the
// same lookups as the benchmark's (a read transaction a directory, a Get
// a path), and a cursor's walk over the digest keys in order (what dups
// reads at least).
type anchorReads struct {
	look  time.Duration
	paths int
	walk  time.Duration
}

// perPath is the lookups' CPU a path, in µs.
func (a anchorReads) perPath() float64 { return a.look.Seconds() * 1e6 / float64(max(a.paths, 1)) }

// anchorScale puts n records the way BenchmarkStoreScale makes them into
// a raw bbolt file, three keys a record in batches of 4,096, and returns
// the CPU it took and its reads' (anchorReads). The file is removed
// before it returns.
func anchorScale(b *testing.B, n, perDir int) (time.Duration, anchorReads) {
	path := filepath.Join(b.TempDir(), "anchor.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(path)
	defer db.Close()
	names := [3][]byte{[]byte("files"), []byte("digests"), []byte("inodes")}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range names {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 64) // about a record's encoded size
	c0 := cpuTime()
	for start := 0; start < n; start += 4096 {
		err := db.Update(func(tx *bolt.Tx) error {
			for i := start; i < min(start+4096, n); i++ {
				d := sha256.Sum256(binary.AppendUvarint(nil, uint64(scaleContent(i))))
				p := scalePath(i, perDir)
				tail := p[len(p)-17:]
				keys := [3][]byte{p, append(d[:], tail...), append(binary.BigEndian.AppendUint64(nil, 1_000_000+uint64(i)), tail...)}
				for k, name := range names {
					if err := tx.Bucket(name).Put(keys[k], value); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	insert := cpuTime() - c0
	return insert, anchorRead(b, db, n, perDir)
}

// anchorRead times the anchor's reads (anchorReads) in db.
func anchorRead(b *testing.B, db *bolt.DB, n, perDir int) anchorReads {
	var r anchorReads
	c0 := cpuTime()
	lookupDirs(n, perDir, func(first int, paths [][]byte) {
		err := db.View(func(tx *bolt.Tx) error {
			files := tx.Bucket([]byte("files"))
			for _, p := range paths {
				if files.Get(p) == nil {
					return fmt.Errorf("anchor: %s not found", p)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		r.paths += len(paths)
	})
	r.look = cpuTime() - c0
	c0 = cpuTime()
	walked := 0
	if err := db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("digests")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			walked++
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	r.walk = cpuTime() - c0
	if walked != n {
		b.Fatalf("anchor: walked %d digest keys, want %d", walked, n)
	}
	return r
}
