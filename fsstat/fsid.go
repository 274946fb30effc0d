package fsstat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// # File-system identity
//
// A device number is not an identity. A USB disk, a loop device, an LVM
// volume or a network mount can come back under another number after a
// reboot, and another file system can take the old number. So
// FileInfo.Dev is the id of the file system, made from a key that the file
// system keeps itself. The rule, in order:
//
//  1. the UUID in its superblock (ioctl FS_IOC_GETFSUUID: ext4, XFS and
//     others; BTRFS_IOC_FS_INFO for btrfs), as blkid and /dev/disk/by-uuid
//     give it;
//  2. else, for btrfs, ext2/3/4, bcachefs and ZFS, the f_fsid of statfs(2),
//     which these derive from their UUID (btrfs from the subvolume too);
//  3. else, for a network file system, its type and source, such as
//     "nfs4 server:/export";
//  4. else nothing that stays is known (tmpfs and ramfs keep nothing;
//     overlay): the key names this mount in this boot, and the file system
//     is a new one after every mount.
//
// The subvolume (statx STATX_SUBVOL, btrfs and bcachefs) is added to a key
// of rules 1 and 2: each subvolume numbers its inodes from the same start.
// A clone of a disk image keeps its UUID and counts as the same file
// system, as it does for blkid, as long as it is not mounted beside the
// disk it was copied from (twins.go).
//
// The id is 62 bits of the key's SHA-256 with bit 62 set; a rule-4 id has
// bit 63 set as well (Volatile). A device number never has bit 62 set, so
// an id is told apart from a device number that an older index stored
// (Legacy).

const (
	stableBit   = 1 << 62
	volatileBit = 1 << 63
	hashBits    = stableBit - 1
)

// Stable reports whether id names a file system by what it keeps itself
// (rules 1-3), so that it is the same file system after a reboot or a
// remount.
func Stable(id uint64) bool { return id&(stableBit|volatileBit) == stableBit }

// Volatile reports whether id names one mount of a file system that keeps
// no identity (rule 4).
func Volatile(id uint64) bool { return id&(stableBit|volatileBit) == stableBit|volatileBit }

// Legacy reports whether dev is a device number, as indexes before file
// system ids stored, rather than an id.
func Legacy(dev uint64) bool { return dev&stableBit == 0 }

// Disk is the part of a key that names the whole file system: the key
// without its subvolume. Two subvolumes of one btrfs have the same Disk.
func Disk(key string) string {
	d, _, _ := strings.Cut(key, "/subvol:")
	return d
}

// OnFS reports whether dev, as a record stored it, names the file system
// of fi: its id, or, in a record older than file-system ids, the device
// number fi has now.
func OnFS(dev uint64, fi FileInfo) bool {
	return dev == fi.Dev || Legacy(dev) && dev == fi.RawDev
}

// Away reports whether the file system dev (a record's) is not the one of
// the nearest folder above path that exists: a file at path that is gone
// is not deleted, its file system is not mounted there (a disk unplugged,
// unmounted).
func Away(path string, dev uint64) bool {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := Lstat(dir); err == nil {
			return !OnFS(dev, fi)
		}
		if dir == "/" || dir == "." {
			return false
		}
	}
}

// FS describes a file system as the identity rule found it.
type FS struct {
	ID     uint64    // as FileInfo.Dev
	Key    string    // what the id was made from, e.g. "uuid:8bfc0409..."
	Type   string    // from the mount table, "" when not found there
	Source string    // from the mount table, e.g. "/dev/sdb1"
	Point  string    // a mount point of it, "" when not found
	Twin   string    // for a twin (twins.go), where the file system that keeps the key is or was; else ""
	Mount  MountMark // the mount it was met on (kept.go); zero when unknown
}

// idFromKey makes an id from a key; volatile says it is one of rule 4.
func idFromKey(key string, volatile bool) uint64 {
	sum := sha256.Sum256([]byte(key))
	id := binary.BigEndian.Uint64(sum[:8])&hashBits | stableBit
	if volatile {
		id |= volatileBit
	}
	return id
}

// devices caches the id of the file system on each st_dev, for the mount
// table of one moment: WatchMounts forgets them when it changes.
var devices struct {
	mu   sync.Mutex
	gen  atomic.Uint64
	byID sync.Map // id → FS, every file system resolved so far
	m    atomic.Pointer[map[uint64]uint64]
}

func forgetDevices() {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	devices.gen.Add(1)
	devices.m.Store(nil)
}

func cachedID(dev uint64) (uint64, bool) {
	if forgetAlways.Load() {
		return 0, false
	}
	if m := devices.m.Load(); m != nil {
		id, ok := (*m)[dev]
		return id, ok
	}
	return 0, false
}

// forgetter follows the mount table for the whole process, from the first
// id resolved on, and forgets the cached ids when it changes: a device
// number may belong to another file system after an unmount. A change is
// forgotten a moment after the mount(2) or umount(2) returns; a stat in
// between may get the old file system's id. That costs a hash at worst,
// never a wrong key: a record matches a file only with its inode, size,
// mtime and ctime too.
var forgetter sync.Once

