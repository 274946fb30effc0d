package dedup

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// fakeLedger reports writes to the paths it was told about, at or after
// the time it was told.
type fakeLedger struct {
	mu      sync.Mutex
	written map[string]int64
}

func (l *fakeLedger) write(path string) { l.writeAt(path, time.Now()) }

func (l *fakeLedger) writeAt(path string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written == nil {
		l.written = map[string]int64{}
	}
	l.written[path] = at.UnixNano()
}

func (l *fakeLedger) WrittenSince(path string, dev, ino uint64, sinceNs int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.written[path]
	return ok && at >= sinceNs
}

// TestRecheck changes one pair of three between plan and action, in each
// way the check must see, in both modes: that pair is skipped for the
// reason, the file keeps what it holds now, and the other pairs are done.
func TestRecheck(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, st *store.Store, l *fakeLedger, path string)
		want   Reason
	}{
		{"rewritten", func(t *testing.T, st *store.Store, l *fakeLedger, p string) {
			writeFile(t, p, content(99, 40_000))
		}, SkipChanged},
		{"rewritten with the mtime set back", func(t *testing.T, st *store.Store, l *fakeLedger, p string) {
			fi, _ := os.Lstat(p)
			b, _ := os.ReadFile(p)
			b[0] ^= 1
			writeFile(t, p, b)
			must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}, SkipChanged},
		{"replaced by a copy", func(t *testing.T, st *store.Store, l *fakeLedger, p string) {
			b, _ := os.ReadFile(p)
			writeFile(t, p+".new", b)
			must(t, os.Rename(p+".new", p))
		}, SkipChanged},
		{"removed", func(t *testing.T, st *store.Store, l *fakeLedger, p string) {
			must(t, os.Remove(p))
		}, SkipChanged},
		{"hashed again", func(t *testing.T, st *store.Store, l *fakeLedger, p string) {
			record(t, st, p)
		}, SkipChanged},
		{"written, says the ledger", func(t *testing.T, st *store.Store, l *fakeLedger, p string) {
			l.write(p)
		}, SkipWritten},
	} {
		for _, mode := range []Mode{Reflink, Hardlink} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				kind := loopfs.XFS
				if mode == Hardlink {
					kind = loopfs.Ext4
				}
				fs := loopfs.New(t, kind, loopfs.Options{Size: loopfs.MinSize[kind]})
				st := openStore(t)
				var ledger fakeLedger
				d := New(st, Options{Ledger: &ledger, Intents: NewMetaIntents(st)})
				data := content(10, 40_000)
				for _, n := range []string{"k", "t1", "t2", "t3"} {
					writeFile(t, fs.Path(n), data)
				}
				must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
				recordAll(t, st, fs, "k", "t1", "t2", "t3")
				req := Request{PlanOptions: PlanOptions{Mode: mode}}
				plan, err := d.Plan(context.Background(), req)
				if err != nil || plan.Actions != 3 || string(plan.Groups[0].Keeper.Path) != fs.Path("k") {
					t.Fatalf("plan: %d actions, %v; want 3 against k", plan.Actions, err)
				}
				c.change(t, st, &ledger, fs.Path("t2"))
				var now []byte
				if b, err := os.ReadFile(fs.Path("t2")); err == nil {
					now = b
				}
				res, err := d.Apply(context.Background(), plan, req)
				if err != nil || res.Done != 2 || res.Skipped[c.want] != 1 || string(res.Skips[0].Target) != fs.Path("t2") {
					t.Fatalf("done %d, skips %v, %v; want 2 done and t2 skipped as %s", res.Done, res.Skips, err, c.want)
				}
				if now != nil {
					assertContent(t, fs.Path("t2"), now)
				}
				for _, n := range []string{"t1", "t3"} {
					assertContent(t, fs.Path(n), data)
				}
			})
		}
	}
}

// TestRecheckKeeper: a keeper changed after the plan skips its group's
// actions and touches none of them.
func TestRecheckKeeper(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	st := openStore(t)
	d := New(st, Options{})
	data := content(11, 30_000)
	for _, n := range []string{"k", "t1", "t2"} {
		writeFile(t, fs.Path(n), data)
	}
	must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
	recordAll(t, st, fs, "k", "t1", "t2")
	plan, err := d.Plan(context.Background(), Request{})
	if err != nil || plan.Actions != 2 {
		t.Fatalf("plan: %d actions, %v", plan.Actions, err)
	}
	changed := content(12, 30_000)
	writeFile(t, fs.Path("k"), changed)
	res, err := d.Apply(context.Background(), plan, Request{})
	if err != nil || res.Done != 0 || res.Skipped[SkipChanged] != 2 {
		t.Fatalf("done %d, skipped %v, %v; want both skipped as changed", res.Done, res.Skipped, err)
	}
	assertContent(t, fs.Path("k"), changed)
	for _, n := range []string{"t1", "t2"} {
		assertContent(t, fs.Path(n), data)
		if sharesAll(t, fs.Path(n), fs.Path("k")) {
			t.Errorf("%s shares the changed keeper's extents", n)
		}
	}
}
