package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// pendingLoad puts 700 records over 140 digests, with hardlinks, then
// removes and rewrites some: the changes a first scan meets.
func pendingLoad() ([]Change, model) {
	m := model{}
	var cs []Change
	for i := range 700 {
		r := rec(fmt.Sprint("content ", i%140), int64(100+i%140), 1, uint64(1+i%600)) // 100 hardlinked pairs
		path := fmt.Sprintf("/t/d%d/f%03d", i%7, i)
		cs = append(cs, Change{Op: OpPut, Path: []byte(path), Record: r})
		m[path] = r
	}
	for i := 0; i < 700; i += 11 {
		path := fmt.Sprintf("/t/d%d/f%03d", i%7, i)
		cs = append(cs, Change{Op: OpDelete, Path: []byte(path)})
		delete(m, path)
	}
	for i := 5; i < 700; i += 13 {
		path := fmt.Sprintf("/t/d%d/f%03d", i%7, i)
		r := rec("rewritten", 9, 2, uint64(1000+i))
		cs = append(cs, Change{Op: OpPut, Path: []byte(path), Record: r})
		m[path] = r
	}
	return cs, m
}

// dupsOf lists Dups as digest → sorted member paths, with the counters.
func dupsOf(t *testing.T, s *Store) (map[string][]string, Stats) {
	t.Helper()
	got := map[string][]string{}
	err := s.Dups(context.Background(), DupOptions{}, func(g Group) error {
		var ps []string
		for _, mb := range g.Members {
			ps = append(ps, string(mb.Path))
		}
		slices.Sort(ps)
		got[fmt.Sprintf("%x", g.Digest)] = ps
		return nil
	})
	if err != nil {
		t.Fatalf("Dups: %v", err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return got, st
}

func wantDups(m model) (map[string][]string, int64) {
	want := map[string][]string{}
	var wasted int64
	for dk, g := range m.groups() {
		if g.Inodes < 2 {
			continue
		}
		var ps []string
		for _, mb := range g.Members {
			ps = append(ps, string(mb.Path))
		}
		slices.Sort(ps)
		want[fmt.Sprintf("%x", dk[1:])] = ps
		wasted += g.Duplicate
	}
	return want, wasted
}

func sameDups(t *testing.T, s *Store, m model) {
	t.Helper()
	got, st := dupsOf(t, s)
	want, wasted := wantDups(m)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Dups = %v\nwant %v", got, want)
	}
	if st.DupGroups != int64(len(want)) || st.Duplicate != wasted || st.Ungrouped != 0 {
		t.Errorf("Stats %+v, want %d groups, %d wasted, none ungrouped", st, len(want), wasted)
	}
}

// A large group defers its digest entries; a small one indexes at once;
// Dups merges what is pending and then counts every record.
func TestLargeGroupsDeferDigests(t *testing.T) {
	s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
		Options{NoSync: true, MaxDelay: time.Second, MaxIdle: 200 * time.Millisecond, mergeIdle: time.Hour})
	cs, m := pendingLoad()
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.Ungrouped == 0 || st.Digested != int64(len(m)) || st.Unique != 0 {
		t.Fatalf("after one group of %d changes: %+v, want every digest entry pending", len(cs), st)
	}
	mustCheck(t, s)
	for _, path := range []string{"/t/d1/f001", "/t/d5/f005"} { // a pending and a replaced entry
		r, ok, err := s.Get([]byte(path))
		if err != nil || !ok {
			t.Fatalf("Get %s: %v %v", path, ok, err)
		}
		got, err := s.ByDigest(r.Backend, r.Digest)
		want := m.paths(func(o Record) bool { return o.Indexed() && bytes.Equal(o.Digest, r.Digest) })
		if err != nil || !slices.Equal(sorted(paths(got)), want) {
			t.Errorf("ByDigest of %s with entries pending = %q, %v; want %q", path, paths(got), err, want)
		}
	}
	sameDups(t, s, m)

	before, _ := s.Stats()
	mustPut(t, s, "/t/small", rec("content 1", 101, 3, 1))
	m["/t/small"] = rec("content 1", 101, 3, 1)
	if st, _ := s.Stats(); st.Ungrouped != 0 || st.Duplicate != before.Duplicate+101 {
		t.Errorf("a lone put: %+v, want it grouped at once (wasted %d)", st, before.Duplicate+101)
	}
	sameDups(t, s, m)
}

// SettleSoon merges what is pending without waiting for the writer to be
// idle: here a change arrives every 20 ms, so the idle merge never comes.
func TestSettleSoonMergesWhileChangesTrickle(t *testing.T) {
	s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
		Options{NoSync: true, MaxDelay: time.Second, MaxIdle: 200 * time.Millisecond, mergeIdle: 300 * time.Millisecond})
	cs, m := pendingLoad()
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if n := s.Ungrouped(); n == 0 {
		t.Fatalf("after one group of %d changes nothing is pending", len(cs))
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			path := fmt.Sprintf("/elsewhere/f%d", i)
			r := rec(path, 10, 9, uint64(5000+i))
			m[path] = r
			s.Submit(Change{Op: OpPut, Path: []byte(path), Record: r}, func(error) {})
		}
	}()
	time.Sleep(500 * time.Millisecond)
	if n := s.Ungrouped(); n == 0 {
		t.Fatal("the trickle did not keep the writer from its idle merge; the test shows nothing")
	}
	s.SettleSoon()
	deadline := time.Now().Add(10 * time.Second)
	for s.Ungrouped() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-trickled
	if n := s.Ungrouped(); n > 0 {
		t.Fatalf("%d entries still pending 10 s after SettleSoon", n)
	}
	if err := s.Settle(context.Background()); err != nil { // the trickle's last changes
		t.Fatal(err)
	}
	sameDups(t, s, m)
	s.SettleSoon() // nothing pending: nothing to do
	mustCheck(t, s)
}

