package watcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/roots"
)

// addTree watches dir and every directory under it that is not ignored,
// each watch added before its directory is read, so nothing created inside
// in between is missed. A directory whose link count says it has no
// subdirectory is not read at all (leaf.go). Directories that cannot get a watch because the
// limit is reached are recorded in r.unwatched with the number of
// directories under them.
func (r *root) addTree(dir string) {
	stack := []string{dir}
	limited := 0
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := r.dirs[d]; ok {
			r.setup.done(d)
			continue
		}
		id := dirInodeOf(d)
		if d == r.path {
			r.rootFS = id.dev
		} else if r.opts.OneFileSystem && id.dev != r.rootFS {
			r.setup.done(d)
			continue // another file system: left out
		}
		if !r.takeOver(d, id) {
			r.setup.done(d)
			continue
		}
		if r.opts.beforeWatch != nil {
			r.opts.beforeWatch(d)
		}
		err := r.addWatch(d)
		r.setup.done(d) // watched, or known not to be
		if err != nil {
			if isLimit(err) {
				n := countDirs(d, r)
				r.unwatched[d] = n
				limited += n
			} else if unreadableErr(err) {
				r.denied.deny(d, err)
			}
			continue
		}
		r.denied.undeny(d)
		r.dirs[d] = nil
		if id != (inodeID{}) {
			r.dirInode[d], r.inodeDir[id] = id, d
		}
		if d != r.path {
			parent := filepath.Dir(d)
			if kids, ok := r.dirs[parent]; ok {
				if kids == nil {
					kids = make(map[string]struct{})
					r.dirs[parent] = kids
				}
				kids[filepath.Base(d)] = struct{}{}
			}
		}
		if !r.leaf(d, id) {
			stack = r.subdirs(d, stack)
		}
	}
	if limited > 0 {
		r.logLimit(limited)
	}
}

// takeOver prepares d, about to be watched, whose inode id may already be
// watched under another name: the directory was moved there, and the event
// for its old name is still on its way. The kernel keeps one watch per
// inode and fsnotify keys watches by path, so adding d first would hand the
// old name's watch to d, and dropping the old name when its event comes
// would then remove d's watch too, leaving d unwatched for good. So the old
// name is handled now, as its event would be. It reports false when the old
// name still is that directory (a bind mount inside the root): one inode
// has one watch, which keeps reporting under the old name, and d is not
// watched.
func (r *root) takeOver(d string, id inodeID) bool {
	old, ok := r.inodeDir[id]
	if id == (inodeID{}) || !ok || old == d {
		return true
	}
	if dirInodeOf(old) == id {
		r.log.Debug("directory already watched under another name", "path", d, "watched_as", old)
		return false
	}
	r.dirLeft(old, true)
	return true
}

// dirInodeOf returns the inode of the directory d, or the zero value.
func dirInodeOf(d string) inodeID {
	fi, err := fsstat.Lstat(d)
	if err != nil || !fi.IsDir() {
		return inodeID{}
	}
	return inodeID{fi.Dev, fi.Ino}
}

// subdirs appends the non-ignored subdirectories of d to stack.
func (r *root) subdirs(d string, stack []string) []string {
	names, err := listDirs(d, d == r.path)
	if unreadableErr(err) {
		r.denied.deny(d, err)
	}
	for _, name := range names {
		p := d + "/" + name
		if d == "/" {
			p = "/" + name
		}
		if p == r.opts.SyncDir || r.opts.Ignore.Match(r.rel(p), true) {
			continue
		}
		stack = append(stack, p)
	}
	return stack
}

// listDirs returns the names of the subdirectories of d, reading the
// directory with getdents and its d_type so files cost nothing. Only a root
// may be a symlink to a directory.
func listDirs(d string, isRoot bool) ([]string, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if !isRoot {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(d, flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d, Err: err}
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, &os.PathError{Op: "getdents", Path: d, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		names = appendDirs(names, fd, buf[:n])
	}
}

// appendDirs parses linux_dirent64 records and appends directory names.
func appendDirs(names []string, fd int, b []byte) []string {
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			break
		}
		typ := b[18]
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b = b[reclen:]
		if string(name) == "." || string(name) == ".." {
			continue
		}
		switch typ {
		case unix.DT_DIR:
		case unix.DT_UNKNOWN:
			var st unix.Stat_t
			if unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
		default:
			continue
		}
		names = append(names, string(name))
	}
	return names
}

// countDirs counts d and the non-ignored directories under it.
func countDirs(d string, r *root) int {
	n := 0
	stack := []string{d}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = r.subdirs(p, stack[:len(stack)-1])
		n++
	}
	return n
}

func (r *root) logLimit(missing int) {
	current := maxUserWatches()
	r.log.Error("inotify watch limit reached; unwatched directories are rescanned periodically",
		"watches", len(r.dirs), "unwatched", missing, "needed", len(r.dirs)+missing,
		"max_user_watches", current, "fix", sysctlFor(current, missing),
		"rescan_every", r.opts.DegradedRescan)
}

func isLimit(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE)
}

// addWatch adds the inotify watch of one directory.
func (r *root) addWatch(d string) error {
	if n := r.watchLimit.Load(); n > 0 && int64(len(r.dirs)) >= n {
		return &os.PathError{Op: "inotify_add_watch", Path: d, Err: unix.ENOSPC}
	}
	return r.fsw.Add(d)
}

// dropTree forgets dir and every watched directory under it, and any
// unwatched directory recorded there.
func (r *root) dropTree(dir string) {
	stack := []string{dir}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		kids, ok := r.dirs[d]
		if !ok {
			continue
		}
		for name := range kids {
			stack = append(stack, filepath.Join(d, name))
		}
		delete(r.dirs, d)
		if id, ok := r.dirInode[d]; ok {
			delete(r.dirInode, d)
			if r.inodeDir[id] == d {
				delete(r.inodeDir, id)
			}
		}
		// The watch may already be gone (deleted directory): ignore errors.
		if err := r.fsw.Remove(d); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) {
			r.log.Debug("cannot remove watch", "path", d, "err", err)
		}
	}
	if dir != r.path {
		if kids := r.dirs[filepath.Dir(dir)]; kids != nil {
			delete(kids, filepath.Base(dir))
		}
	}
	for p := range r.unwatched {
		if roots.Within(p, dir) {
			delete(r.unwatched, p)
		}
	}
	for p := range r.denied.why {
		if roots.Within(p, dir) {
			r.denied.undeny(p)
		}
	}
}

// inodeID names a file or directory; the zero value is unknown.
type inodeID struct{ dev, ino uint64 }

// inodeOf returns the inode of whatever is at p, or the zero value.
func inodeOf(p string) inodeID {
	fi, err := fsstat.Lstat(p)
	if err != nil {
		return inodeID{}
	}
	return inodeID{fi.Dev, fi.Ino}
}