func startForgetter() {
	go func() {
		if err := WatchMounts(context.Background(), func() {}); err != nil {
			forgetAlways.Store(true) // no way to tell: resolve every time
		}
	}()
}

// forgetAlways makes every id be resolved afresh, when the mount table
// cannot be followed.
var forgetAlways atomic.Bool

// remember caches dev's id, unless the mount table changed since gen.
func remember(dev uint64, fs FS, gen uint64) {
	devices.byID.Store(fs.ID, fs)
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if devices.gen.Load() != gen {
		return
	}
	m := map[uint64]uint64{dev: fs.ID}
	if old := devices.m.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	devices.m.Store(&m)
}

// opener opens a descriptor on the file system of a stat result, for the
// identity rule; closeIt says the caller must close it. It returns fd -1
// when it has none to offer.
type opener func() (fd int, closeIt bool)

// idOf returns the id of the file system on st_dev dev.
func idOf(dev uint64, open opener) uint64 {
	if id, ok := cachedID(dev); ok {
		return id
	}
	forgetter.Do(startForgetter)
	gen := devices.gen.Load()
	fs, sure := resolve(dev, open)
	if sure {
		remember(dev, fs, gen)
	}
	return fs.ID
}

// resolve applies the identity rule to the file system on dev, through a
// descriptor from open or else through one of its mount points. sure says
// it had a descriptor on the file system: without one, it cannot tell a
// file system that keeps no identity from one it could not look at (a
// btrfs subvolume that no mount names), and the answer is not cached.
func resolve(dev uint64, open opener) (fs FS, sure bool) {
	mounts, _ := Mounts()
	fd, closeIt := -1, false
	if open != nil {
		fd, closeIt = open()
	}
	if fd >= 0 && !onDev(fd, dev) {
		if closeIt {
			unix.Close(fd)
		}
		fd, closeIt = -1, false
	}
	var m Mount
	inTable := false
	for _, mm := range mounts {
		if mm.Dev != dev {
			continue
		}
		if !inTable {
			m, inTable = mm, true
		}
		if fd < 0 {
			if fd, closeIt = openDir(mm.Point, dev); fd >= 0 {
				m = mm
			}
		}
	}
	if closeIt {
		defer unix.Close(fd)
	}
	fs = FS{Type: m.Type, Source: m.Source, Point: m.Point}
	if fd >= 0 {
		fs.Mount = markOf(fd, mounts)
	}
	fs.Key, fs.Twin = twinOf(keyOf(fd, dev, m, inTable), dev, mounts)
	fs.ID = idFromKey(fs.Key, strings.HasPrefix(fs.Key, "mount:"))
	return fs, fd >= 0
}

func onDev(fd int, dev uint64) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && uint64(st.Dev) == dev
}

// openDir opens the directory at path for the identity rule, if it is on
// dev; -1 when it is not.
func openDir(path string, dev uint64) (int, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	if !onDev(fd, dev) {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// Magic numbers of the file systems whose f_fsid comes from their UUID.
const (
	btrfsMagic    = 0x9123683e
	ext4Magic     = 0xef53
	bcachefsMagic = 0xca451a4e
	zfsMagic      = 0x2fc12fc1
)

// keyOf is the identity rule: see the comment at the top of this file.
func keyOf(fd int, dev uint64, m Mount, inTable bool) string {
	var sf unix.Statfs_t
	if fd >= 0 && unix.Fstatfs(fd, &sf) == nil && !inMemory(sf.Type) {
		sub := subvolOf(fd)
		if u, ok := uuidOf(fd, sf.Type); ok {
			return "uuid:" + hex.EncodeToString(u) + sub
		}
		if fsidFromUUID(sf.Type) && sf.Fsid.Val != [2]int32{} {
			return fmt.Sprintf("fsid:%x:%08x%08x%s", uint32(sf.Type), uint32(sf.Fsid.Val[0]), uint32(sf.Fsid.Val[1]), sub)
		}
	}
	if inTable && network(m.Type) && m.Source != "" {
		return "net:" + m.Type + ":" + m.Source + ":" + m.Root
	}
	return fmt.Sprintf("mount:%s:%d:%d:%d", cmp.Or(BootID(), "unknown"), mountUnique(fd), m.ID, dev)
}

// inMemory reports a file system that keeps nothing when unmounted: its
// UUID, if any, is made afresh at each mount.
func inMemory(magic int64) bool {
	return uint32(magic) == unix.TMPFS_MAGIC || uint32(magic) == unix.RAMFS_MAGIC
}

func fsidFromUUID(magic int64) bool {
	switch uint32(magic) {
	case btrfsMagic, ext4Magic, bcachefsMagic, zfsMagic:
		return true
	}
	return false
}

// fsGetUUID is FS_IOC_GETFSUUID, _IOR(0x15, 0, struct fsuuid2).
const fsGetUUID = 0x80111500

// btrfsFSInfo is BTRFS_IOC_FS_INFO, _IOR(0x94, 31, struct
// btrfs_ioctl_fs_info_args), which needs no privilege.
const btrfsFSInfo = 0x8400941f

// uuidOf asks the kernel for the UUID of fd's file system, of type magic;
// an all-zero UUID counts as none. btrfs answers only its own ioctl.
func uuidOf(fd int, magic int64) ([]byte, bool) {
	var b []byte
	if uint32(magic) == btrfsMagic {
		var info struct {
			MaxID, NumDevices uint64
			FSID              [16]byte
			_                 [1024 - 32]byte
		}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsFSInfo, uintptr(unsafe.Pointer(&info))); e != 0 {
			return nil, false
		}
		b = info.FSID[:]
	} else {
		var u struct {
			Len  uint8
			UUID [16]byte
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsGetUUID, uintptr(unsafe.Pointer(&u)))
		if e != 0 || u.Len == 0 || int(u.Len) > len(u.UUID) {
			return nil, false
		}
		b = u.UUID[:u.Len]
	}
	for _, c := range b {
		if c != 0 {
			return append([]byte(nil), b...), true
		}
	}
	return nil, false
}

// subvolOf is "/subvol:N" for a file in subvolume N, or "".
func subvolOf(fd int) string {
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_SUBVOL, &sx) != nil || sx.Mask&unix.STATX_SUBVOL == 0 || sx.Subvol == 0 {
		return ""
	}
	return fmt.Sprintf("/subvol:%d", sx.Subvol)
}

