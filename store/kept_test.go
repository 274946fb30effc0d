package store

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
)

func TestMountsListRoundTrip(t *testing.T) {
	u := mountUses{run: 1_700_000_000_000_000_000, since: 1_600_000_000_000_000_000, list: []mountUse{
		{fs: 1<<62 | 5, mark: fsstat.MountMark{ID: 1 << 40, Point: "/mnt/a b"}, last: 1_700_000_000_000_000_001},
		{fs: 7, last: 3},
	}}
	got, err := decodeMounts(u.encode())
	if err != nil || !reflect.DeepEqual(got.list, u.list) || got.run != u.run || got.since != u.since {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", u, got, err)
	}
	b := u.encode()
	for _, bad := range [][]byte{nil, {9}, b[:len(b)-1], append(b, 0)} {
		if _, err := decodeMounts(bad); err == nil {
			t.Errorf("decodeMounts(%x) did not fail", bad)
		}
	}
}

// keptSince asks about the mounts of the records hashed within the last
// run's window only, and refuses a list that may miss some of them.
func TestKeptSince(t *testing.T) {
	const w = time.Minute
	last := time.Unix(1000, 0)
	prev := Run{LastCommit: last, Window: w}
	in, before := last.UnixNano()-int64(w), last.UnixNano()-int64(w)-1
	up := fsstat.MountMark{ID: 10, Point: "/a"}
	gone := fsstat.MountMark{ID: 11, Point: "/b"}
	kept := func(m fsstat.MountMark) bool { return m == up }
	cases := []struct {
		name string
		uses mountUses
		want bool
	}{
		{"nothing hashed in the window", mountUses{}, true},
		{"hashed on a mount still up", mountUses{list: []mountUse{{fs: 1, mark: up, last: in}}}, true},
		{"hashed on a mount gone", mountUses{list: []mountUse{{fs: 1, mark: up, last: in}, {fs: 2, mark: gone, last: last.UnixNano()}}}, false},
		{"a gone mount's records older than the window", mountUses{list: []mountUse{{fs: 1, mark: up, last: in}, {fs: 2, mark: gone, last: before}}}, true},
		{"hashed on a mount the kernel could not name", mountUses{list: []mountUse{{fs: 1, last: in}}}, false},
		{"the list begins inside the window", mountUses{since: in + 1, list: []mountUse{{fs: 1, mark: up, last: in + 1}}}, false},
	}
	for _, c := range cases {
		if got := keptSince(prev, c.uses, kept); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A writer killed in the same boot (only its process died) leaves nothing
// suspect when the file system its records were hashed on stayed mounted:
// the page cache kept every write, and the kernel writes it back. Its
// mount gone (unmounted and mounted again: a disk pulled out and put
// back), or its file system shut down without writing its log (an I/O
// error, a power cut of that disk alone), the records hashed within the
// window before the last commit are suspect, as after a power cut.
func TestKilledWriterOnKeptMounts(t *testing.T) {
	disk := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	path := filepath.Join(t.TempDir(), "index.db")
	opts := Options{DataWindow: time.Minute}
	file := disk.Path("f")
	kill := func(name string) Record {
		t.Helper()
		if err := os.WriteFile(file, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		fi, err := fsstat.Lstat(file)
		if err != nil {
			t.Fatal(err)
		}
		s := reopen(t, path, opts)
		stop := runWriter(t, s)
		r := rec(name, fi.Size, fi.Dev, fi.Ino)
		r.HashedAt = time.Now().UnixNano()
		if err := s.Put(context.Background(), []byte(file), r); err != nil {
			t.Fatal(err)
		}
		stop()
		if err := s.db.Close(); err != nil { // the process dies: no clean end
			t.Fatal(err)
		}
		return r
	}
	opened := func(what string, r Record, wantTrusted bool) {
		t.Helper()
		s := reopen(t, path, opts)
		defer s.Close()
		if prev, ok := s.PreviousRun(); !ok || prev.Clean {
			t.Fatalf("%s: previous run %+v (%v), want one that did not close the index", what, prev, ok)
		}
		if got := Trusted(&r, s.Suspect()); got != wantTrusted {
			t.Errorf("%s: record hashed at %d trusted %v, want %v (suspect %v)", what, r.HashedAt, got, wantTrusted, s.Suspect())
		}
	}

	r := kill("killed")
	opened("killed, its file system still mounted", r, true)

	r = kill("killed before the disk went")
	disk.Unmount(t)
	disk.Mount(t)
	opened("killed, then its file system unmounted and mounted again", r, false)

	r = kill("killed as the disk failed")
	disk.Shutdown(t)
	opened("killed, its file system shut down but still mounted", r, false)
}
