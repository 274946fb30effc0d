package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/annexd/annexd/store/codec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// feedLines reads the whole feed after seq as "kind path [from] old>new finding"
// lines, with keys by their content seed's first digest byte.
func feedLines(t *testing.T, s *Store, after uint64) []string {
	t.Helper()
	es, _, err := s.FeedAfter(IndexID{}, after, 1<<20)
	if err != nil {
		t.Fatalf("FeedAfter(%d): %v", after, err)
	}
	var out []string
	for i, e := range es {
		if e.Seq != after+uint64(i)+1 {
			t.Fatalf("entry %d has sequence %d, want %d", i, e.Seq, after+uint64(i)+1)
		}
		l := e.Kind.String() + " " + string(e.Path)
		if e.From != nil {
			l += " from " + string(e.From)
		}
		l += fmt.Sprintf(" %s>%s", short(e.Old), short(e.New))
		if e.Finding != "" {
			l += " " + e.Finding
		}
		out = append(out, l)
	}
	return out
}

func short(k ContentKey) string {
	if k.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%x/%d", k.Digest[:2], k.Size)
}

func keyHex(content string, size int64) string {
	r := rec(content, size, 0, 0)
	return short(keyOf(&r))
}

func wantLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("feed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestFeedKinds: each kind of change is logged once with its keys; a
// rename is one move, a directory's rename one move per file, rot and a
// lost write are rot, not edits.
func TestFeedKinds(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	a, b, c := rec("a", 1, 1, 10), rec("b", 2, 1, 10), rec("c", 3, 1, 11)
	mustPut(t, s, "/r/a", a)
	mustPut(t, s, "/r/a", b)
	if _, err := s.Move(ctx, []byte("/r/a"), []byte("/r/b")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/r/d/c", c)
	if _, err := s.Move(ctx, []byte("/r/d"), []byte("/r/e")); err != nil {
		t.Fatal(err)
	}
	bad := c
	bad.State = StateCorrupt
	if err := s.PutIf(ctx, []byte("/r/e/c"), bad, c); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIf(ctx, []byte("/r/e/c"), c, bad); err != nil {
		t.Fatal(err)
	}
	lost := rec("old bytes", 3, 1, 11)
	if err := s.SubmitAll(ctx, []Change{{Op: OpPut, Path: []byte("/r/e/c"), Record: lost, Finding: "lost_write"}}); err != nil {
		t.Fatal(err)
	}
	pend := Record{State: StatePending, Dev: 1, Ino: 12}
	mustPut(t, s, "/r/p", pend)
	if err := s.SubmitAll(ctx, []Change{{Op: OpDelete, Path: []byte("/r/b")}}); err != nil {
		t.Fatal(err)
	}
	ka, kb, kc, kl := keyHex("a", 1), keyHex("b", 2), keyHex("c", 3), keyHex("old bytes", 3)
	wantLines(t, feedLines(t, s, 0),
		"add /r/a ->"+ka,
		"edit /r/a "+ka+">"+kb,
		"move /r/b from /r/a "+kb+">"+kb,
		"add /r/d/c ->"+kc,
		"move /r/e/c from /r/d/c "+kc+">"+kc,
		"rot /r/e/c "+kc+">- corrupt",
		"healed /r/e/c "+kc+">"+kc,
		"rot /r/e/c "+kc+">"+kl+" lost_write",
		"delete /r/b "+kb+">-",
	)
}

// TestFeedRetention: the feed keeps Keep entries, whoever reads it, and
// answers ErrResync for older ones; the hub's trimming leaves it alone.
func TestFeedRetention(t *testing.T) {
	s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
		Options{MaxDelay: 2e6, NoSync: true, Changes: true, Feed: FeedOptions{Keep: 10}})
	for i := range 25 {
		mustPut(t, s, fmt.Sprintf("/r/%02d", i), rec(fmt.Sprint(i), 1, 1, uint64(i+1)))
	}
	st, err := s.ChangeLog()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TrimChanges(context.Background(), st.Seq); err != nil {
		t.Fatal(err)
	}
	fs, err := s.Feed()
	if err != nil {
		t.Fatal(err)
	}
	if fs.Seq != 25 || fs.Floor != 16 {
		t.Fatalf("feed holds %d to %d, want 16 to 25", fs.Floor, fs.Seq)
	}
	if _, _, err := s.FeedAfter(IndexID{}, 14, 100); !errors.Is(err, ErrResync) {
		t.Fatalf("FeedAfter(14): %v, want ErrResync", err)
	}
	if got := feedLines(t, s, 15); len(got) != 10 || !strings.HasPrefix(got[0], "add /r/15 ") {
		t.Fatalf("after 15: %q", got)
	}
	if _, _, err := s.FeedAfter(IndexID{}, 26, 100); !errors.Is(err, ErrResync) {
		t.Fatalf("FeedAfter(26), beyond the last: %v, want ErrResync", err)
	}
}

// TestFeedMaxAge: entries older than MaxAge go at the next commit.
func TestFeedMaxAge(t *testing.T) {
	s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
		Options{MaxDelay: 2e6, NoSync: true, Feed: FeedOptions{MaxAge: 200 * time.Millisecond}})
	mustPut(t, s, "/r/old", rec("old", 1, 1, 1))
	time.Sleep(300 * time.Millisecond)
	mustPut(t, s, "/r/new", rec("new", 1, 1, 2))
	if _, _, err := s.FeedAfter(IndexID{}, 0, 10); !errors.Is(err, ErrResync) {
		t.Fatalf("FeedAfter(0) with the first entry aged out: %v, want ErrResync", err)
	}
	wantLines(t, feedLines(t, s, 1), "add /r/new ->"+keyHex("new", 1))
}