// mountUnique is the mount's id that is never reused (Linux 6.8), or 0.
func mountUnique(fd int) uint64 {
	if fd < 0 {
		return 0
	}
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID_UNIQUE, &sx) != nil || sx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0
	}
	return sx.Mnt_id
}

// network reports whether a file system type is a network or remote one,
// whose source names it for good.
func network(typ string) bool {
	if strings.HasPrefix(typ, "nfs") || strings.HasPrefix(typ, "fuse.") && remoteFUSE[strings.TrimPrefix(typ, "fuse.")] {
		return true
	}
	switch typ {
	case "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "afs", "lustre", "virtiofs", "davfs":
		return true
	}
	return false
}

var remoteFUSE = map[string]bool{"sshfs": true, "rclone": true, "s3fs": true, "glusterfs": true, "davfs": true, "smbnetfs": true}

// BootID is the kernel's id of this boot, "" when it cannot be read.
var BootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// Describe returns what the identity rule found for id in this process,
// if it met that file system.
func Describe(id uint64) (FS, bool) {
	v, ok := devices.byID.Load(id)
	if !ok {
		return FS{}, false
	}
	return v.(FS), true
}

// FileSystem applies the identity rule to the file system holding path
// (not following a final symlink), afresh.
func FileSystem(path string) (FS, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return FS{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	fs, _ := resolve(uint64(st.Dev), pathOpener(path, &st))
	if fs.Point == "" {
		// btrfs shows another device number in the mount table than
		// its files have: name the mount by the path instead.
		if m, ok := mountAt(path); ok {
			fs.Type, fs.Source, fs.Point = m.Type, m.Source, m.Point
		}
	}
	devices.byID.Store(fs.ID, fs)
	return fs, nil
}

// mountAt returns the mount that holds path: the last one in the table
// whose mount point is path or above it.
func mountAt(path string) (Mount, bool) {
	mounts, err := Mounts()
	if err != nil {
		return Mount{}, false
	}
	var best Mount
	found := false
	for _, m := range mounts {
		if within(path, m.Point) && (!found || len(m.Point) >= len(best.Point)) {
			best, found = m, true
		}
	}
	return best, found
}

func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// pathOpener opens path if it is a directory, or else its directory.
func pathOpener(path string, st *unix.Stat_t) opener {
	return func() (int, bool) {
		dir := path
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			dir = filepath.Dir(path)
		}
		return openDir(dir, uint64(st.Dev))
	}
}

// fdOpener offers fd itself when it was not opened with O_PATH (an ioctl
// needs a real descriptor), or else the directory it is, reopened.
func fdOpener(fd int, st *unix.Stat_t) opener {
	return func() (int, bool) { return usable(fd, st.Mode&unix.S_IFMT == unix.S_IFDIR) }
}

// atOpener opens name under dirfd if it is a directory, or else offers
// dirfd itself: a file is on its directory's file system.
func atOpener(dirfd int, name string, st *unix.Stat_t) opener {
	return func() (int, bool) {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return usable(dirfd, true)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, false
		}
		return fd, true
	}
}

// usable returns fd when it is not an O_PATH descriptor, or a directory
// fd is, reopened for reading.
func usable(fd int, dir bool) (int, bool) {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil && fl&unix.O_PATH == 0 {
		return fd, false
	}
	if !dir {
		return -1, false
	}
	nfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	return nfd, true
}
