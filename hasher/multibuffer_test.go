package hasher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/annexd/annexd/key"
)

// The multi-buffer engine behind the pool gives crypto/sha256's digests for
// many concurrent files of mixed sizes, and a file that changes in a batch
// fails alone.
func TestPoolWithMultiBufferEngine(t *testing.T) {
	base := []int{0, 1, 63, 64, 65, 300 << 10, 1 << 20, 1<<20 + 1, 2<<20 + 777, 3 << 20}
	sizes := make([]int, 30)
	for i := range sizes {
		sizes[i] = base[i%len(base)] + i
	}
	paths, sums := patternFiles(t, sizes...)
	h := New(Policy{InlineMax: -1, Workers: 2, Batch: MultiBuffer, BatchMinStreams: 1}, nil)
	defer h.Close()
	hashAll(t, h, paths, sums)

	// Truncate one file after the engine's first read of it.
	shrunk := paths[len(paths)-1]
	var once sync.Once
	testHookRead = func(p string) {
		if p == shrunk {
			once.Do(func() {
				if err := os.Truncate(shrunk, 100<<10); err != nil {
					t.Error(err)
				}
			})
		}
	}
	defer func() { testHookRead = nil }()
	var wg sync.WaitGroup
	errs := make([]error, len(paths))
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Hash(context.Background(), p, key.SHA256E)
			if err == nil && string(res.Digest) != string(sums[i][:]) {
				err = fmt.Errorf("%s: wrong digest", p)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if paths[i] == shrunk {
			if !errors.Is(err, ErrChanged) {
				t.Errorf("%s shrank while hashed: got %v, want ErrChanged", shrunk, err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", paths[i], err)
		}
	}
}
