package audit

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

func digestOf(s string) []byte { d := sha256.Sum256([]byte(s)); return d[:] }

// base is a record hashed a minute after its last write, and the lstat
// that matches it.
func base() (store.Record, fsstat.FileInfo) {
	const mtime = 1_700_000_000_000_000_000
	r := store.Record{Backend: key.SHA256E, Digest: digestOf("old"), Size: 3, MtimeNs: mtime, CtimeNs: mtime + 5,
		Dev: 2049, Ino: 77, HashedAt: mtime + int64(time.Minute), VerifiedAt: mtime + int64(time.Minute), State: store.StateOK}
	fi := fsstat.FileInfo{Dev: r.Dev, Ino: r.Ino, Size: r.Size, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs, Mode: 0o644, Nlink: 1}
	return r, fi
}

func readOf(content string, fi fsstat.FileInfo) *Read {
	return &Read{Digest: digestOf(content), After: fi}
}

func pathErr(err error) error { return &fs.PathError{Op: "read", Path: "/f", Err: err} }

func TestClassify(t *testing.T) {
	rec, fi := base()
	changed := func(f func(*fsstat.FileInfo)) fsstat.FileInfo { c := fi; f(&c); return c }
	ctime := changed(func(c *fsstat.FileInfo) { c.CtimeNs += 1e9 })
	older := changed(func(c *fsstat.FileInfo) { c.CtimeNs -= 1e9 })
	for _, tc := range []struct {
		name string
		f    Facts
		want Verdict
	}{
		{"gone", Facts{BeforeErr: pathErr(syscall.ENOENT)}, Verdict{Class: Missing}},
		{"gone with its file system away", Facts{BeforeErr: pathErr(syscall.ENOENT), Away: true}, Verdict{Class: Retry}},
		{"gone, the indexer holds it (a rename it applies)", Facts{BeforeErr: pathErr(syscall.ENOENT), Busy: true}, Verdict{Class: Busy}},
		{"gone, the index may not say why yet (a rename on its way)", Facts{BeforeErr: pathErr(syscall.ENOENT), Settling: true}, Verdict{Class: Retry}},
		{"parent became a file", Facts{BeforeErr: pathErr(syscall.ENOTDIR)}, Verdict{Class: Missing}},
		{"lstat refused", Facts{BeforeErr: pathErr(syscall.EACCES)}, Verdict{Class: Unreadable}},
		{"lstat I/O error", Facts{BeforeErr: pathErr(syscall.EIO)}, Verdict{Class: Unreadable}},
		{"lstat interrupted", Facts{BeforeErr: pathErr(syscall.EINTR)}, Verdict{Class: Retry}},
		{"now a symlink", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Mode = fs.ModeSymlink })}, Verdict{Class: Modified}},
		{"now a directory", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Mode = fs.ModeDir })}, Verdict{Class: Modified}},
		{"other device", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Dev++ })}, Verdict{Class: Modified}},
		{"other inode", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Ino++ })}, Verdict{Class: Modified}},
		{"other size", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Size++ })}, Verdict{Class: Modified}},
		{"new mtime", Facts{Before: changed(func(c *fsstat.FileInfo) { c.MtimeNs++ })}, Verdict{Class: Modified}},
		{"mtime put back, ctime moved, a write seen", Facts{Seen: true, Before: changed(func(c *fsstat.FileInfo) { c.CtimeNs += 1e9 })},
			Verdict{Class: Modified}},
		{"ctime moved, nothing seen: read it", Facts{Before: changed(func(c *fsstat.FileInfo) { c.CtimeNs += 1e9 })}, Verdict{Next: ReadIt}},
		{"mode alone changed", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Mode = 0o600 }), First: readOf("old", changed(func(c *fsstat.FileInfo) { c.Mode = 0o600 }))},
			Verdict{Class: OK}},
		{"chmod 000: ctime moved, cannot open", Facts{Before: changed(func(c *fsstat.FileInfo) { c.CtimeNs++; c.Mode = 0 }), OpenErr: pathErr(syscall.EACCES)},
			Verdict{Class: Unreadable}},
		{"replaced by another file that cannot be opened", Facts{Before: changed(func(c *fsstat.FileInfo) { c.Ino++; c.CtimeNs++ }), OpenErr: pathErr(syscall.EACCES)},
			Verdict{Class: Modified}},
		{"ctime moved, open failed otherwise: read it", Facts{Before: changed(func(c *fsstat.FileInfo) { c.CtimeNs++ }), OpenErr: pathErr(syscall.EMFILE)},
			Verdict{Next: ReadIt}},
		{"busy in the indexer", Facts{Before: fi, Busy: true}, Verdict{Class: Busy}},
		{"not read yet", Facts{Before: fi}, Verdict{Next: ReadIt}},
		{"same digest", Facts{Before: fi, First: readOf("old", fi)}, Verdict{Class: OK}},
		{"same digest, a write seen, racy, after a crash", Facts{Before: fi, Seen: true, Racy: true, Unclean: true, First: readOf("old", fi)},
			Verdict{Class: OK}},
		{"read: gone", Facts{Before: fi, First: &Read{Err: pathErr(syscall.ENOENT)}}, Verdict{Class: Missing}},
		{"read: gone, the index may not say why yet", Facts{Before: fi, Settling: true, First: &Read{Err: pathErr(syscall.ENOENT)}}, Verdict{Class: Retry}},
		{"read: gone with its file system, unmounted under the read", Facts{Before: fi, Away: true, First: &Read{Err: pathErr(syscall.ENOENT)}},
			Verdict{Class: Retry}},
		{"second read: gone with its file system", Facts{Before: fi, Away: true, First: readOf("rot", fi), Second: &Read{Err: pathErr(syscall.ENOENT)}},
			Verdict{Class: Retry}},
		{"read: I/O error", Facts{Before: fi, First: &Read{Err: pathErr(syscall.EIO)}}, Verdict{Class: Unreadable}},
		{"read: permission", Facts{Before: fi, First: &Read{Err: pathErr(syscall.EACCES)}}, Verdict{Class: Unreadable}},
		{"read: removed", Facts{Before: fi, First: &Read{Err: pathErr(syscall.ENOENT)}}, Verdict{Class: Missing}},
		{"read: changed (hasher's error)", Facts{Before: fi, First: &Read{Err: &hasher.ChangedError{Path: "/f", Before: fi}}}, Verdict{Class: Modified}},
		{"read: out of memory", Facts{Before: fi, First: &Read{Err: pathErr(syscall.ENOMEM)}}, Verdict{Class: Retry}},
		{"read: stopped", Facts{Before: fi, First: &Read{Err: context.Canceled}}, Verdict{Class: Retry}},
		{"identity moved during the read", Facts{Before: fi, First: readOf("new", changed(func(c *fsstat.FileInfo) { c.MtimeNs++ }))}, Verdict{Class: Modified}},
		{"differs, a write seen", Facts{Before: fi, Seen: true, First: readOf("new", fi)}, Verdict{Class: Modified}},
		{"differs, racily clean", Facts{Before: fi, Racy: true, First: readOf("new", fi)}, Verdict{Class: Modified}},
		{"differs: read again", Facts{Before: fi, First: readOf("rot", fi)}, Verdict{Next: ReadAgain}},
		{"second read: I/O error", Facts{Before: fi, First: readOf("rot", fi), Second: &Read{Err: pathErr(syscall.EIO)}}, Verdict{Class: Unreadable}},
		{"second read: changed", Facts{Before: fi, First: readOf("rot", fi), Second: readOf("new", changed(func(c *fsstat.FileInfo) { c.CtimeNs++ }))},
			Verdict{Class: Modified}},
		{"second read matches: transient", Facts{Before: fi, First: readOf("rot", fi), Second: readOf("old", fi)}, Verdict{Class: OK, Transient: true}},
		{"both reads differ alike: corrupt", Facts{Before: fi, First: readOf("rot", fi), Second: readOf("rot", fi)}, Verdict{Class: Corrupt}},
		{"reads disagree: corrupt", Facts{Before: fi, First: readOf("rot", fi), Second: readOf("rot2", fi)}, Verdict{Class: Corrupt}},
		{"reads disagree after a crash: still corrupt", Facts{Before: fi, Unclean: true, First: readOf("rot", fi), Second: readOf("rot2", fi)},
			Verdict{Class: Corrupt}},
		{"both reads differ alike after a crash: lost write", Facts{Before: fi, Unclean: true, First: readOf("older", fi), Second: readOf("older", fi)},
			Verdict{Class: LostWrite}},

		// Only the ctime moved: a chmod, a chown, a link, an xattr, or a
		// rewrite with the mtime put back. Its read decides.
		{"ctime moved, same digest", Facts{Before: ctime, First: readOf("old", ctime)}, Verdict{Class: OK}},
		{"ctime moved, differs: read again", Facts{Before: ctime, First: readOf("rot", ctime)}, Verdict{Next: ReadAgain}},
		{"ctime moved, transient", Facts{Before: ctime, First: readOf("rot", ctime), Second: readOf("old", ctime)},
			Verdict{Class: OK, Transient: true}},
		{"ctime moved, reads disagree: corrupt", Facts{Before: ctime, First: readOf("rot", ctime), Second: readOf("rot2", ctime)},
			Verdict{Class: Corrupt}},
		{"ctime moved, differs: ask the ledger again", Facts{Before: ctime, First: readOf("rot", ctime), Second: readOf("rot", ctime)},
			Verdict{Next: SyncLedger}},
		{"ctime moved, differs, a write seen once synced", Facts{Before: ctime, Synced: true, Seen: true, First: readOf("new", ctime),
			Second: readOf("new", ctime)}, Verdict{Class: Modified}},
		{"ctime moved, differs, nothing seen: untraced", Facts{Before: ctime, Synced: true, First: readOf("rot", ctime),
			Second: readOf("rot", ctime)}, Verdict{Class: Untraced}},
		{"ctime moved, the ledger could not sync", Facts{Before: ctime, SyncErr: context.DeadlineExceeded, First: readOf("rot", ctime),
			Second: readOf("rot", ctime)}, Verdict{Class: Retry}},
		{"ctime moved on after a crash: untraced, not lost", Facts{Before: ctime, Synced: true, Unclean: true, First: readOf("rot", ctime),
			Second: readOf("rot", ctime)}, Verdict{Class: Untraced}},
		{"an older ctime after a crash: lost", Facts{Before: older, Unclean: true, First: readOf("older", older),
			Second: readOf("older", older)}, Verdict{Class: LostWrite}},
		{"ctime moved, racily clean", Facts{Before: ctime, Racy: true, First: readOf("new", ctime)}, Verdict{Class: Modified}},

		// A finding that stands keeps its class.
		{"found untraced before, stat unchanged now", Facts{Before: fi, Standing: Untraced, First: readOf("rot", fi), Second: readOf("rot", fi)},
			Verdict{Class: Untraced}},
		{"found corrupt before, chmod since", Facts{Before: ctime, Synced: true, Standing: Corrupt, First: readOf("rot", ctime),
			Second: readOf("rot", ctime)}, Verdict{Class: Corrupt}},
		{"found untraced before, healed", Facts{Before: fi, Standing: Untraced, First: readOf("old", fi)}, Verdict{Class: OK}},
		{"found untraced before, written since", Facts{Before: fi, Standing: Untraced, Seen: true, First: readOf("new", fi)},
			Verdict{Class: Modified}},
		{"unreadable before (no class to keep)", Facts{Before: fi, Standing: Unreadable, First: readOf("rot", fi), Second: readOf("rot", fi)},
			Verdict{Class: Corrupt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.Record = rec
			got := Classify(&f)
			if got.Class != tc.want.Class || got.Next != tc.want.Next || got.Transient != tc.want.Transient {
				t.Fatalf("Classify = %+v, want %+v", got, tc.want)
			}
			if got.Next == Decided && got.Why == "" {
				t.Error("a verdict without a reason")
			}
		})
	}
}

