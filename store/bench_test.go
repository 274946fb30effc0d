package store

import (
	"bufio"
	"bytes"
	"cmp"
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
	"github.com/annexd/annexd/store/codec"
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

// walkOrder returns the files as a first scan delivers them: directory by
// directory in path order, with inode numbers handed out in that order (as
// a tree copied or unpacked in one go gets them). The manifest's own order
// is shuffled: scattered updates to an existing tree.
func walkOrder(files []benchFile) []benchFile {
	out := slices.Clone(files)
	slices.SortFunc(out, func(x, y benchFile) int { return bytes.Compare(x.path, y.path) })
	for i := range out {
		out[i].r.Ino = 1_000_000 + uint64(i)
	}
	return out
}

// BenchmarkPutBatch: puts per second through Submit with group commit and
// fsync, into an index of the corpus's shape, for a few group sizes, with
// the records in walk order (a first scan) and in the manifest's shuffled
// order (scattered updates).
func BenchmarkPutBatch(b *testing.B) {
	files, src := corpusFiles(b)
	b.Logf("records from %s", src)
	walk := walkOrder(files)
	for _, run := range []struct {
		order string
		files []benchFile
		batch int
	}{{"walk", walk, 4096}, {"shuffled", files, 4096}, {"shuffled", files, 16384}} {
		b.Run(fmt.Sprintf("%s/batch=%d", run.order, run.batch), func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{MaxBatch: run.batch})
				c0 := cpuTime()
				b.StartTimer()
				load(b, s, run.files)
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(len(run.files)*b.N)/b.Elapsed().Seconds(), "puts/s")
			b.ReportMetric(float64(len(run.files)*b.N)/cpu.Seconds(), "puts/cpu-s")
		})
	}
}

// BenchmarkAnchorBoltPut is the floor to compare PutBatch with: raw bbolt
// writing three keys per record (what a record and its two indexes cost at
// least): the path, digest ‖ path tail and inode ‖ path tail, with a 20-byte
// value each, in transactions of 4096 records, with fsync.
func BenchmarkAnchorBoltPut(b *testing.B) {
	files, _ := corpusFiles(b)
	b.Run("walk", func(b *testing.B) { anchorBoltPut(b, walkOrder(files)) })
	b.Run("shuffled", func(b *testing.B) { anchorBoltPut(b, files) })
}

func anchorBoltPut(b *testing.B, files []benchFile) {
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
					tail := f.path[len(f.path)-18:]
					keys := [3][]byte{
						f.path,                                   // the record, in path order
						append(bytes.Clone(f.r.Digest), tail...), // digest index
						append(binary.BigEndian.AppendUint64(nil, f.r.Ino), tail...), // inode index
					}
					for bi, n := range []string{"a", "b", "c"} {
						if err := tx.Bucket([]byte(n)).Put(keys[bi], make([]byte, 20)); err != nil {
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
	// A scan's check of walked files: the files of one directory in walk
	// order, up to 256 at a time (the walker's batches), one Get each or one
	// GetMany per batch; 2 goroutines like the indexer's checkers.
	batches := dirBatches(walkOrder(files), 256)
	b.Run("walk-serial", func(b *testing.B) {
		walked := flatten(batches)
		lookups(b, func(i int) bool {
			_, ok, err := s.Get(walked[i].path)
			return ok && err == nil
		})
	})
	b.Run("many-serial", func(b *testing.B) {
		getMany(b, s, batches, 1)
	})
	b.Run("many-parallel", func(b *testing.B) {
		getMany(b, s, batches, 2)
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
				_ = bk.Put(f.path, codec.AppendRecord(nil, &f.r))
			}
			return nil
		})
		lookups(b, func(i int) bool {
			found := false
			_ = db.View(func(tx *bolt.Tx) error {
				v := tx.Bucket([]byte("a")).Get(files[i].path)
				found = v != nil
				_, err := codec.DecodeRecord(v)
				return err
			})
			return found
		})
	})
}

// dirBatches cuts files (in walk order) into runs of at most n files of
// one directory.
func dirBatches(files []benchFile, n int) [][]benchFile {
	var out [][]benchFile
	for start := 0; start < len(files); {
		dk, _ := splitPath(files[start].path)
		end := start + 1
		for end < len(files) && end-start < n {
			d, _ := splitPath(files[end].path)
			if !bytes.Equal(d, dk) {
				break
			}
			end++
		}
		out = append(out, files[start:end])
		start = end
	}
	return out
}

func flatten(batches [][]benchFile) []benchFile {
	var out []benchFile
	for _, bt := range batches {
		out = append(out, bt...)
	}
	return out
}

