package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
)

// corpusManifest is the shared benchmark corpus's manifest: path, size,
// sha256, kind, group (tab-separated), present once /work/corpus/.done is.
const (
	corpusManifest = "/work/corpus/T.manifest.tsv"
	corpusDone     = "/work/corpus/.done"
	corpusRoot     = "/home/user/" // where the benchmark pretends the corpus lives
)

type benchFile struct {
	path []byte
	r    Record
}

// corpusFiles returns records shaped like the shared corpus: its real
// paths, sizes and digests when the manifest is there, else a synthetic
// tree of the same shape (3,000 directories, 60,000 files, 15 % duplicates).
func corpusFiles(b *testing.B) ([]benchFile, string) {
	if _, err := os.Stat(corpusDone); err == nil {
		if fs, err := loadManifest(corpusManifest); err == nil {
			return fs, "corpus manifest"
		}
	}
	return syntheticFiles(60000, 3000, 0.15), "synthetic"
}

func loadManifest(name string) ([]benchFile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []benchFile
	now := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(1, 2))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 3 {
			continue
		}
		size, err1 := strconv.ParseInt(fields[1], 10, 64)
		d, err2 := hex.DecodeString(fields[2])
		if err1 != nil || err2 != nil || len(d) != 32 {
			continue
		}
		out = append(out, benchFile{path: []byte(corpusRoot + fields[0]), r: shapedRecord(rng, now, d, size, uint64(len(out)))})
	}
	return out, sc.Err()
}

func shapedRecord(rng *rand.Rand, now int64, digest []byte, size int64, i uint64) Record {
	mtime := now - rng.Int64N(3*365*24*3600*1e9)
	return Record{Backend: key.SHA256E, Digest: digest, Size: size, MtimeNs: mtime,
		CtimeNs: mtime + rng.Int64N(1e9), Dev: 2049, Ino: 1_000_000 + i, HashedAt: now + int64(i)*1000,
		VerifiedAt: now + int64(i)*1000, State: StateOK, Generation: 1}
}

func syntheticFiles(n, dirs int, dupFrac float64) []benchFile {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Now().UnixNano()
	names := []string{"Documents", "Music", "Pictures", "Downloads", "src", "Videos"}
	dirPaths := make([]string, dirs)
	for i := range dirPaths {
		dirPaths[i] = fmt.Sprintf("%s%s/project%d/sub%d", corpusRoot, names[i%len(names)], i/37, i)
	}
	out := make([]benchFile, n)
	for i := range out {
		content := i
		if rng.Float64() < dupFrac {
			content = rng.IntN(i + 1) // a copy of an earlier file
		}
		d := sha256.Sum256(binary.AppendUvarint(nil, uint64(content)))
		size := int64(1000 + content%50000)
		path := fmt.Sprintf("%s/file_%d.dat", dirPaths[rng.IntN(dirs)], i)
		out[i] = benchFile{path: []byte(path), r: shapedRecord(rng, now, d[:], size, uint64(i))}
	}
	return out
}