// The power cut of a same-size rewrite: the record holds the new bytes'
// digest and the new (durable) mtime and ctime; the disk holds the old
// bytes. Stat and the ledger (a new process) see nothing, so the reads
// alone cannot tell it from bit rot: the witness is the unclean shutdown
// inside the span where the bytes were in memory only.
func TestClassifyPowerCut(t *testing.T) {
	const writeback = int64(40 * time.Second)
	rewrite := int64(1_700_000_000_000_000_000)
	rec := store.Record{Backend: key.SHA256E, Digest: digestOf("new bytes"), Size: 9, MtimeNs: rewrite, CtimeNs: rewrite,
		Dev: 2049, Ino: 77, HashedAt: rewrite + int64(1500*time.Millisecond), State: store.StateOK}
	rec.VerifiedAt = rec.HashedAt
	fi := fsstat.FileInfo{Dev: rec.Dev, Ino: rec.Ino, Size: rec.Size, MtimeNs: rec.MtimeNs, CtimeNs: rec.CtimeNs, Mode: 0o644}
	from, to, ok := lostWriteSpan(&rec, writeback)
	if !ok || from != rec.HashedAt || to != rewrite+writeback {
		t.Fatalf("lostWriteSpan = %d, %d, %v", from, to, ok)
	}
	crash := rec.HashedAt + int64(3*time.Second)
	unclean := from < crash && crash < to
	f := Facts{Record: rec, Before: fi, Unclean: unclean, First: readOf("old bytes", fi), Second: readOf("old bytes", fi)}
	if v := Classify(&f); v.Class != LostWrite {
		t.Fatalf("power cut: %+v, want lost_write", v)
	}
	// The same reads without an unclean shutdown in the span: bit rot.
	f.Unclean = false
	if v := Classify(&f); v.Class != Corrupt {
		t.Fatalf("no crash: %+v, want corrupt", v)
	}
	// Hashed long after its write, the bytes had reached the disk: a
	// crash later cannot explain a change, the span is empty.
	late := rec
	late.HashedAt = rewrite + int64(time.Hour)
	if _, _, ok := lostWriteSpan(&late, writeback); ok {
		t.Fatal("a record hashed an hour after its write has a lost-write span")
	}
	never := rec
	never.HashedAt = 0
	if _, _, ok := lostWriteSpan(&never, writeback); ok {
		t.Fatal("a record never hashed has a lost-write span")
	}
}

