package mbsha256

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// testLanes returns Lanes for each assembly kernel the CPU runs and for
// the Go reference kernel with 16 and 3 lanes (with the thresholds of the
// widest kernel, so that lanes are parked).
func testLanes(t *testing.T) map[string]func() *Lanes {
	out := map[string]func() *Lanes{}
	for _, name := range Kernels() {
		if name == Generic {
			continue
		}
		out[name] = func() *Lanes {
			e, err := NewKernel(name)
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewLanes(e)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
	}
	for _, n := range []int{16, 3} {
		out[fmt.Sprintf("ref%d", n)] = func() *Lanes {
			k := refKernel(n)
			k.minLanes = min(n, 7)
			l, err := NewLanes(newEngine(k))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
	}
	return out
}

// Writers on goroutines of their own, more than the lanes, each putting
// streams of random lengths in chunks of random sizes from 1 to 3 buffers
// of its own, and yielding at random between chunks, so that chunks
// arrive in random orders and lanes are parked at random: every digest is
// crypto/sha256's, and every buffer comes back once the engine is done with
// it (the writer scribbles on each buffer it gets back). Some streams are
// given up half-way; the others go on.
func TestLanesRandomArrivals(t *testing.T) {
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			l := newLanes()
			writers := l.Width() + l.Width()/2 + 1
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					laneWriter(t, l, uint64(w))
				}()
			}
			wg.Wait()
			l.Close()
		})
	}
}

// laneWriter writes 8 streams into l and checks their results.
func laneWriter(t *testing.T, l *Lanes, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 40))
	nbufs := 1 + rng.IntN(3)
	chunk := 64 * (1 + rng.IntN(1024)) // up to 64 KiB
	bufs := make([][]byte, nbufs)
	for i := range bufs {
		bufs[i] = make([]byte, chunk)
	}
	for i := range 8 {
		var size int
		switch rng.IntN(4) {
		case 0:
			size = []int{0, 1, 55, 56, 63, 64, 65, 119, 120, 128}[rng.IntN(10)]
		case 1:
			size = chunk*(1+rng.IntN(3)) + rng.IntN(2)*rng.IntN(64)
		default:
			size = rng.IntN(200 << 10)
		}
		data := randomBytes(seed<<8|uint64(i), size)
		abort := rng.IntN(10) == 0
		got, ok := writeStream(l, data, bufs, rng, abort)
		if !ok {
			continue
		}
		if want := sha256.Sum256(data); got.Err != nil || got.Sum != want || got.Size != int64(size) {
			t.Errorf("writer %d stream %d (%d bytes in chunks of %d, %d buffers): %x, %d bytes, %v; want %x",
				seed, i, size, chunk, nbufs, got.Sum, got.Size, got.Err, want)
		}
	}
}

// writeStream puts data into a new stream through bufs, and returns its
// result; false when it gave the stream up (abort) half-way.
func writeStream(l *Lanes, data []byte, bufs [][]byte, rng *rand.Rand, abort bool) (Result, bool) {
	s := l.Open(len(bufs))
	free := append([][]byte(nil), bufs...)
	for off := 0; ; {
		if abort && off >= len(data)/2 {
			s.Abort()
			return Result{}, false
		}
		if len(free) == 0 {
			b := <-s.Back()
			for j := range b {
				b[j] = 0xa5 // the engine must be done with it
			}
			free = append(free, b[:cap(b)])
		}
		b := free[len(free)-1]
		free = free[:len(free)-1]
		n := copy(b, data[off:])
		off += n
		for range rng.IntN(4) {
			runtime.Gosched()
		}
		last := off == len(data)
		s.Put(b[:n], last)
		if last {
			break
		}
	}
	r := s.Sum()
	for range len(bufs) - len(free) { // every buffer is back by now
		select {
		case <-s.Back():
		default:
			panic("a buffer was not handed back before the stream's result")
		}
	}
	return r, true
}

// A stream whose writer gives up before a lane is free for it, and Lanes
// closed without a stream ever opened, end at once.
func TestLanesAbortWaitingAndCloseUnused(t *testing.T) {
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			newLanes().Close()
			l := newLanes()
			var held []*Stream
			for range l.Width() {
				s := l.Open(1)
				s.Put(make([]byte, 64), false)
				held = append(held, s)
			}
			s := l.Open(1) // no lane free: every writer above holds one
			s.Put(make([]byte, 128), false)
			s.Abort()
			var wg sync.WaitGroup
			for _, h := range held { // each writer on its own, as Lanes needs
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-h.Back()
					h.Put(nil, true)
					if r := h.Sum(); r.Err != nil || r.Sum != sha256.Sum256(make([]byte, 64)) {
						t.Errorf("a stream beside the aborted one: %x, %v", r.Sum, r.Err)
					}
				}()
			}
			wg.Wait()
			l.Close()
		})
	}
}

