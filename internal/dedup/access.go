package dedup

import (
	"errors"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/store"
)

// Caller is the user a run acts for, as the API learns it from the peer's
// credentials. The daemon may run as root; a run never does for a caller
// what the caller could not do itself.
type Caller struct {
	UID  uint32
	GIDs []uint32 // the primary group and the supplementary groups
}

// access answers what the caller may see and change, from the mode bits.
// A file or directory with an access ACL grants a caller who is not its
// owner nothing: its mode bits no longer say what the kernel allows.
type access struct {
	c    *Caller
	dirs map[string]bool // directory → the caller may search it and every one above
}

func newAccess(c *Caller) *access { return &access{c: c, dirs: map[string]bool{}} }

// unrestricted reports a run for the daemon itself or for root.
func (a *access) unrestricted() bool { return a.c == nil || a.c.UID == 0 }

// readable keeps the members the caller may read: each must be readable
// and every directory above it searchable.
func (a *access) readable(ms []store.Member) []store.Member {
	if a.unrestricted() {
		return ms
	}
	return slices.DeleteFunc(ms, func(m store.Member) bool {
		p := string(m.Path)
		var st unix.Stat_t
		if !a.searchable(filepath.Dir(p)) || unix.Lstat(p, &st) != nil {
			return true
		}
		return !a.allows(p, &st, 4)
	})
}

// canModify reports whether the caller could write the file st itself:
// as its owner, or through its mode's write bit.
func (a *access) canModify(path []byte, st *unix.Stat_t) bool {
	return a.unrestricted() || st.Uid == a.c.UID || a.allows(string(path), st, 2)
}

// canReplace reports whether the caller could itself remove the name of
// file st from the directory dir (dst) and put another file there: write
// and search on the directory, and under a sticky bit owning one of them.
func (a *access) canReplace(dir string, dst, st *unix.Stat_t) bool {
	if a.unrestricted() {
		return true
	}
	if !a.allows(dir, dst, 2|1) {
		return false
	}
	return dst.Mode&unix.S_ISVTX == 0 || st.Uid == a.c.UID || dst.Uid == a.c.UID
}

// searchable reports whether the caller may search dir and every
// directory above it. Answers are kept for the run.
func (a *access) searchable(dir string) bool {
	if ok, seen := a.dirs[dir]; seen {
		return ok
	}
	ok := true
	if parent := filepath.Dir(dir); parent != dir {
		ok = a.searchable(parent)
	}
	var st unix.Stat_t
	ok = ok && unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && a.allows(dir, &st, 1)
	a.dirs[dir] = ok
	return ok
}

// allows reports whether the mode bits of st grant the caller every bit
// of want (4 read, 2 write, 1 execute or search), in the class the
// kernel would pick: owner, group, or other.
func (a *access) allows(path string, st *unix.Stat_t, want uint32) bool {
	if a.unrestricted() {
		return true
	}
	perm := st.Mode & 0o7
	switch {
	case st.Uid == a.c.UID:
		return (st.Mode>>6)&want == want
	case slices.Contains(a.c.GIDs, st.Gid):
		perm = (st.Mode >> 3) & 0o7
	}
	return perm&want == want && !hasACL(path)
}

// hasACL reports whether path carries an access ACL, or may: any answer
// but "no such attribute" counts as yes.
func hasACL(path string) bool {
	_, err := unix.Lgetxattr(path, "system.posix_acl_access", nil)
	return !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.ENOTSUP)
}
