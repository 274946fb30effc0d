package watcher

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A directory is a leaf only when its link count says it has no
// subdirectory and its file system keeps that count; a directory
// replaced since its inode was read is read again.
func TestLeafByLinkCount(t *testing.T) {
	top := t.TempDir()
	for _, d := range []string{"parent/child", "empty"} {
		if err := os.MkdirAll(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(top, "empty", "file"), "x")
	var fs unix.Statfs_t
	if err := unix.Statfs(top, &fs); err != nil {
		t.Fatal(err)
	}
	counts := countsSubdirs(fs.Type)
	r := newRoot(top, &Options{Logger: slog.New(slog.DiscardHandler)}, nil, nil)
	cases := []struct {
		dir  string
		id   inodeID
		want bool
	}{
		{"parent", dirInodeOf(filepath.Join(top, "parent")), false},
		{"parent/child", dirInodeOf(filepath.Join(top, "parent/child")), counts},
		{"empty", inodeID{}, counts},
		{"empty", dirInodeOf(filepath.Join(top, "parent")), false}, // another inode
		{"missing", inodeID{}, false},
	}
	for _, c := range cases {
		if got := r.leaf(filepath.Join(top, c.dir), c.id); got != c.want {
			t.Errorf("leaf(%s, %v) = %v, want %v (file system 0x%x)", c.dir, c.id, got, c.want, fs.Type)
		}
	}
	for _, typ := range []int64{ext4Magic, xfsMagic, tmpfsMagic} {
		if !countsSubdirs(typ) {
			t.Errorf("countsSubdirs(0x%x) = false", typ)
		}
	}
	for _, typ := range []int64{0x9123683e /* btrfs */, 0x794c7630 /* overlayfs */, 0x65735546 /* fuse */, 0x6969 /* nfs */} {
		if countsSubdirs(typ) {
			t.Errorf("countsSubdirs(0x%x) = true", typ)
		}
	}
}

// Directories left unread as leaves are watched: every directory of a
// tree gets its watch, and a directory made later inside a leaf is watched
// too, since the leaf's watch came before its link count was read.
func TestLeavesWatched(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/x", "a/y", "b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, d, "f"), d)
	}
	r := startAt(t, root, Options{})
	if st := r.w.Status().Roots[0]; st.Watches != 5 {
		t.Errorf("watches = %d, want 5 (root, a, a/x, a/y, b)", st.Watches)
	}
	for _, d := range []string{"a/x", "b"} {
		p := r.path(d + "/f")
		write(t, p, "changed")
		r.wait("change in "+d, func(evs []Event) bool { return has(evs, Changed, p) })
	}
	deep := r.path("a/x/new")
	if err := os.Mkdir(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	r.wait("new dir in a leaf", func(evs []Event) bool { return has(evs, Rescan, deep) })
	r.reset()
	late := filepath.Join(deep, "late")
	write(t, late, "x")
	r.wait("file in the new dir", func(evs []Event) bool { return has(evs, Changed, late) })
}