// A chunk that is not whole blocks before the last is refused: the lanes
// could not hash it in place.
func TestLanesRefusesPartialChunkBeforeLast(t *testing.T) {
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			l := newLanes()
			s := l.Open(2)
			func() {
				defer func() {
					if recover() == nil {
						t.Error("a 100-byte chunk before the last was taken")
					}
				}()
				s.Put(make([]byte, 100), false)
			}()
			s.Abort()
			l.Close()
		})
	}
}

func TestNewLanesRefusesGeneric(t *testing.T) {
	if _, err := NewLanes(newEngine(nil)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("NewLanes(generic): %v, want ErrUnsupported", err)
	}
}

// A writer that opened a stream and puts nothing (its disk is slow) holds
// the other lanes' chunks back for patience at most: they are hashed, and
// their writers go on.
func TestLanesPatience(t *testing.T) {
	defer func(p time.Duration) { patience = p }(patience)
	patience = 10 * time.Millisecond
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			l := newLanes()
			defer l.Close()
			slow := l.Open(1) // in a lane, nothing put
			s := l.Open(1)
			data := randomBytes(7, 4096)
			s.Put(data, false)
			select {
			case <-s.Back():
			case <-time.After(10 * time.Second):
				t.Fatal("a chunk waits for ever for a writer that puts nothing")
			}
			s.Put(nil, true)
			if r := s.Sum(); r.Err != nil || r.Sum != sha256.Sum256(data) {
				t.Errorf("%x, %v", r.Sum, r.Err)
			}
			slow.Abort()
		})
	}
}

// An empty chunk before the last is whole blocks (none): its buffer comes
// back like any other, at once, and the stream's digest is its other
// chunks'. (The engine once kept such a buffer for ever: the lane had
// nothing to hash and nothing to hand back, and the writer waited on Back.)
func TestLanesEmptyChunkBeforeLast(t *testing.T) {
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			l := newLanes()
			s := l.Open(2)
			a, b := make([]byte, 4096), make([]byte, 4096)
			back := func(want string) {
				t.Helper()
				select {
				case <-s.Back():
				case <-time.After(10 * time.Second):
					s.Abort() // ends the stream, so that Close returns
					l.Close()
					t.Fatalf("%s: not handed back", want)
				}
			}
			s.Put(a[:0], false)
			back("an empty chunk, the only one put")
			data := randomBytes(11, 128)
			copy(b, data)
			s.Put(b[:128], false)
			s.Put(a[:0], false)
			back("one of a chunk and an empty one after it")
			back("the other of a chunk and an empty one after it")
			s.Put(a[:0], true)
			if r := s.Sum(); r.Err != nil || r.Size != 128 || r.Sum != sha256.Sum256(data) {
				t.Errorf("%x, %d bytes, %v; want %x", r.Sum, r.Size, r.Err, sha256.Sum256(data))
			}
			l.Close()
		})
	}
}

// Patience counts from when the engine first waited with data in hand, not
// from its last wake-up: streams opened and given up meanwhile (each wakes
// the engine, which still does not run) do not hold a chunk back for longer.
func TestLanesPatienceNotRestartedByWakes(t *testing.T) {
	defer func(p time.Duration) { patience = p }(patience)
	patience = 200 * time.Millisecond
	for name, newLanes := range testLanes(t) {
		t.Run(name, func(t *testing.T) {
			l := newLanes()
			defer l.Close()
			slow := l.Open(1) // in a lane, nothing put
			defer slow.Abort()
			stop := make(chan struct{})
			churned := make(chan struct{})
			go func() { // a stream opened and given up every 10 ms: each wakes the engine
				defer close(churned)
				for {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					l.Open(1).Abort()
				}
			}()
			defer func() { close(stop); <-churned }()
			s := l.Open(1)
			data := randomBytes(9, 4096)
			s.Put(data, false)
			began := time.Now()
			select {
			case <-s.Back():
			case <-time.After(5 * time.Second):
				s.Abort()
				t.Fatal("a chunk held back 5 s, patience 200 ms, while other streams came and went")
			}
			t.Logf("chunk back after %v", time.Since(began))
			s.Put(nil, true)
			if r := s.Sum(); r.Err != nil || r.Sum != sha256.Sum256(data) {
				t.Errorf("%x, %v", r.Sum, r.Err)
			}
		})
	}
}