// TestFeedRestart: the feed, its id and sequence survive a restart, with
// the hub's log kept too (no gap in either); an unlogged write and a new
// index file answer ErrResync.
func TestFeedRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	opts := Options{MaxDelay: 2e6, NoSync: true, Changes: true}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/r/a", rec("a", 1, 1, 1))
	before, _ := s.Feed()
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, stop = reopenFeed(t, path, opts)
	mustPut(t, s, "/r/b", rec("b", 1, 1, 2))
	after, _ := s.Feed()
	if after.IndexID != before.IndexID || after.Floor != 1 || after.Seq != 2 {
		t.Fatalf("after a restart the feed is %+v, was %+v", after, before)
	}
	if _, _, err := s.FeedAfter(before.IndexID, 0, 10); err != nil {
		t.Fatalf("FeedAfter across a restart: %v", err)
	}
	if _, _, err := s.ChangesAfter(0, 10); err != nil {
		t.Fatalf("the hub's log across a restart: %v", err)
	}
	closeStore(t, s, stop)

	editRaw(t, path, func(tx *bolt.Tx) error { return tx.Bucket(codec.BucketMeta).Put([]byte("x"), []byte("y")) })
	s, stop = reopenFeed(t, path, opts)
	if _, _, err := s.FeedAfter(before.IndexID, 2, 10); !errors.Is(err, ErrResync) {
		t.Fatalf("after an unlogged write: %v, want ErrResync", err)
	}
	closeStore(t, s, stop)

	other := openTest(t)
	if _, _, err := other.FeedAfter(before.IndexID, 0, 10); !errors.Is(err, ErrResync) {
		t.Fatalf("another index with the id of the first: %v, want ErrResync", err)
	}
}

func reopenFeed(t *testing.T, path string, opts Options) (*Store, func()) {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, runWriter(t, s)
}

func closeStore(t *testing.T, s *Store, stop func()) {
	t.Helper()
	stop()
	mustCheck(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFeedWait: a waiter wakes when a change is logged.
func TestFeedWait(t *testing.T) {
	s := openTest(t)
	st, _ := s.Feed()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- s.FeedWait(ctx, st.Seq)
	}()
	time.Sleep(50 * time.Millisecond)
	mustPut(t, s, "/r/a", rec("a", 1, 1, 1))
	if err := <-done; err != nil {
		t.Fatalf("FeedWait: %v", err)
	}
}
