package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/pagecheck"
)

// quickLeaves is how many leaf pages of each bucket the check at open
// reads, spread evenly over the bucket; smaller buckets are read whole.
var quickLeaves = 128

// quickCheck is the check at open. It reads what can be checked without
// reading the whole index: both meta pages, the freelist, every branch
// page, and a sample of each bucket's leaves, whose entries must decode.
// Every page it meets must lie below the high-water mark and be used
// once. The stored counters must match the keys it counted: exactly when
// every leaf was read, within bounds otherwise. It reports damage as
// ErrCorrupt; Check reads everything.
func quickCheck(db *bolt.DB, path string) error {
	_, err := runQuick(db, path)
	return err
}

// runQuick is quickCheck; it also returns what the check read.
func runQuick(db *bolt.DB, path string) (*pagecheck.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	q, err := pagecheck.Walk(f, db.Info().PageSize, quickLeaves, checkEntry)
	if err == nil {
		err = checkCounters(db, q)
	}
	if err != nil {
		return q, fmt.Errorf("%w: %s: %v (found by the check at open; the file is left untouched)", ErrCorrupt, path, err)
	}
	return q, nil
}

// checkFreelist checks the freelist page before bbolt reads it: bbolt
// panics on a damaged one while it holds the file mapped, and the mapping
// keeps the file's lock until the process ends.
func checkFreelist(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: open index: %w", err)
	}
	defer f.Close()
	m, ps, err := pagecheck.ReadMetas(f)
	if err != nil || m.Freelist == pagecheck.NoFreelist {
		return nil // the header check and bbolt report a bad meta page
	}
	r := pagecheck.Reader{F: f, PS: ps, HWM: m.PGID}
	if _, _, err := r.Freelist(m.Freelist); err != nil {
		return fmt.Errorf("%w: %s: %v (left untouched)", ErrCorrupt, path, err)
	}
	return nil
}

// checkEntry decodes one entry of the bucket name, as Check does.
func checkEntry(name string, k, v []byte) error {
	switch name {
	case string(codec.BucketFiles):
		if _, base, ok := codec.SplitFileKey(k); !ok || len(base) == 0 || bytes.IndexByte(base, '/') >= 0 {
			return errors.New("bad file key")
		}
		r, err := codec.DecodeRecord(v)
		if err == nil {
			err = r.Validate()
		}
		return err
	case string(codec.BucketDirs):
		if _, ok := codec.ParseIDKey(v); !ok || k[len(k)-1] != '/' {
			return errors.New("bad directory entry")
		}
	case string(codec.BucketDirNames):
		if _, ok := codec.ParseIDKey(k); !ok || len(v) == 0 || v[len(v)-1] != '/' {
			return errors.New("bad directory name entry")
		}
	case string(codec.BucketDigest):
		if b := key.Backend(k[0]); !b.Valid() || b.Base() != b || len(k) <= 1+b.DigestLen() {
			return errors.New("bad digest index key")
		}
		if b, _, _, err := codec.DecodeDigestValue(v); err != nil || b.Base() != key.Backend(k[0]) {
			return errors.New("bad digest index value")
		}
	case string(codec.BucketGroups), string(codec.BucketDups):
		_, err := decodeGroup(v)
		return err
	case string(codec.BucketSurveys):
		_, _, _, err := decodeSurvey(v)
		return err
	}
	return nil
}

// checkCounters compares the stored counters with the keys q counted.
func checkCounters(db *bolt.DB, q *pagecheck.Result) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("counters unreadable: %v", r)
		}
	}()
	var c counters
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		c, err = decodeCounters(tx.Bucket(codec.BucketMeta).Get(codec.MetaCounters))
		return err
	})
	if err != nil {
		return fmt.Errorf("counters: %w", err)
	}
	if c.Files < 0 || c.Bytes < 0 || c.Duplicate < 0 || c.Digested < 0 || c.Digested > c.Files ||
		c.Unique > c.Digested || c.Groups < 0 || c.Groups > c.Unique ||
		c.Surveyed < 0 || c.Surveyed > c.Groups || c.SurveyedDup < 0 || c.SurveyedDup > c.Duplicate || c.Reclaimable < 0 {
		return fmt.Errorf("counters %+v are impossible", c)
	}
	// Digested counts the pending entries too, merged or not (pending.go).
	// Files counts the records whose inode entries are deferred
	// (pendinodes.go).
	_, pendHi := q.KeyRange(string(codec.BucketPending))
	_, pendInoHi := q.KeyRange(string(codec.BucketPendInodes))
	for _, b := range []struct {
		bucket []byte
		want   int64
		slack  int64
	}{{codec.BucketFiles, c.Files, 0}, {codec.BucketInodes, c.Files, pendInoHi}, {codec.BucketDigest, c.Digested, pendHi}, {codec.BucketDups, c.Groups, 0}, {codec.BucketSurveys, c.Surveyed, 0}} {
		lo, hi := q.KeyRange(string(b.bucket))
		if b.want < lo || b.want-b.slack > hi {
			return fmt.Errorf("bucket %q holds %d to %d keys, the counters say %d", b.bucket, lo, hi, b.want)
		}
	}
	return nil
}
