package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/walker"
)

// TestNoFileMissedUnderChurn plays the consumer the indexer is: it walks
// every Rescan'd directory and records every Changed file, while trees are
// created with mkdir -p and filled at once, and other trees are moved in
// from outside the root. Every file must end up found.
func TestNoFileMissedUnderChurn(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	w, err := New([]string{root}, Options{Quiet: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	var mu sync.Mutex
	found := map[string]bool{}
	go func() {
		for ev := range w.Events() {
			switch ev.Kind {
			case Changed:
				mu.Lock()
				found[ev.Path] = true
				mu.Unlock()
			case Rescan:
				walker.Walk(ctx, ev.Path, walker.Options{}, func(e walker.Entry) error {
					mu.Lock()
					found[e.Path] = true
					mu.Unlock()
					return nil
				})
			}
		}
	}()
	// Wait for the initial rescan to be consumed: the root is watched.
	time.Sleep(100 * time.Millisecond)

	var want []string
	mk := func(base string, i int) []string {
		var files []string
		deep := filepath.Join(base, "a", "b", "c")
		if err := os.MkdirAll(deep, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{base, filepath.Join(base, "a"), filepath.Join(base, "a", "b"), deep} {
			for j := range 5 {
				p := filepath.Join(d, fmt.Sprintf("f%d-%d", i, j))
				write(t, p, p)
				files = append(files, p)
			}
		}
		return files
	}
	for i := range 40 {
		if i%4 == 3 {
			// Built outside, then moved in whole.
			src := filepath.Join(outside, fmt.Sprint(i))
			files := mk(src, i)
			dst := filepath.Join(root, fmt.Sprintf("moved%d", i))
			if err := os.Rename(src, dst); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				rel, _ := filepath.Rel(src, f)
				want = append(want, filepath.Join(dst, rel))
			}
			continue
		}
		want = append(want, mk(filepath.Join(root, fmt.Sprintf("t%d", i)), i)...)
	}

	deadline := time.Now().Add(waitLong)
	for {
		mu.Lock()
		var missing []string
		for _, f := range want {
			if !found[f] {
				missing = append(missing, f)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d files never found, e.g. %v", len(missing), len(want), missing[:min(5, len(missing))])
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And every directory is watched: 1 root + 40 trees × 4 levels.
	for w.Status().Roots[0].Watches != 1+40*4 {
		if time.Now().After(deadline) {
			t.Fatalf("watches = %d, want %d", w.Status().Roots[0].Watches, 1+40*4)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
