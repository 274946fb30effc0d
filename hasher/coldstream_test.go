package hasher

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/key"
)

// coldStreams counts the files read as cold streams for the test.
func coldStreamsRead(t *testing.T) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	testHookCold = func(string) { n.Add(1) }
	t.Cleanup(func() { testHookCold = nil })
	return &n
}

// Large files for the lanes none of whose pages is cached are read with
// O_DIRECT ahead of the engine, in chunks, coldStreams at most at once:
// sizes around the chunk and its multiples hash right, the page cache
// holds none of them after, and every slot is free again. A cached one
// is read the usual way, and so are the files beyond the slots.
func TestColdLargeFilesReadDirect(t *testing.T) {
	paths, sums := coldFiles(t, coldChunk+1, 2*coldChunk, 2*coldChunk+123, 5*coldChunk-4095, 3<<20+7, 9<<20)
	streams := coldStreamsRead(t)
	h, _ := laneHasher(t)
	hashAll(t, h, paths[:coldStreams], sums[:coldStreams])
	hashAll(t, h, paths[coldStreams:], sums[coldStreams:])
	if streams.Load() != int64(len(paths)) {
		t.Errorf("%d of %d cold files read as cold streams", streams.Load(), len(paths))
	}
	noneCached(t, paths)
	waitColdSlots(t)
	more, moreSums := coldFiles(t, 2*coldChunk, 2*coldChunk, 2*coldChunk, 2*coldChunk, 2*coldChunk, 2*coldChunk)
	streams.Store(0)
	hashAll(t, h, more, moreSums) // more at once than there are slots
	if n := streams.Load(); n < 1 || n > int64(len(more)) {
		t.Errorf("%d of %d files hashed at once read as cold streams", n, len(more))
	}
	hashCachedUncounted(t, h, paths[1], sums[1], streams)
}

// A cold file cut short between two of its chunks is a changed file,
// never a digest; one whose caller gives up mid-stream ends with the
// caller's error. Neither keeps a slot.
func TestColdStreamChangedOrCancelled(t *testing.T) {
	paths, _ := coldFiles(t, 4*coldChunk, 4*coldChunk)
	h, _ := laneHasher(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reads atomic.Int64
	testHookRead = func(path string) {
		if reads.Add(1) != 2 {
			return
		}
		switch path {
		case paths[0]:
			if err := os.Truncate(path, 3*coldChunk); err != nil {
				t.Error(err)
			}
		case paths[1]:
			cancel()
		}
	}
	t.Cleanup(func() { testHookRead = nil })
	_, err := h.Hash(context.Background(), paths[0], key.SHA256E)
	var changed *ChangedError
	if !errors.As(err, &changed) {
		t.Errorf("a file cut short while read: %v; want a ChangedError", err)
	}
	reads.Store(0)
	if _, err := h.Hash(ctx, paths[1], key.SHA256E); !errors.Is(err, context.Canceled) {
		t.Errorf("a stream whose caller gave up: %v; want context.Canceled", err)
	}
	waitColdSlots(t) // the engine ends the stream after its caller left
}

// waitColdSlots waits until every cold stream has ended and let go of its
// slot: taking all the slots orders the test after their releases.
func waitColdSlots(t *testing.T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range coldStreams {
		select {
		case coldSlots <- struct{}{}:
		case <-deadline:
			t.Fatal("cold streams still hold their slots after 10 s")
		}
	}
	for range coldStreams {
		<-coldSlots
	}
}
