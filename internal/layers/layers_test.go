// Package layers holds the test that keeps imports pointing down the data
// flow: watcher and store below the indexer, the indexer below the API,
// everything below the daemon's wiring and the commands.
package layers

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/annexd/annexd/"

// rank places every package: a package may import only packages of a
// lower rank. A new package must be placed here.
var rank = map[string]int{
	// Below the leaves: the names of content, then the index's byte
	// layout that store and the hub share, and the index file's helpers
	// that store and its migrations share.
	"key": -2, "store/codec": -1, "store/internal/indexfile": -1,
	// Leaves: the standard library and third-party modules only.
	"fsstat": 0, "hasher/mbsha256": 0,
	"internal/roots": 0, "internal/ledger": 0, "internal/ignore": 0,
	"internal/cliexit": 0, "internal/logrepeat": 0, "internal/testutil": 0, "internal/sdnotify": 0, "internal/diskprocs": 0, "internal/gcpace": 0, "internal/loopfs": 0,
	"internal/xdg": 0, "internal/directio": 0, "internal/durable": 0, "internal/version": 0,
	"store/internal/pagecheck": 0, "store/internal/migrate": 0,
	// The parts that see files and keep the index, and wire types.
	"store": 1, "hasher": 1, "walker": 1, "watcher": 1, "internal/config": 1,
	"internal/hubwire": 1, "internal/annexlink": 1, "internal/trash": 1,
	// What keeps the index true or acts on it, and the API's client.
	"internal/indexer": 2, "internal/audit": 2, "internal/dedup": 2, "api": 2, "hasher/simd": 2, "hasher/calibrate": 2, "internal/dirdups": 2,
	"internal/hub": 2, "internal/publish": 2, "internal/hubcopy": 2,
	"api/apiserver": 3,
	// The parts the API serves, over what they answer from.
	"internal/query": 3, "internal/hublink": 3, "internal/deduppart": 3, "internal/heal": 3, "internal/have": 3, "internal/changefeed": 3,
	// The wiring, and the programs.
	"internal/daemon": 4,
	"cmd/annexd":      5, "cmd/annexctl": 5,
	"bench/auditbench": 5, "bench/bareloop": 5, "bench/directread": 5, "bench/dedup": 5, "bench/gentree": 5, "scripts/testtime": 5,
}

// TestImportsPointDown fails when a package imports one of its own rank or
// above (store importing api, watcher or the indexer, say), when key
// imports anything but the standard library, or when a package has no
// rank yet.
func TestImportsPointDown(t *testing.T) {
	for pkg, imports := range packages(t) {
		r, ok := rank[pkg]
		if !ok {
			t.Errorf("package %s has no place in the layers; add it to rank in %s", pkg, "internal/layers/layers_test.go")
			continue
		}
		for _, imp := range imports {
			if pkg == "key" && strings.Contains(strings.Split(imp, "/")[0], ".") {
				t.Errorf("key imports %s: it may import only the standard library", imp)
			}
			dep, own := strings.CutPrefix(imp, module)
			if !own {
				continue
			}
			if d, ok := rank[dep]; ok && d >= r {
				t.Errorf("%s (rank %d) imports %s (rank %d): imports must point down", pkg, r, dep, d)
			}
		}
	}
}

// packages lists the module's packages with the imports of their non-test
// files, as the go tool builds them here.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	out := map[string][]string{}
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); dir != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		p, err := build.Default.ImportDir(dir, 0)
		if err != nil || len(p.GoFiles) == 0 {
			return nil // nothing built here but tests, or nothing at all
		}
		rel, _ := filepath.Rel(root, dir)
		out[filepath.ToSlash(rel)] = p.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d packages under %s", len(out), root)
	}
	return out
}
