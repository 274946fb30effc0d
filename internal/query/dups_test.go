package query

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// firstNames gives every name after the first of an inode that first
// name, in groups small enough for its list and in larger ones, where a
// map takes over.
func TestFirstNames(t *testing.T) {
	for _, inodes := range []int{1, 2, maxFirstList, maxFirstList + 1, 3 * maxFirstList} {
		var f firstNames
		for round := range 3 {
			for i := range inodes {
				path := []byte(fmt.Sprintf("/d/%d-%d", i, round))
				got := f.linkOf(1, uint64(i), path)
				switch {
				case round == 0 && got != nil:
					t.Fatalf("%d inodes: first name of inode %d linked to %q", inodes, i, got)
				case round > 0 && string(got) != fmt.Sprintf("/d/%d-0", i):
					t.Fatalf("%d inodes: inode %d round %d linked to %q", inodes, i, round, got)
				}
			}
		}
		if f.linkOf(2, 0, []byte("/other-dev")) != nil {
			t.Fatalf("%d inodes: another device's inode 0 taken for a link", inodes)
		}
		if got := f.inodes(); got != inodes+1 {
			t.Fatalf("inodes() = %d, want %d", got, inodes+1)
		}
	}
}

// keyCache gives every member the key location makes for it, whatever
// the names before it.
func TestKeyCache(t *testing.T) {
	names := []string{"a.JPG", "b.jpg", "c.jpg", ".hidden", "..x.tar.gz", "y.tar.gz", "z.gz", "noext", "other",
		"d.", "e..gz", "f.verylongextensionthatgitannexleavesout", "g.\xff\xfe", "h.tar.gz.", "/top.jpg"}
	d := sha256.Sum256([]byte("x"))
	for _, b := range []key.Backend{key.SHA256E, key.SHA256} {
		var c keyCache
		for i := range 3 * len(names) {
			n := names[(i*7)%len(names)]
			p := []byte("/dir/sub/" + n)
			if n[0] == '/' {
				p = []byte(n)
			}
			r := store.Record{Backend: b, Digest: d[:], Size: int64(10 + i/len(names)), State: store.StateOK}
			got, err := c.location(p, &r)
			if err != nil {
				t.Fatal(err)
			}
			want, err := location(p, &r)
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != want.Key || got.Size != want.Size || got.State != want.State || string(got.Path) != string(want.Path) {
				t.Fatalf("%s %q: %+v, want %+v", b, p, got, want)
			}
		}
	}
}
