package watcher

import (
	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
)

// Magic numbers (statfs(2)) of the file systems whose directory link
// count is two plus the number of subdirectories, so a count of two
// means none. Others (btrfs, overlayfs, FUSE, network) may report 1 or
// anything, and their directories are always read.
const (
	ext4Magic  = 0xef53
	xfsMagic   = 0x58465342
	tmpfsMagic = 0x01021994
)

// countsSubdirs reports whether a directory link count on a file system
// of type fsType tells how many subdirectories it has.
func countsSubdirs(fsType int64) bool {
	switch uint32(fsType) {
	case ext4Magic, xfsMagic, tmpfsMagic:
		return true
	}
	return false
}

// leaf reports whether d, just watched, has no subdirectory, so it need
// not be read for them (find's leaf optimisation). The lstat comes after
// the watch: a subdirectory made later is an event. id is d's inode from
// before the watch, or zero.
func (r *root) leaf(d string, id inodeID) bool {
	fi, err := fsstat.Lstat(d)
	if err != nil || !fi.IsDir() || fi.Nlink != 2 {
		return false
	}
	if id != (inodeID{}) && id != (inodeID{fi.Dev, fi.Ino}) {
		return false // replaced since: read it
	}
	return r.countsSubdirsOn(fi.Dev, d)
}

// countsSubdirsOn reports, once per device, whether the file system of d
// (on dev) counts subdirectories in link counts.
func (r *root) countsSubdirsOn(dev uint64, d string) bool {
	if ok, known := r.nlinkFS[dev]; known {
		return ok
	}
	var fs unix.Statfs_t
	if unix.Statfs(d, &fs) != nil {
		return false // asked again next time
	}
	ok := countsSubdirs(fs.Type)
	r.nlinkFS[dev] = ok
	return ok
}