// A merge cut short leaves entries both merged and pending. The index
// stays consistent, a read-only open lists them but cannot group them, and
// the next merge finishes without counting any twice.
func TestMergeCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true, deferAt: 1, mergeIdle: time.Hour, mergeTx: 40})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	cs, m := pendingLoad()
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	// Cut in the digest phase, after the inode phase's transactions and
	// one of the digest phase's.
	cut := errors.New("cut short")
	inodeTx := (len(bucketKeys(t, s, codec.BucketPendInodes)) + 39) / 40
	chunks := 0
	mergeHook = func() error {
		if chunks++; chunks >= inodeTx+1 {
			return cut
		}
		return nil
	}
	defer func() { mergeHook = func() error { return nil } }()
	if err := s.Settle(context.Background()); !errors.Is(err, cut) {
		t.Fatalf("Settle with the merge cut short: %v", err)
	}
	both := 0
	_ = s.view(func(tx *bolt.Tx) error {
		digest := tx.Bucket(codec.BucketDigest)
		return tx.Bucket(codec.BucketPending).ForEach(func(k, _ []byte) error {
			if has(digest, k[codec.RunHeader:]) {
				both++
			}
			return nil
		})
	})
	if both == 0 {
		t.Fatal("no digest entry is both merged and pending: the cut missed the digest phase")
	}
	// Removing records whose entries are now both merged and pending must
	// take them from both, or the next merge would bring them back.
	var rm []Change
	for i := 0; i < 700; i += 5 {
		path := fmt.Sprintf("/t/d%d/f%03d", i%7, i)
		rm = append(rm, Change{Op: OpDelete, Path: []byte(path)})
		delete(m, path)
	}
	if err := s.SubmitAll(context.Background(), rm); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := s.Close(); err != nil { // its merge is cut short too
		t.Fatal(err)
	}
	mergeHook = func() error { return nil }

	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, ro)
	if st, _ := ro.Stats(); st.Ungrouped == 0 {
		t.Errorf("read-only after a cut-short merge: %+v, want entries pending", st)
	}
	if err := ro.Dups(context.Background(), DupOptions{}, func(Group) error { return nil }); !errors.Is(err, ErrUngrouped) {
		t.Errorf("read-only Dups with entries pending: %v, want ErrUngrouped", err)
	}
	r := m["/t/d2/f002"]
	if !r.Indexed() {
		t.Fatal("the test's record went away")
	}
	got, err := ro.ByDigest(r.Backend, r.Digest)
	want := m.paths(func(o Record) bool { return o.Indexed() && bytes.Equal(o.Digest, r.Digest) })
	if err != nil || !slices.Equal(sorted(paths(got)), want) {
		t.Errorf("read-only ByDigest = %q, %v; want %q", paths(got), err, want)
	}
	ro.Close()

	s = openTestAt(t, path, Options{NoSync: true}) // its Run merges the rest
	sameDups(t, s, m)
}

// A merge that keeps failing is retried after a growing delay, not every
// idle period, and logged once; the entries stay pending and a later merge
// groups them.
func TestFailingMergeBacksOff(t *testing.T) {
	var log bytes.Buffer
	s, err := Open(filepath.Join(t.TempDir(), "index.db"), Options{NoSync: true, deferAt: 1,
		mergeIdle: time.Millisecond, mergeTx: 8, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	mergeHook = func() error { calls.Add(1); return errors.New("no room") }
	defer func() { mergeHook = func() error { return nil } }()
	stop := runWriter(t, s)
	cs, m := pendingLoad()
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a thousand idle periods of 1 ms
	if n := calls.Load(); n < 1 || n > 6 {
		t.Errorf("%d merge attempts in a second of failures, want 1 to 6", n)
	}
	if n := strings.Count(log.String(), "cannot merge the digest index"); n != 1 {
		t.Errorf("logged %d times, want once: %s", n, log.String())
	}
	mergeHook = func() error { return nil }
	stop()
	mustCheck(t, s)
	s.Close()
	s = openTestAt(t, s.Path(), Options{NoSync: true})
	sameDups(t, s, m)
}

// A pending entry that disagrees with its record is reported by Check.
func TestCheckFindsStalePendingEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/t/a", rec("a", 10, 1, 1))
	stop()
	s.Close()
	editRaw(t, path, func(tx *bolt.Tx) error {
		fk, v := tx.Bucket(codec.BucketFiles).Cursor().First()
		r, err := codec.DecodeRecord(v)
		if err != nil {
			return err
		}
		digest := tx.Bucket(codec.BucketDigest)
		if err := digest.Delete(append(digestKey(nil, &r), fk...)); err != nil {
			return err
		}
		r.Size++                                                                                      // what the entry says; the record says 10
		k := append([]byte("\x00\x00\x00\x00\x00\x00\x00\x01"), append(digestKey(nil, &r), fk...)...) // run 1
		return tx.Bucket(codec.BucketPending).Put(k, encodePending(digestKey(nil, &r), fk, &r))
	})
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Check()
	if err != nil || !strings.Contains(strings.Join(rep.Problems, "\n"), "disagrees with its record") {
		t.Errorf("Check of a stale pending entry: %v, %q", err, rep.Problems)
	}
}