// getMany looks up every batch with GetMany from g goroutines, b.N times
// over, and reports lookups (paths) per second.
func getMany(b *testing.B, s *Store, batches [][]benchFile, g int) {
	paths := make([][][]byte, len(batches))
	total := 0
	for i, bt := range batches {
		for _, f := range bt {
			paths[i] = append(paths[i], f.path)
		}
		total += len(bt)
	}
	c0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for w := range g {
			wg.Go(func() {
				var out []Found
				for i := w; i < len(paths); i += g {
					var err error
					out, err = s.GetMany(paths[i], out[:0])
					if err != nil || len(out) != len(paths[i]) {
						b.Error("GetMany:", err)
						return
					}
					for _, f := range out {
						if !f.OK {
							b.Error("GetMany: a path was not found")
							return
						}
					}
				}
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "lookups/s")
	b.ReportMetric(float64(total*b.N)/(cpuTime()-c0).Seconds(), "lookups/cpu-s")
}

// BenchmarkBytesPerFile: the index file's size per record for the corpus
// (file size, and pages in use excluding free pages), with records arriving
// in the manifest's shuffled order (like scattered updates) and in path
// order (like a first walk).
func BenchmarkBytesPerFile(b *testing.B) {
	files, src := corpusFiles(b)
	for _, order := range []struct {
		name  string
		files []benchFile
	}{{"shuffled", files}, {"walk", walkOrder(files)}} {
		b.Run(order.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{NoSync: true})
				b.StartTimer()
				load(b, s, order.files)
				b.StopTimer()
				reportSize(b, s, src, len(order.files))
				reportCompacted(b, s, len(order.files))
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
		free := int64(freePages(tx)) * int64(s.db.Info().PageSize)
		b.ReportMetric(float64(fi.Size())/n, "filebytes/file")
		// bbolt grows the file by truncate, which leaves a hole until pages
		// are written: the blocks allocated are what the disk holds.
		b.ReportMetric(float64(fi.Sys().(*syscall.Stat_t).Blocks*512)/n, "diskbytes/file")
		b.ReportMetric(float64(tx.Size()-free)/n, "usedbytes/file")
		var live int
		for _, name := range codec.AllBuckets {
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

// reportCompacted closes s, compacts its file and reports the new size.
func reportCompacted(b *testing.B, s *Store, records int) {
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if _, err := Compact(s.Path(), Options{}); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size())/float64(records), "compacted-filebytes/file")
	b.ReportMetric(float64(fi.Sys().(*syscall.Stat_t).Blocks*512)/float64(records), "compacted-diskbytes/file")
}

// freePages counts the pages of tx's file on bbolt's free list (the store
// opens bbolt without statistics, so DB.Stats has no count).
func freePages(tx *bolt.Tx) int {
	n := 0
	for id := 0; ; id++ {
		pi, err := tx.Page(id)
		if err != nil || pi == nil {
			return n
		}
		if pi.Type == "free" {
			n++
		}
	}
}

// BenchmarkDups1M: time to list every duplicate group of 10^6 records,
// with records (as dedup lists them) and brief (as annexctl dups does).
func BenchmarkDups1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_DUPS_N")); err == nil {
		n = v // a smaller run for profiling
	}
	files := syntheticFiles(n, n/20, 0.15)
	s := benchStore(b, Options{NoSync: true})
	load(b, s, files)
	if err := s.Settle(context.Background()); err != nil { // Stats then counts every group
		b.Fatal(err)
	}
	st, _ := s.Stats()
	b.Logf("%d records, %d groups, %d duplicate bytes", st.Files, st.DupGroups, st.Duplicate)
	for _, brief := range []bool{false, true} {
		b.Run(fmt.Sprint("brief=", brief), func(b *testing.B) {
			c0 := cpuTime()
			for b.Loop() {
				groups := 0
				if err := s.Dups(context.Background(), DupOptions{Brief: brief}, func(Group) error { groups++; return nil }); err != nil {
					b.Fatal(err)
				}
				if int64(groups) != st.DupGroups {
					b.Fatalf("listed %d groups, want %d", groups, st.DupGroups)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
	surveyAll(b, s)
	b.Run("brief=true,surveyed", func(b *testing.B) {
		c0 := cpuTime()
		for b.Loop() {
			groups := 0
			err := s.Dups(context.Background(), DupOptions{Brief: true}, func(g Group) error {
				if g.Survey == nil {
					b.Fatalf("group %x has no survey", g.Digest)
				}
				groups++
				return nil
			})
			if err != nil || int64(groups) != st.DupGroups {
				b.Fatalf("listed %d groups, want %d: %v", groups, st.DupGroups, err)
			}
		}
		b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
	})
}

// surveyAll keeps a survey of every group of s, as one of separate files
// would find it (every inode its own copy, all bytes alone).
func surveyAll(b *testing.B, s *Store) {
	ctx := context.Background()
	var last error
	n := 0
	err := s.Dups(ctx, DupOptions{}, func(g Group) error {
		seenOf := map[[2]uint64]Seen{}
		for _, m := range g.Members {
			seenOf[[2]uint64{m.Record.Dev, m.Record.Ino}] = Seen{Size: m.Record.Size, MtimeNs: m.Record.MtimeNs, CtimeNs: m.Record.CtimeNs}
		}
		var sv Survey
		var seen []Seen
		for in, sn := range seenOf {
			sv.Inodes = append(sv.Inodes, SurveyInode{Dev: in[0], Ino: in[1], Placed: g.Size, Alone: g.Size, Known: true})
			seen = append(seen, sn)
		}
		idx := make([]int, len(sv.Inodes))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, c int) int {
			x, y := sv.Inodes[a], sv.Inodes[c]
			return cmp.Or(cmp.Compare(x.Dev, y.Dev), cmp.Compare(x.Ino, y.Ino))
		})
		sorted, sortedSeen := make([]SurveyInode, len(idx)), make([]Seen, len(idx))
		for i, j := range idx {
			sorted[i], sortedSeen[i] = sv.Inodes[j], seen[j]
			sorted[i].Copy = i
		}
		sv.Inodes = sorted
		n++
		s.SubmitSurvey(g.Backend, g.Digest, sv, sortedSeen, func(err error) {
			if err != nil {
				last = err
			}
		})
		return nil
	})
	if err == nil {
		err = s.PutMeta(ctx, "bench-surveyed", nil) // after every survey
	}
	if err != nil || last != nil {
		b.Fatalf("surveys: %v %v", err, last)
	}
	b.Logf("%d groups surveyed", n)
}

// BenchmarkDupsCorpus: time to list every duplicate group of the corpus
// (the store's share of `annexctl dups`).
func BenchmarkDupsCorpus(b *testing.B) {
	files, src := corpusFiles(b)
	s := benchStore(b, Options{NoSync: true})
	load(b, s, files)
	st, _ := s.Stats()
	b.Logf("%s: %d records, %d groups, %d duplicate bytes", src, st.Files, st.DupGroups, st.Duplicate)
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

// BenchmarkFirstScanLoad loads a whole tree's records in walk order, as a
// first scan of an empty index does, through Submit with the daemon's
// group size and fsync; the tree's manifest comes from
// $ANNEXD_BENCH_MANIFEST (a gen_corpus.py or gen_tree.py manifest; default
// the shared corpus's), and with $ANNEXD_BENCH_TREE (the tree itself) the
// records carry the files' real device, inode and times. The load ends
// with the merge of what is still pending, as a scan does.
// $ANNEXD_BENCH_BATCHES lists group sizes to compare (default 1024). It reports CPU time per record, the per-record cost
// that must stay flat from 10^5 to 10^6 files, and the file's size.
func BenchmarkFirstScanLoad(b *testing.B) {
	name := os.Getenv("ANNEXD_BENCH_MANIFEST")
	if name == "" {
		name = corpusManifest
	}
	files, err := loadManifest(name)
	if err != nil || len(files) == 0 {
		b.Skipf("no manifest at %s (set ANNEXD_BENCH_MANIFEST): %v", name, err)
	}
	walk := walkOrder(files)
	t0 := walk[0].r.HashedAt
	for i := range walk {
		// A scan hashes in walk order: the verified index's keys grow.
		walk[i].r.HashedAt = t0 + int64(i)*1000
	}
	if tree := os.Getenv("ANNEXD_BENCH_TREE"); tree != "" {
		// The tree's own identities: a real file system hands out inode
		// numbers in creation order, not in walk order.
		for i := range walk {
			var st syscall.Stat_t
			rel := strings.TrimPrefix(string(walk[i].path), corpusRoot)
			if err := syscall.Lstat(filepath.Join(tree, rel), &st); err != nil {
				b.Fatal(err)
			}
			r := &walk[i].r
			r.Dev, r.Ino, r.MtimeNs, r.CtimeNs = st.Dev, st.Ino, st.Mtim.Nano(), st.Ctim.Nano()
		}
	}
	batches := []int{1024}
	if v := os.Getenv("ANNEXD_BENCH_BATCHES"); v != "" {
		batches = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			batches = append(batches, n)
		}
	}
	for _, batch := range batches {
		b.Run(fmt.Sprintf("files=%d/batch=%d", len(walk), batch), func(b *testing.B) {
			var cpu time.Duration
			var size int64
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{MaxBatch: batch})
				c0 := cpuTime()
				b.StartTimer()
				load(b, s, walk)
				if err := s.Settle(context.Background()); err != nil { // a scan ends with its last merge
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
				b.StopTimer()
				if st, err := os.Stat(s.path); err == nil {
					size = st.Size()
				}
				b.StartTimer()
			}
			n := float64(len(walk) * b.N)
			b.ReportMetric(cpu.Seconds()*1e6/n, "cpu-µs/record")
			b.ReportMetric(b.Elapsed().Seconds()*1e6/n, "wall-µs/record")
			b.ReportMetric(float64(size)/float64(len(walk)), "file-B/record")
			b.ReportMetric(0, "ns/op")
		})
	}
}
