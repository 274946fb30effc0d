package publish

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/internal/hubwire"
)

// An instance stays through restarts (loads of its file) at one path, and
// is new at another path, or from a file made elsewhere, cut short or
// unreadable.
func TestInstanceTiedToItsPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.db-host-publisher")
	load := func(p string) uint64 {
		t.Helper()
		in, err := LoadInstance(p)
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	id := load(path)
	if again := load(path); again != id {
		t.Fatalf("a restart changed the instance: %x, then %x", id, again)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "copy", "index.db-host-publisher")
	if err := os.MkdirAll(filepath.Dir(other), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if copied := load(other); copied == id {
		t.Errorf("a copy of the file at another path kept the instance %x", id)
	}
	for _, bad := range []string{"", "garbage", string(b[:len(b)/2]), "0123456789abcdef01234567 1234\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := load(path); got == id || got == 0x1234 {
			t.Errorf("file %q: instance %x; want a new one", bad, got)
		}
	}
}

func TestForeignHistory(t *testing.T) {
	const own, old, other = 0xa1, 0xb1, 0xc1
	cases := []struct {
		name string
		st   hubwire.State
		held heldMark
		want bool
	}{
		{"holder, as the index last saw", hubwire.State{Instance: own, Seq: 9}, heldMark{own, 7}, false},
		{"first publish of this index", hubwire.State{Instance: own, Seq: 9}, heldMark{}, false},
		{"took over from itself before a reboot, nothing since", hubwire.State{Instance: own, Previous: old, Seq: 7}, heldMark{old, 7}, false},
		{"took over from itself, the hub has more", hubwire.State{Instance: own, Previous: old, Seq: 9}, heldMark{old, 7}, true},
		{"took over from another machine", hubwire.State{Instance: own, Previous: other, Seq: 7}, heldMark{old, 7}, true},
		{"took over, the answer lost", hubwire.State{Instance: own, Seq: 7}, heldMark{old, 7}, true},
		{"another holds the name", hubwire.State{Instance: other, Seq: 7}, heldMark{old, 7}, false},
	}
	for _, c := range cases {
		if got := foreignHistory(c.st, c.held, own); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
