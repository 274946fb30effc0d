package dedup

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// The caller and two other users of these tests.
const (
	callerUID, callerGID = 1000, 1000
	otherUID, otherGID   = 2000, 2000
	sharedGID            = 3000
)

var caller = &Caller{UID: callerUID, GIDs: []uint32{callerGID, sharedGID}}

// posixACL encodes an access ACL that denies user uid everything while the
// mode bits still grant "other" read: user::rw- user:uid:--- group::r--
// mask::r-- other::r--.
func posixACL(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 6, ^uint32(0)}, {2, 0, uid}, {4, 4, ^uint32(0)}, {0x10, 4, ^uint32(0)}, {0x20, 4, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// searchableAbove opens the directories above dir to every user, as a
// home directory's parents are; t.TempDir makes them 0700.
func searchableAbove(t *testing.T, dir string) {
	t.Helper()
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		must(t, os.Chmod(d, 0o755))
	}
}

// TestAccess checks what a caller may read, modify and replace, by mode,
// owner, group, directory search, sticky bit and ACL.
func TestAccess(t *testing.T) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	searchableAbove(t, fs.Dir)
	type node struct {
		path     string
		dir      bool
		uid, gid int
		mode     os.FileMode
	}
	for _, n := range []node{
		{"open", true, otherUID, otherGID, 0o755},
		{"open/mine", false, callerUID, callerGID, 0o600},
		{"open/theirs", false, otherUID, otherGID, 0o600},
		{"open/world", false, otherUID, otherGID, 0o644},
		{"open/group-rw", false, otherUID, sharedGID, 0o660},
		{"open/group-none", false, otherUID, sharedGID, 0o604}, // group class applies: no access
		{"open/acl", false, otherUID, otherGID, 0o644},
		{"closed", true, otherUID, otherGID, 0o700},
		{"closed/world", false, otherUID, otherGID, 0o644},
		{"writable", true, otherUID, sharedGID, 0o775},
		{"writable/theirs", false, otherUID, otherGID, 0o644},
		{"sticky", true, otherUID, otherGID, os.ModeSticky | 0o777},
		{"sticky/mine", false, callerUID, callerGID, 0o644},
		{"sticky/theirs", false, otherUID, otherGID, 0o666},
	} {
		p := fs.Path(n.path)
		if n.dir {
			must(t, os.Mkdir(p, 0))
		} else {
			writeFile(t, p, []byte("x"))
		}
		must(t, os.Chown(p, n.uid, n.gid))
		must(t, os.Chmod(p, n.mode))
	}
	must(t, unix.Setxattr(fs.Path("open/acl"), "system.posix_acl_access", posixACL(callerUID), 0))
	must(t, os.Chmod(fs.Path("open/acl"), 0o644))

	a := newAccess(caller)
	stat := func(p string) *unix.Stat_t {
		var st unix.Stat_t
		must(t, unix.Lstat(fs.Path(p), &st))
		return &st
	}
	for _, c := range []struct {
		path                  string
		read, modify, replace bool
	}{
		{"open/mine", true, true, false},
		{"open/theirs", false, false, false},
		{"open/world", true, false, false},
		{"open/group-rw", true, true, false},
		{"open/group-none", false, false, false},
		{"open/acl", false, false, false},
		{"closed/world", false, false, false},
		{"writable/theirs", true, false, true},
		{"sticky/mine", true, true, true},
		{"sticky/theirs", true, true, false},
	} {
		st := stat(c.path)
		ms := a.readable([]store.Member{member(fs.Path(c.path))})
		dir := c.path[:strings.LastIndexByte(c.path, '/')]
		got := []bool{len(ms) == 1, a.canModify([]byte(fs.Path(c.path)), st), a.canReplace(fs.Path(dir), stat(dir), st)}
		if want := []bool{c.read, c.modify, c.replace}; !slices.Equal(got, want) {
			t.Errorf("%s: read, modify, replace %v, want %v", c.path, got, want)
		}
	}
	for _, unrestricted := range []*Caller{nil, {UID: 0}} {
		a := newAccess(unrestricted)
		st := stat("closed/world")
		if len(a.readable([]store.Member{member(fs.Path("closed/world"))})) != 1 || !a.canModify(nil, st) || !a.canReplace(fs.Path("closed"), stat("closed"), st) {
			t.Errorf("caller %v is refused", unrestricted)
		}
	}
}

