package daemon

import (
	"fmt"
	"testing"
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
