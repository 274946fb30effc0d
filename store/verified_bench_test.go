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
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// BenchmarkVerifiedScale measures the verified index on a synthetic index
// of ANNEXD_BENCH_RECORDS records (default 100,000; 1,000 directories,
// hashed in walk order, one in ten verified again at a random time): the
// schema-2 → 3 migration that builds it, the first chunk of the least
// recently checked records (what a run starts with, whatever the size),
// a count of all of them, and its bytes per record.
//
//	ANNEXD_BENCH_RECORDS=1000000 go test -run '^$' -bench VerifiedScale -benchtime 1x ./store/
func BenchmarkVerifiedScale(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_RECORDS")); err == nil && v > 0 {
		n = v
	}
	path := filepath.Join(b.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	stop := runWriterB(b, s)
	fillSynthetic(b, s, n)
	stop()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		downgrade(b, path)
		t0 := time.Now()
		s, err := Open(path, Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "migrate-s")
		ctx := context.Background()
		t0 = time.Now()
		got := 0
		if err := s.ByChecked(ctx, nil, math.MaxInt64, func(Due) error {
			if got++; got == chunk {
				return ErrStop
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1e3, "first-chunk-ms")
		t0 = time.Now()
		c, err := s.CountChecked(ctx, math.MaxInt64)
		if err != nil || c.Files != int64(n) {
			b.Fatalf("counted %+v, %v; want %d", c, err, n)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "count-s")
		_ = s.db.View(func(tx *bolt.Tx) error {
			bs := tx.Bucket(codec.BucketVerified).Stats()
			b.ReportMetric(float64(bs.LeafInuse+bs.BranchInuse)/float64(n), "verified-bytes/record")
			fs := tx.Bucket(codec.BucketFiles).Stats()
			b.ReportMetric(float64(fs.LeafInuse+fs.BranchInuse)/float64(n), "files-bytes/record")
			return nil
		})
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func runWriterB(b *testing.B, s *Store) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	return func() { cancel(); <-done }
}

// fillSynthetic puts n records: 1,000 directories in walk order, hashed at
// increasing times, one in ten verified again at a random later time.
func fillSynthetic(b *testing.B, s *Store, n int) {
	const t0 = 1_700_000_000_000_000_000
	r := rand.New(rand.NewPCG(1, 2))
	errs := make(chan error, 4096)
	inflight := 0
	for i := range n {
		d := sha256.Sum256(binary.AppendUvarint(nil, uint64(i)))
		rec := Record{Backend: key.SHA256E, Digest: d[:], Size: int64(r.IntN(1 << 20)), MtimeNs: t0, CtimeNs: t0,
			Dev: 2049, Ino: uint64(i) + 100, HashedAt: t0 + int64(i)*1e6, State: StateOK}
		rec.VerifiedAt = rec.HashedAt
		if i%10 == 0 {
			rec.VerifiedAt += int64(r.IntN(int(30 * 24 * time.Hour)))
		}
		p := fmt.Sprintf("/home/u/d%04d/f%07d.dat", i*1000/n, i)
		s.Submit(Change{Op: OpPut, Path: []byte(p), Record: rec}, func(err error) { errs <- err })
		if inflight++; inflight == cap(errs) {
			for ; inflight > 0; inflight-- {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for ; inflight > 0; inflight-- {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// downgrade turns the index at path back into schema 2: no verified index.
func downgrade(b *testing.B, path string) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(codec.BucketVerified); err != nil {
			return err
		}
		return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, binary.AppendUvarint(nil, 2))
	}); err != nil {
		b.Fatal(err)
	}
}