func benchStore(b *testing.B, opts Options) *Store {
	b.Helper()
	s, err := Open(filepath.Join(b.TempDir(), "index.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	stop := runWriter(b, s)
	b.Cleanup(func() { stop(); s.Close() })
	return s
}

// load submits every file and waits for the last commit.
func load(b *testing.B, s *Store, files []benchFile) {
	b.Helper()
	var wg sync.WaitGroup
	wg.Add(len(files))
	var failed error
	var mu sync.Mutex
	for _, f := range files {
		s.Submit(Change{Op: OpPut, Path: f.path, Record: f.r}, func(err error) {
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

// cpuTime is the process's user+system CPU time: on a shared, loaded
// machine puts per CPU-second is steadier than wall-clock throughput.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPutBatch: puts per second through Submit with group commit and
// fsync, into an index of the corpus's shape, for a few group sizes.
func BenchmarkPutBatch(b *testing.B) {
	files, src := corpusFiles(b)
	b.Logf("records from %s", src)
	for _, batch := range []int{4096, 16384} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{MaxBatch: batch})
				c0 := cpuTime()
				b.StartTimer()
				load(b, s, files)
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(len(files)*b.N)/b.Elapsed().Seconds(), "puts/s")
			b.ReportMetric(float64(len(files)*b.N)/cpu.Seconds(), "puts/cpu-s")
		})
	}
}

// BenchmarkAnchorBoltPut is the floor to compare PutBatch with: raw bbolt
// writing three random 50-byte keys per record (what a record and its two
// indexes cost at least), in transactions of 4096 records, with fsync.
func BenchmarkAnchorBoltPut(b *testing.B) {
	files, _ := corpusFiles(b)
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		db, err := bolt.Open(filepath.Join(b.TempDir(), "anchor.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = db.Update(func(tx *bolt.Tx) error {
			for _, n := range []string{"a", "b", "c"} {
				if _, err := tx.CreateBucket([]byte(n)); err != nil {
					return err
				}
			}
			return nil
		})
		c0 := cpuTime()
		b.StartTimer()
		for i := 0; i < len(files); i += 4096 {
			err := db.Update(func(tx *bolt.Tx) error {
				for j := i; j < min(i+4096, len(files)); j++ {
					f := &files[j]
					k := append(append([]byte{}, f.r.Digest...), f.path[len(f.path)-18:]...)
					for bi, n := range []string{"a", "b", "c"} {
						k[0] = byte(bi)
						if err := tx.Bucket([]byte(n)).Put(k, make([]byte, 20)); err != nil {
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
		b.StopTimer()
		cpu += cpuTime() - c0
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(len(files)*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(len(files)*b.N)/cpu.Seconds(), "records/cpu-s")
}

// BenchmarkGet: point lookups per second on the loaded corpus shape, from
// one goroutine and from GOMAXPROCS goroutines; the anchor is a raw bbolt
// View+Get of the same number of keys in one bucket.
func BenchmarkGet(b *testing.B) {
	files, _ := corpusFiles(b)
	s := benchStore(b, Options{NoSync: true})
	load(b, s, files)
	lookups := func(b *testing.B, get func(i int) bool) {
		c0 := cpuTime()
		i := 0
		for b.Loop() {
			if !get(i % len(files)) {
				b.Fatal("lookup failed")
			}
			i += 7919
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
		b.ReportMetric(float64(b.N)/(cpuTime()-c0).Seconds(), "lookups/cpu-s")
	}
	b.Run("serial", func(b *testing.B) {
		lookups(b, func(i int) bool {
			_, ok, err := s.Get(files[i].path)
			return ok && err == nil
		})
	})
	b.Run("parallel", func(b *testing.B) {
		c0 := cpuTime()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(files))
			for pb.Next() {
				if _, ok, err := s.Get(files[i%len(files)].path); !ok || err != nil {
					b.Error("lookup failed", err)
					return
				}
				i += 7919
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
		b.ReportMetric(float64(b.N)/(cpuTime()-c0).Seconds(), "lookups/cpu-s")
	})
	b.Run("anchor-bolt-get", func(b *testing.B) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "anchor.db"), 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		_ = db.Update(func(tx *bolt.Tx) error {
			bk, _ := tx.CreateBucket([]byte("a"))
			for _, f := range files {
				_ = bk.Put(f.path, appendRecord(nil, &f.r))
			}
			return nil
		})
		lookups(b, func(i int) bool {
			found := false
			_ = db.View(func(tx *bolt.Tx) error {
				v := tx.Bucket([]byte("a")).Get(files[i].path)
				found = v != nil
				_, err := decodeRecord(v)
				return err
			})
			return found
		})
	})
}

// BenchmarkBytesPerFile: the index file's size per record for the corpus
// (file size, and pages in use excluding free pages), with records arriving
// in the manifest's shuffled order (like scattered updates) and in path
// order (like a first walk).
func BenchmarkBytesPerFile(b *testing.B) {
	files, src := corpusFiles(b)
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(x, y benchFile) int { return bytes.Compare(x.path, y.path) })
	for _, order := range []struct {
		name  string
		files []benchFile
	}{{"manifest-order", files}, {"path-order", sorted}} {
		b.Run(order.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{NoSync: true})
				b.StartTimer()
				load(b, s, order.files)
				b.StopTimer()
				reportSize(b, s, src, len(order.files))
				b.StartTimer()
			}
		})
	}
}

func reportSize(b *testing.B, s *Store, src string, records int) {
	fi, err := os.Stat(s.Path())
	if err != nil {
		b.Fatal(err)
	}
	n := float64(records)
	_ = s.db.View(func(tx *bolt.Tx) error {
		st := s.db.Stats()
		free := int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize)
		b.ReportMetric(float64(fi.Size())/n, "filebytes/file")
		b.ReportMetric(float64(tx.Size()-free)/n, "usedbytes/file")
		var live int
		for _, name := range allBuckets {
			bs := tx.Bucket(name).Stats()
			live += bs.LeafInuse + bs.BranchInuse
			b.Logf("  %-8s keys %6d  leaf alloc %5.0f B/file (in use %5.0f)  branch %4.0f B/file", name, bs.KeyN,
				float64(bs.LeafAlloc)/n, float64(bs.LeafInuse)/n, float64(bs.BranchAlloc)/n)
		}
		b.ReportMetric(float64(live)/n, "livebytes/file")
		b.Logf("%s: %d records, file %d bytes, pages in use %d", src, records, fi.Size(), tx.Size()-free)
		return nil
	})
}

// BenchmarkDups1M: time to list every duplicate group of 10^6 records.
func BenchmarkDups1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_DUPS_N")); err == nil {
		n = v // a smaller run for profiling
	}
	files := syntheticFiles(n, n/20, 0.15)
	s := benchStore(b, Options{NoSync: true})
	load(b, s, files)
	st, _ := s.Stats()
	b.Logf("%d records, %d groups, %d wasted bytes", st.Files, st.DupGroups, st.Wasted)
	c0 := cpuTime()
	for b.Loop() {
		groups := 0
		if err := s.Dups(context.Background(), DupOptions{}, func(Group) error { groups++; return nil }); err != nil {
			b.Fatal(err)
		}
		if int64(groups) != st.DupGroups {
			b.Fatalf("listed %d groups, want %d", groups, st.DupGroups)
		}
	}
	b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// BenchmarkDupsCorpus: time to list every duplicate group of the corpus
// (the store's share of `annexctl dups`).
func BenchmarkDupsCorpus(b *testing.B) {
	files, src := corpusFiles(b)
	s := benchStore(b, Options{NoSync: true})
	load(b, s, files)
	st, _ := s.Stats()
	b.Logf("%s: %d records, %d groups, %d wasted bytes", src, st.Files, st.DupGroups, st.Wasted)
	c0 := cpuTime()
	for b.Loop() {
		groups := 0
		if err := s.Dups(context.Background(), DupOptions{}, func(Group) error { groups++; return nil }); err != nil {
			b.Fatal(err)
		}
		if int64(groups) != st.DupGroups {
			b.Fatalf("listed %d groups, want %d", groups, st.DupGroups)
		}
	}
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
