package main

import (
	"testing"
)

// The repair command printed for a damaged index repeats the run's flags
// and roots, quoted for a shell.
func TestRepairCommand(t *testing.T) {
	root := newRootCmd()
	args := []string{"--index", "/srv/my index.db", "--ignore", "*.tmp", "--ignore", "it's", "--no-default-ignores", "/srv/data"}
	if err := root.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	got := repairCommand(root, root.Flags().Args())
	want := `annexd repair --ignore='*.tmp' --ignore='it'\''s' --index='/srv/my index.db' --no-default-ignores /srv/data`
	if got != want {
		t.Errorf("repairCommand:\n got %s\nwant %s", got, want)
	}
}
