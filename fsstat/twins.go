package fsstat

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// # Twins
//
// A copy of a disk (dd, cp of an image, a backup clone) keeps its UUID.
// Alone, it is the same file system as the disk it was copied from, by the
// rule above. Both mounted at once, they are two: their inodes are
// numbered alike, and one id would make a file on one a hard link of the
// file with its inode number on the other, and a write on one a witness
// of a change on the other. So one of them keeps the key, and the other
// is a twin: its key is the key with "/twin:" and a hash of its mount
// point added, before the subvolume, so Disk tells it apart too. A mount
// is given its key when the process first meets it, and keeps it until it
// is unmounted. It is a twin when, at that moment:
//
//   - the index knows a twin of the key at its mount point (Remember):
//     a copy stays a twin at its place, also alone;
//   - or another mount the process met keeps the key and is still
//     mounted;
//   - or the index knows the key at another mount point (Remember), and
//     a file system with that key is mounted there now.
//
// So the index's records decide which of the two keeps the key, and a
// restart gives each the id it had. With no record of either, the one
// met first keeps it. The rule looks only at mount points the process met
// or the index knows, never at other file systems. It needs the unique
// mount id (Linux 6.8): without it, a copy mounted beside its disk shares
// its id, as before.

// twinMark joins a key and the hash of a twin's mount point.
const twinMark = "/twin:"

// twins is what the rule knows.
var twins struct {
	mu     sync.Mutex
	mounts map[uint64]met     // unique mount id → the mount as met
	claims map[[2]string]bool // {key, mount point} the index knows
}

// met is a mount the process met: its device and first mount point, its
// key before the rule and the key it was given; of is, for a twin, the
// mount point of the file system that keeps the key.
type met struct {
	dev          uint64
	point        string
	raw, key, of string
}

// Remember tells the rule that the index holds records of the file
// system with key, last mounted at point.
func Remember(key, point string) {
	if point == "" {
		return
	}
	twins.mu.Lock()
	defer twins.mu.Unlock()
	if twins.claims == nil {
		twins.claims = map[[2]string]bool{}
	}
	twins.claims[[2]string{key, point}] = true
}

// twinOf applies the rule to key, the key of the file system on dev. It
// returns the key to make the id from and, for a twin, the mount point of
// the file system that keeps the key. A key that names no lasting file
// system, or one the mount table does not list, is left as it is.
func twinOf(key string, dev uint64, mounts []Mount) (string, string) {
	i := slices.IndexFunc(mounts, func(m Mount) bool { return m.Dev == dev })
	if !strings.HasPrefix(key, "uuid:") && !strings.HasPrefix(key, "fsid:") || i < 0 {
		return key, ""
	}
	point := mounts[i].Point
	u := uniqueAt(point, dev)
	if u == 0 {
		return key, ""
	}
	twins.mu.Lock()
	defer twins.mu.Unlock()
	if m, ok := twins.mounts[u]; ok && m.raw == key {
		return m.key, m.of
	}
	m := met{dev: dev, point: point, raw: key, key: key}
	if of, twin := isTwin(key, u, point, dev, mounts); twin {
		m.key, m.of = twinKey(key, point), of
	}
	if twins.mounts == nil {
		twins.mounts = map[uint64]met{}
	}
	twins.mounts[u] = m
	return m.key, m.of
}

// isTwin decides for the mount u, of key at point, met now.
func isTwin(key string, u uint64, point string, dev uint64, mounts []Mount) (of string, twin bool) {
	if twins.claims[[2]string{twinKey(key, point), point}] {
		for c := range twins.claims {
			if c[0] == key {
				return c[1], true
			}
		}
		return "?", true
	}
	for v, m := range twins.mounts {
		if v == u || m.dev == dev || m.key != key {
			continue
		}
		if uniqueAt(m.point, m.dev) != v {
			delete(twins.mounts, v) // unmounted
			continue
		}
		return m.point, true
	}
	for c := range twins.claims {
		if c[0] != key || c[1] == point {
			continue
		}
		for _, mm := range mounts {
			if mm.Point == c[1] && mm.Dev != dev && !metTwin(mm) && keyAt(mm) == key {
				return mm.Point, true
			}
		}
	}
	return "", false
}

// twinKey is the key of the twin of key mounted at point.
func twinKey(key, point string) string {
	d := Disk(key)
	sum := sha256.Sum256([]byte(point))
	return d + twinMark + hex.EncodeToString(sum[:8]) + key[len(d):]
}

// uniqueAt returns the unique id of the mount at point, if dev is mounted
// there; 0 when it is not, or the kernel does not tell. It opens nothing
// (statx of the path): a descriptor held on a mount point, however
// briefly, makes an unmount of it fail as busy.
func uniqueAt(point string, dev uint64) uint64 {
	var sx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, point, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT,
		unix.STATX_TYPE|unix.STATX_MNT_ID_UNIQUE, &sx)
	if err != nil || sx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 || sx.Mode&unix.S_IFMT != unix.S_IFDIR ||
		unix.Mkdev(sx.Dev_major, sx.Dev_minor) != dev {
		return 0
	}
	return sx.Mnt_id
}

// keyAt returns the key, before the rule, of the file system mounted as
// m; "" when it cannot be opened.
func keyAt(m Mount) string {
	fd, ok := openDir(m.Point, m.Dev)
	if !ok {
		return ""
	}
	defer unix.Close(fd)
	return keyOf(fd, m.Dev, m, true)
}

// metTwin reports whether the process met m's file system at its mount
// point and found it a twin.
func metTwin(m Mount) bool {
	for _, t := range twins.mounts {
		if t.dev == m.Dev && t.point == m.Point && t.key != t.raw {
			return true
		}
	}
	return false
}
