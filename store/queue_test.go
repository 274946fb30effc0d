package store

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// An open store whose writer rests holds no room for changes: its queue
// and its last group are let go of. The daemon's writer queue of 4×4,096
// changes held 6.4 MB idle, and its last group 1.6 MB more.
func TestRestingWriterHoldsNoQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	before := heapInUse()
	s := openTestAt(t, path, Options{MaxBatch: 4096, NoSync: true, restAfter: 50 * time.Millisecond})
	ctx := context.Background()
	const n = 10000
	cs := make([]Change, n)
	for i := range cs {
		cs[i] = Change{Op: OpPut, Path: p("/r/d%02d/file-%05d", i%50, i), Record: rec(strconv.Itoa(i), int64(i+1), 1, uint64(i+10))}
	}
	if err := s.SubmitAll(ctx, cs); err != nil { // fills the queue: SubmitAll queues all at once
		t.Fatal(err)
	}
	cs = nil
	deadline := time.Now().Add(10 * time.Second)
	var held int64
	for {
		held = heapInUse() - before
		if held < 512<<10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held >= 512<<10 {
		t.Errorf("an idle store with its writer resting holds %d KiB of heap; want under 512 KiB (no room kept for changes)", held>>10)
	}
	if c := s.q.chunks(); c != 0 {
		t.Errorf("the resting writer's queue holds %d chunks; want 0", c)
	}
	mustPut(t, s, "/r/after", rec("after", 5, 1, 1)) // the queue works again
}

// waiting reports whether a push waits for room.
func (q *queue) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.room != nil
}

// Changes leave the queue in the order they were put, across chunks, and
// a full queue makes push wait until the writer has taken half of it.
func TestQueueOrderAndBackPressure(t *testing.T) {
	q := newQueue(3 * queueChunk)
	closing := make(chan struct{})
	for i := range 3 * queueChunk {
		if !q.push(item{n: i}, closing) {
			t.Fatal("push refused below max")
		}
	}
	var wg sync.WaitGroup
	pushed := make(chan int, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.push(item{n: -1}, closing) // waits: the queue is full
		pushed <- q.len()
	}()
	// Pops only once the push waits: a push that came late, on a loaded
	// machine, would find room without waiting and show nothing.
	for deadline := time.Now().Add(10 * time.Second); !q.waiting(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the push into the full queue did not wait")
		}
	}
	for i := range 3 * queueChunk {
		it, ok := q.pop()
		if !ok || it.n != i {
			t.Fatalf("pop %d: %d, %v", i, it.n, ok)
		}
		if left := 3*queueChunk - i - 1; left == 3*queueChunk/2+1 {
			// Still more than half full: the push must go on waiting,
			// however long it is given.
			time.Sleep(20 * time.Millisecond)
			if l := q.len(); l != left {
				t.Errorf("the waiting push got in with %d queued; want at most half of %d", l-1, 3*queueChunk)
			}
		}
	}
	wg.Wait()
	if l := <-pushed; l > 3*queueChunk/2+1 {
		t.Errorf("the waiting push got in with %d queued; want at most half of %d", l, 3*queueChunk)
	}
	if it, ok := q.pop(); !ok || it.n != -1 {
		t.Fatalf("last pop: %d, %v", it.n, ok)
	}
	if _, ok := q.pop(); ok {
		t.Fatal("pop from an empty queue")
	}
	close(closing)
	for range 3 * queueChunk {
		q.push(item{}, closing)
	}
	if q.push(item{}, closing) {
		t.Error("a push into a full queue of a closing store was queued")
	}
	q.release()
	if q.chunks() != 3 {
		t.Errorf("release of a full queue let go of what waits: %d chunks", q.chunks())
	}
}