func TestRacy(t *testing.T) {
	rec, _ := base()
	for _, tc := range []struct {
		hashedAfter, gran int64
		want              bool
	}{{int64(time.Minute), 1, false}, {5, 1, true}, {5e8, 1e9, true}, {2e9, 1e9, false},
		{0, 1, true}, {-5, 1, true}} { // written at or after the hashing by the clock: it went back
		r := rec
		r.HashedAt = r.MtimeNs + tc.hashedAfter
		if got := racy(&r, tc.gran); got != tc.want {
			t.Errorf("hashed %d ns after mtime (ctime 5 ns after it), granularity %d: racy = %v", tc.hashedAfter, tc.gran, got)
		}
	}
}

func TestClassNames(t *testing.T) {
	for c := OK; c < classEnd; c++ {
		if got, ok := parseClass(c.String()); !ok || got != c {
			t.Errorf("%d → %q → %d, %v", c, c, got, ok)
		}
	}
	if fmt.Sprint(classEnd) != "Class(10)" {
		t.Errorf("unknown class prints %q", fmt.Sprint(classEnd))
	}
	for c, want := range map[Class]bool{OK: false, Corrupt: true, LostWrite: true, Unreadable: true, Untraced: true, Modified: false,
		Missing: false, Busy: false} {
		if c.Problem() != want {
			t.Errorf("%s.Problem() = %v", c, !want)
		}
	}
}