// TestCallerRun: a run for a caller leaves out what the caller cannot
// read, without a word about it, and does not act on what the caller
// could not modify.
func TestCallerRun(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	searchableAbove(t, fs.Dir)
	st := openStore(t)
	data := content(13, 60_000)
	files := []struct {
		name     string
		uid, gid int
		mode     os.FileMode
	}{
		{"k", callerUID, callerGID, 0o644},
		{"mine", callerUID, callerGID, 0o644},
		{"theirs-readable", otherUID, otherGID, 0o644},
		{"theirs-secret", otherUID, otherGID, 0o600},
	}
	for _, f := range files {
		writeFile(t, fs.Path(f.name), data)
		must(t, os.Chown(fs.Path(f.name), f.uid, f.gid))
		must(t, os.Chmod(fs.Path(f.name), f.mode))
	}
	must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
	for _, f := range files {
		record(t, st, fs.Path(f.name))
	}
	d := New(st, Options{})
	req := Request{Caller: caller}
	plan, res, err := runDedup(t, d, req)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Actions != 2 || res.Done != 1 || res.Skipped[SkipPermission] != 1 {
		t.Errorf("planned %d, done %d, skipped %v; want 2 planned, mine done, theirs-readable refused", plan.Actions, res.Done, res.Skipped)
	}
	for _, s := range res.Skips {
		if string(s.Target) != fs.Path("theirs-readable") {
			t.Errorf("skip of %s, want only theirs-readable", s.Target)
		}
	}
	for _, g := range plan.Groups {
		for _, a := range g.Actions {
			if strings.Contains(string(a.Targets[0].Path), "secret") {
				t.Errorf("the plan reveals %s", a.Targets[0].Path)
			}
		}
	}
	if !sharesAll(t, fs.Path("mine"), fs.Path("k")) || sharesAll(t, fs.Path("theirs-readable"), fs.Path("k")) ||
		sharesAll(t, fs.Path("theirs-secret"), fs.Path("k")) {
		t.Error("extents shared other than with mine only")
	}
	// The same run for the daemon itself does the rest.
	_, res, err = runDedup(t, d, Request{})
	if err != nil || res.Done != 2 {
		t.Errorf("unrestricted run: done %d, %v; want the 2 others", res.Done, err)
	}
}

func member(path string) store.Member { return store.Member{Path: []byte(path)} }

// TestCallerHardlink: hardlink mode replaces a name only in a directory
// the caller could write itself.
func TestCallerHardlink(t *testing.T) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	searchableAbove(t, fs.Dir)
	st := openStore(t)
	d := New(st, Options{Intents: NewMetaIntents(st)})
	data := content(14, 20_000)
	for _, dir := range []struct {
		name string
		uid  int
	}{{"theirs", otherUID}, {"mine", callerUID}} {
		must(t, os.Mkdir(fs.Path(dir.name), 0o755))
		for _, n := range []string{"k", "t"} {
			p := fs.Path(dir.name, n)
			writeFile(t, p, data)
			must(t, os.Chown(p, callerUID, callerGID))
		}
		must(t, os.Chown(fs.Path(dir.name), dir.uid, dir.uid))
		must(t, os.Chtimes(fs.Path(dir.name, "k"), aLongTimeAgo, aLongTimeAgo))
	}
	for _, p := range []string{"theirs/k", "theirs/t", "mine/k", "mine/t"} {
		record(t, st, fs.Path(p))
	}
	for _, dir := range []string{"theirs", "mine"} {
		req := Request{PlanOptions: PlanOptions{Mode: Hardlink, Paths: [][]byte{[]byte(fs.Path(dir))}}, Caller: caller}
		_, res, err := runDedup(t, d, req)
		want := map[string]Result{"theirs": {Skipped: map[Reason]int{SkipPermission: 1}}, "mine": {Done: 1}}[dir]
		if err != nil || res.Done != want.Done || res.Skipped[SkipPermission] != want.Skipped[SkipPermission] {
			t.Errorf("%s: done %d, skipped %v, %v; want done %d, skipped %v", dir, res.Done, res.Skipped, err, want.Done, want.Skipped)
		}
	}
	if lstat(t, fs.Path("theirs/t")).Ino == lstat(t, fs.Path("theirs/k")).Ino {
		t.Error("theirs/t was relinked")
	}
}
