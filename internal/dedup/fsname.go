package dedup

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsNames maps statfs magic numbers to the names users know.
var fsNames = map[int64]string{
	0xef53:     "ext4", // also ext2 and ext3
	0x01021994: "tmpfs",
	0x58465342: "xfs",
	0x9123683e: "btrfs",
	0xca451a4e: "bcachefs",
	0x2fc12fc1: "zfs",
	0xf2f52010: "f2fs",
	0x794c7630: "overlayfs",
	0x6969:     "nfs",
	0xff534d42: "cifs",
	0x65735546: "fuse",
	0x4d44:     "vfat",
	0x2011bab0: "exfat",
	0x5346544e: "ntfs",
}

// fsName names the file system holding f.
func fsName(f *os.File) string {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return "the file system"
	}
	if n, ok := fsNames[st.Type]; ok {
		return n
	}
	return fmt.Sprintf("file system type %#x", st.Type)
}

func unsupportedError(f *os.File, dev uint64, path []byte, err error) *UnsupportedError {
	return &UnsupportedError{FS: fsName(f), Dev: dev, Path: path, Err: err}
}
