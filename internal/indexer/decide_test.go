package indexer

import (
	"testing"

	"github.com/annexd/annexd/key"
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
	flagged := renamed // an audit found it corrupt
	flagged.rec.State, flagged.rec.Backend, flagged.rec.Digest = store.StateCorrupt, key.SHA256E, make([]byte, 32)
	flaggedMoved := flagged
	flaggedMoved.rec.CtimeNs = file.CtimeNs
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
		{"record changing", with(renamed, func(f *renameFacts) { f.rec.State = store.StateChanging }), hashIt},
		{"record pending", with(renamed, func(f *renameFacts) { f.rec.State = store.StatePending }), hashIt},
		{"another size", with(renamed, func(f *renameFacts) { f.rec.Size++ }), hashIt},
		{"another mtime", with(renamed, func(f *renameFacts) { f.rec.MtimeNs++ }), hashIt},
		{"racily clean record", with(renamed, func(f *renameFacts) { f.racy = true }), hashIt},
		{"born after the record: a reused inode", with(renamed, func(f *renameFacts) { f.bornAfter = true }), hashIt},
		{"written since the record", with(renamed, func(f *renameFacts) { f.seen = true }), hashIt},
		{"a doubt since the record", with(renamed, func(f *renameFacts) { f.unsure = true }), hashIt},
		{"moved with its directory, ledger says written", with(moved, func(f *renameFacts) { f.seen = true }), takeRename},
		{"moved with its directory, a doubt", with(moved, func(f *renameFacts) { f.unsure = true }), takeRename},
		{"another name in the pipeline", with(renamed, func(f *renameFacts) { f.linkBusy = true }), hashIt},
		{"moved, another name in the pipeline", with(moved, func(f *renameFacts) { f.linkBusy = true }), hashIt},
		{"old path holds something else", with(renamed, func(f *renameFacts) { f.oldNow = oldOther }), hashIt},
		{"hard link, record's ctime is the inode's",
			with(renamed, func(f *renameFacts) { f.oldNow, f.oldCtime = oldSame, f.rec.CtimeNs }), takeLink},
		{"hard link, inode changed since the record",
			with(renamed, func(f *renameFacts) { f.oldNow, f.oldCtime = oldSame, f.rec.CtimeNs+1 }), hashIt},
		{"hard link, written", with(renamed, func(f *renameFacts) {
			f.oldNow, f.oldCtime, f.seen = oldSame, f.rec.CtimeNs, true
		}), hashIt},
		{"renamed with other names", with(renamed, func(f *renameFacts) { f.nlink = 2 }), hashIt},
		{"moved with its directory, other names", with(moved, func(f *renameFacts) { f.nlink = 2 }), takeRename},
		{"moved with its directory, which is gone", with(moved, func(f *renameFacts) { f.dirMovable = true }), moveDir},
		{"renamed itself into a directory whose old one is gone",
			with(renamed, func(f *renameFacts) { f.dirMovable = true }), takeRename},
		{"directory gone but the record is racily clean",
			with(moved, func(f *renameFacts) { f.dirMovable, f.racy = true, true }), hashIt},

		// A flagged record claims no key for the bytes: it follows its
		// file on a doubt, and only a write seen keeps it back.
		{"flagged, renamed", flagged, takeRename},
		{"unreadable with a digest, renamed", with(flagged, func(f *renameFacts) { f.rec.State = store.StateUnreadable }), takeRename},
		{"unreadable without a digest", with(flagged, func(f *renameFacts) {
			f.rec.State, f.rec.Backend, f.rec.Digest = store.StateUnreadable, key.Unknown, nil
		}), hashIt},
		{"flagged, renamed under a doubt", with(flagged, func(f *renameFacts) { f.unsure = true }), takeRename},
		{"flagged, racy timestamps do not matter", with(flagged, func(f *renameFacts) { f.racy = true }), takeRename},
		{"flagged, written since", with(flagged, func(f *renameFacts) { f.seen = true }), hashIt},
		{"flagged, another size", with(flagged, func(f *renameFacts) { f.rec.Size++ }), hashIt},
		{"flagged, born after the record", with(flagged, func(f *renameFacts) { f.bornAfter = true }), hashIt},
		{"flagged, another name in the pipeline", with(flagged, func(f *renameFacts) { f.linkBusy = true }), hashIt},
		{"flagged, a hard link: never copied", with(flagged, func(f *renameFacts) {
			f.oldNow, f.oldCtime = oldSame, f.rec.CtimeNs
		}), hashIt},
		{"flagged, moved with its directory, which is gone", with(flaggedMoved, func(f *renameFacts) { f.dirMovable = true }), moveDir},
		{"flagged, moved with its directory, written", with(flaggedMoved, func(f *renameFacts) { f.seen = true }), takeRename},
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

// TestJudge covers what other bytes than a file's prior record mean, with
// no file system: only a witness of a write (size, mtime, the ledger, a
// racily clean record) makes them the key; without one the recorded key
// stays, corrupt or changed without a trace.
func TestJudge(t *testing.T) {
	id := store.Identity{Dev: 1, Ino: 7, Size: 100, MtimeNs: 1000, CtimeNs: 2000}
	was := store.Record{Backend: key.SHA256E, Digest: bytes32(1), HashedAt: 3000, State: store.StateOK}
	was.SetIdentity(id)
	rot := rehash{was: was, now: id, backend: key.SHA256E, digest: bytes32(2), trusted: true}
	chmod := rot // only the ctime moved
	chmod.now.CtimeNs = 9000
	with := func(r rehash, change func(*rehash)) rehash {
		change(&r)
		return r
	}
	state := func(st store.State) func(*rehash) { return func(r *rehash) { r.was.State = st } }
	for _, tt := range []struct {
		name string
		r    rehash
		want outcome
	}{
		{"rot: stat unchanged, ctime too", rot, keepCorrupt},
		{"the same bytes", with(rot, func(r *rehash) { r.digest = bytes32(1) }), takeDigest},
		{"the same bytes on a flagged record: healed", with(rot, func(r *rehash) {
			r.digest, r.was.State = bytes32(1), store.StateCorrupt
		}), takeDigest},
		{"no digest recorded", with(rot, func(r *rehash) { r.was.Backend, r.was.Digest = key.Unknown, nil }), takeDigest},
		{"another backend", with(rot, func(r *rehash) { r.backend = key.BLAKE2B256 }), takeDigest},
		{"record changing", with(rot, state(store.StateChanging)), takeDigest},
		{"record pending", with(rot, state(store.StatePending)), takeDigest},
		{"another size", with(rot, func(r *rehash) { r.now.Size++ }), takeDigest},
		{"another mtime", with(rot, func(r *rehash) { r.now.MtimeNs++ }), takeDigest},
		{"another inode", with(rot, func(r *rehash) { r.now.Ino++ }), takeDigest},
		{"another device", with(rot, func(r *rehash) { r.now.Dev++ }), takeDigest},
		{"a write seen", with(rot, func(r *rehash) { r.seen = true }), takeDigest},
		{"a write seen, ctime moved (rsync --inplace -t)", with(chmod, func(r *rehash) { r.seen = true }), takeDigest},
		{"racily clean", with(rot, func(r *rehash) { r.racy = true }), takeDigest},
		{"racy timestamps on a flagged record", with(rot, func(r *rehash) { r.racy, r.was.State = true, store.StateCorrupt }), keepCorrupt},
		{"after an unclean end: a lost write", with(rot, func(r *rehash) { r.trusted = false }), takeLost},
		{"after an unclean end, flagged: corrupt still", with(rot, func(r *rehash) {
			r.trusted, r.was.State = false, store.StateCorrupt
		}), keepCorrupt},
		{"after an unclean end, ctime moved on", with(chmod, func(r *rehash) { r.trusted = false }), keepUntraced},
		{"after an unclean end, an older ctime: the journal lost metadata too", with(rot, func(r *rehash) {
			r.trusted, r.now.CtimeNs = false, r.was.CtimeNs-1
		}), takeLost},
		{"an older ctime, trusted: untraced", with(rot, func(r *rehash) { r.now.CtimeNs = r.was.CtimeNs - 1 }), keepUntraced},
		{"flagged corrupt, still rotten", with(rot, state(store.StateCorrupt)), keepCorrupt},
		{"unreadable with the last digest, now readable", with(rot, state(store.StateUnreadable)), keepCorrupt},
		{"only the ctime moved (chmod, chown, link, xattr)", chmod, keepUntraced},
		{"only the ctime moved, flagged corrupt: corrupt still", with(chmod, state(store.StateCorrupt)), keepCorrupt},
		{"flagged untraced, hashed again with the ctime it took: untraced still", with(rot, state(store.StateUntraced)), keepUntraced},
		{"flagged untraced, the ctime moved again", with(chmod, state(store.StateUntraced)), keepUntraced},
		{"flagged untraced, after an unclean end: untraced still", with(rot, func(r *rehash) {
			r.trusted, r.was.State = false, store.StateUntraced
		}), keepUntraced},
		{"flagged untraced, the same bytes: healed", with(rot, func(r *rehash) {
			r.digest, r.was.State = bytes32(1), store.StateUntraced
		}), takeDigest},
		{"flagged untraced, a write seen", with(rot, func(r *rehash) { r.seen, r.was.State = true, store.StateUntraced }), takeDigest},
		{"flagged untraced, written through another name before the finding", with(rot, func(r *rehash) {
			r.linked, r.was.State = true, store.StateUntraced
		}), takeDigest},
		{"only the ctime moved, a write may be unread", with(chmod, func(r *rehash) { r.unread = true }), askLater},
		{"only the ctime moved, unread, but a write seen", with(chmod, func(r *rehash) { r.unread, r.seen = true, true }), takeDigest},
		{"ctime unchanged, unread does not matter", with(rot, func(r *rehash) { r.unread = true }), keepCorrupt},
		{"only the ctime moved, written through another name", with(chmod, func(r *rehash) { r.linked = true }), takeDigest},
		{"flagged with the ctime a finding took, written through another name before it", with(rot, func(r *rehash) {
			r.linked, r.was.State = true, store.StateCorrupt
		}), takeDigest},
		{"ctime unchanged, a write at another name: another file's", with(rot, func(r *rehash) { r.linked = true }), keepCorrupt},
	} {
		if got := judge(tt.r); got != tt.want {
			t.Errorf("%s: judge = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func bytes32(b byte) []byte {
	d := make([]byte, 32)
	d[0] = b
	return d
}
