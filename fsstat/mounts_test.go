package fsstat

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMountinfo(t *testing.T) {
	text := "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"44 26 7:0 / /tmp/with\\040space rw,relatime - ext4 /dev/loop0 rw\n" +
		"50 26 0:52 /export /net rw shared:7 master:3 - nfs4 server:/export rw\n" +
		"bad line\n" +
		"51 26 0:53 / /nosource rw - tmpfs\n"
	got := parseMountinfo([]byte(text))
	want := []Mount{
		{ID: 36, Parent: 35, Dev: unix.Mkdev(98, 0), Root: "/mnt1", Point: "/mnt/parent", Type: "ext3", Source: "/dev/root"},
		{ID: 44, Parent: 26, Dev: unix.Mkdev(7, 0), Root: "/", Point: "/tmp/with space", Type: "ext4", Source: "/dev/loop0"},
		{ID: 50, Parent: 26, Dev: unix.Mkdev(0, 52), Root: "/export", Point: "/net", Type: "nfs4", Source: "server:/export"},
		{ID: 51, Parent: 26, Dev: unix.Mkdev(0, 53), Root: "/", Point: "/nosource", Type: "tmpfs"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mounts %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestKeyRules(t *testing.T) {
	nfs := Mount{ID: 50, Dev: unix.Mkdev(0, 52), Root: "/", Type: "nfs4", Source: "server:/export"}
	if k := keyOf(-1, nfs.Dev, nfs, true); k != "net:nfs4:server:/export:/" {
		t.Errorf("nfs key %q", k)
	}
	tmp := Mount{ID: 51, Dev: unix.Mkdev(0, 53), Root: "/", Type: "tmpfs", Source: "tmpfs"}
	if k := keyOf(-1, tmp.Dev, tmp, true); k[:6] != "mount:" {
		t.Errorf("tmpfs key %q: want a mount: key", k)
	}
	if id := idFromKey("uuid:00", false); !Stable(id) || Volatile(id) || Legacy(id) {
		t.Errorf("id %x of a uuid key", id)
	}
	if id := idFromKey("mount:x", true); Stable(id) || !Volatile(id) || Legacy(id) {
		t.Errorf("id %x of a mount key", id)
	}
}