// Spans says a record is suspect when an unclean shutdown fell after it
// was hashed and before its bytes were surely written back.
func TestSpans(t *testing.T) {
	rec, _ := base() // hashed a minute after its last write
	s := &Spans{Writeback: 2 * time.Minute}
	if s.Suspect(&rec) {
		t.Fatal("suspect with no shutdown known")
	}
	s.Add(rec.HashedAt-int64(time.Hour), rec.HashedAt-1) // before it was hashed
	if s.Suspect(&rec) {
		t.Fatal("a shutdown before the hash makes it suspect")
	}
	s.Add(rec.CtimeNs+int64(3*time.Minute), rec.CtimeNs+int64(4*time.Minute)) // after writeback
	if s.Suspect(&rec) {
		t.Fatal("a shutdown after the writeback makes it suspect")
	}
	s.Add(rec.HashedAt+int64(10*time.Second), rec.HashedAt+int64(time.Hour)) // right after the commit
	if !s.Suspect(&rec) {
		t.Fatal("a shutdown right after the commit does not make it suspect")
	}
	if (&Spans{}).Suspect(&rec) {
		t.Fatal("the default writeback window with no spans")
	}
	f := CrashesFunc(func(r *store.Record) bool { return r.HashedAt == rec.HashedAt })
	if !f.Suspect(&rec) {
		t.Fatal("CrashesFunc")
	}
}
