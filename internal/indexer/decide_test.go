package indexer

import (
	"testing"

	"github.com/annexd/annexd/store"
)

// TestDecide covers every way a file without a record may or may not take
// the record kept for its inode, with no file system.
func TestDecide(t *testing.T) {
	file := store.Identity{Dev: 1, Ino: 7, Size: 100, MtimeNs: 1000, CtimeNs: 5000}
	rec := store.Record{State: store.StateOK, HashedAt: 3000}
	rec.SetIdentity(file)
	rec.CtimeNs = 2000 // before the rename, which changed it
	renamed := renameFacts{file: file, nlink: 1, found: true, old: "/r/old", rec: rec}
	moved := renamed // moved with its directory: the ctime is the record's
	moved.rec.CtimeNs = file.CtimeNs
	with := func(f renameFacts, change func(*renameFacts)) renameFacts {
		change(&f)
		return f
	}
	tests := []struct {
		name string
		f    renameFacts
		want verdict
	}{
		{"renamed file", renamed, takeRename},
		{"no record of the inode", with(renamed, func(f *renameFacts) { f.found = false }), hashIt},
		{"the file's record is here already", with(renamed, func(f *renameFacts) { f.here = hereCurrent }), keepHere},
		{"another record of the inode is here", with(renamed, func(f *renameFacts) { f.here = hereOther }), hashIt},
		{"record not ok", with(renamed, func(f *renameFacts) { f.rec.State = store.StateUnreadable }), hashIt},
		{"another size", with(renamed, func(f *renameFacts) { f.rec.Size++ }), hashIt},
		{"another mtime", with(renamed, func(f *renameFacts) { f.rec.MtimeNs++ }), hashIt},
		{"racily clean record", with(renamed, func(f *renameFacts) { f.racy = true }), hashIt},
		{"born after the record: a reused inode", with(renamed, func(f *renameFacts) { f.bornAfter = true }), hashIt},
		{"written since the record", with(renamed, func(f *renameFacts) { f.written = true }), hashIt},
		{"moved with its directory, ledger says written", with(moved, func(f *renameFacts) { f.written = true }), takeRename},
		{"another name in the pipeline", with(renamed, func(f *renameFacts) { f.linkBusy = true }), hashIt},
		{"moved, another name in the pipeline", with(moved, func(f *renameFacts) { f.linkBusy = true }), hashIt},
		{"old path holds something else", with(renamed, func(f *renameFacts) { f.oldNow = oldOther }), hashIt},
		{"hard link, record's ctime is the inode's",
			with(renamed, func(f *renameFacts) { f.oldNow, f.oldCtime = oldSame, f.rec.CtimeNs }), takeLink},
		{"hard link, inode changed since the record",
			with(renamed, func(f *renameFacts) { f.oldNow, f.oldCtime = oldSame, f.rec.CtimeNs+1 }), hashIt},
		{"hard link, written", with(renamed, func(f *renameFacts) {
			f.oldNow, f.oldCtime, f.written = oldSame, f.rec.CtimeNs, true
		}), hashIt},
		{"renamed with other names", with(renamed, func(f *renameFacts) { f.nlink = 2 }), hashIt},
		{"moved with its directory, other names", with(moved, func(f *renameFacts) { f.nlink = 2 }), takeRename},
		{"moved with its directory, which is gone", with(moved, func(f *renameFacts) { f.dirMovable = true }), moveDir},
		{"renamed itself into a directory whose old one is gone",
			with(renamed, func(f *renameFacts) { f.dirMovable = true }), takeRename},
		{"directory gone but the record is racily clean",
			with(moved, func(f *renameFacts) { f.dirMovable, f.racy = true, true }), hashIt},
	}
	for _, tt := range tests {
		if got := decide(tt.f); got != tt.want {
			t.Errorf("%s: decide = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRenamedDirs tells a file moved with its directory from one renamed
// itself.
func TestRenamedDirs(t *testing.T) {
	for _, tt := range []struct{ old, new, from, to string }{
		{"/a/x/f", "/b/y/f", "/a/x", "/b/y"},
		{"/a/x/f", "/a/x/g", "", ""},
		{"/a/x/f", "/b/y/g", "", ""},
		{"/a/f", "/a/f", "", ""},
	} {
		if from, to := renamedDirs(tt.old, tt.new); from != tt.from || to != tt.to {
			t.Errorf("renamedDirs(%s, %s) = %q, %q; want %q, %q", tt.old, tt.new, from, to, tt.from, tt.to)
		}
	}
}
