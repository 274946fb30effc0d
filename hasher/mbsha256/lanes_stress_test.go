package mbsha256

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"
	"time"
)

// One writer, two buffers, streams one after another and a third of them
// given up half-way (as an audit reader's files that change while read):
// no stream waits for ever. (A run of the package's audit tests under load
// once hung here, the engine asleep while the writer waited for a buffer;
// the engine now decides to sleep and Put to wake it by one test.)
func TestLanesOneWriterNeverStalls(t *testing.T) {
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			l := newLanes()
			defer l.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			bufs := [][]byte{make([]byte, 4096), make([]byte, 4096)}
			for i := range 1000 {
				size := 4096*(1+rng.IntN(4)) + rng.IntN(100)
				data := randomBytes(uint64(i), size)
				abort := rng.IntN(3) == 0
				done := make(chan struct{})
				var r Result
				var ok bool
				go func() { defer close(done); r, ok = writeStream(l, data, bufs, rng, abort) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					l.mu.Lock()
					t.Fatalf("stream %d hangs: waiting %d, slots %+v", i, len(l.waiting), l.slots)
				}
				if ok && r.Sum != sha256.Sum256(data) {
					t.Fatalf("stream %d: wrong sum", i)
				}
			}
		})
	}
}
