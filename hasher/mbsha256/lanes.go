package mbsha256

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// # Lanes
//
// Lanes hashes streams whose bytes their writers read themselves, on
// goroutines of their own (the audit reads with O_DIRECT into buffers of
// its own): a writer puts each chunk it read into its Stream, the engine
// hashes the chunk where it lies, in a lane, and hands the buffer back.
// Nothing is copied. The engine runs on one goroutine; a lane whose next
// chunk has not arrived is parked for that step (its state saved before
// the kernel runs and put back after), so that the others go on without
// waiting for the slowest writer. The engine waits for more chunks only
// while a parked lane's writer is still reading and too few lanes have
// data for the kernel to pay (runnable), and for patience at most; the
// writer whose chunk makes runnable true wakes it, and no other. Each
// stream's writer must read on its own: a writer that waits for another
// stream's progress before it puts its next chunk makes the engine wait
// for patience.

// ErrAborted ends a stream its writer gave up on (Stream.Abort).
var ErrAborted = errors.New("mbsha256: stream aborted by its writer")

// Lanes hashes Streams in one engine's lanes on a goroutine of its own,
// which runs from the first Open to Close.
type Lanes struct {
	e    *Engine
	wake chan struct{} // capacity 1: the engine has something to look at
	done chan struct{} // closed when the engine's goroutine ends

	mu      sync.Mutex
	started bool
	closed  bool
	waiting []*Stream      // opened, not yet in a lane
	slots   []slot         // one a lane
	have    [maxLanes]bool // the engine's: the lanes aim pointed at their own data
	// asleep: the engine waits for a Put that makes it runnable, or for
	// an Open, an Abort or Close.
	asleep bool
	timed  bool // asleep with data in some lane: for patience at most
}

// slot is one lane of Lanes. Guarded by Lanes.mu, but for cur's bytes,
// which the engine reads without it.
type slot struct {
	s      *Stream // nil: free
	cur    []byte  // the whole blocks of the chunk in hand not yet hashed
	buf    []byte  // the chunk in hand, to hand back
	rest   []byte  // the final chunk's last partial block
	final  bool    // buf is the stream's final chunk
	hashed uint64
}

// ready reports whether the lane has something for the engine to do.
func (sl *slot) ready() bool {
	return sl.s != nil && (len(sl.cur) > 0 || len(sl.s.queue) > 0 || sl.final || sl.s.aborted)
}

// NewLanes returns Lanes that hash in e's lanes. e is theirs from then
// on. The generic engine (one lane) is refused: it gains nothing.
func NewLanes(e *Engine) (*Lanes, error) {
	if e.k == nil {
		return nil, fmt.Errorf("%w: the generic engine has no lanes", ErrUnsupported)
	}
	return &Lanes{e: e, wake: make(chan struct{}, 1), done: make(chan struct{}), slots: make([]slot, e.k.lanes)}, nil
}

// Width is the number of streams hashed at once.
func (l *Lanes) Width() int { return l.e.Lanes() }

// Kernel names the engine's kernel.
func (l *Lanes) Kernel() string { return l.e.Kernel() }

// Close ends the engine's goroutine once every stream opened has ended
// (by Sum or Abort), and waits for it. Open may not be called after.
func (l *Lanes) Close() {
	l.mu.Lock()
	l.closed = true
	started := l.started
	l.mu.Unlock()
	if started {
		l.signal()
		<-l.done
	}
}

// Open starts a stream whose writer owns bufs buffers: the engine counts
// on the writer to read on while it holds fewer than that.
func (l *Lanes) Open(bufs int) *Stream {
	s := &Stream{l: l, bufs: max(bufs, 1), back: make(chan []byte, max(bufs, 1)), res: make(chan Result, 1)}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		panic("mbsha256: Open after Close")
	}
	l.waiting = append(l.waiting, s)
	if !l.started {
		l.started = true
		go l.run()
	}
	l.asleep = false
	l.mu.Unlock()
	l.signal()
	return s
}

func (l *Lanes) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Stream is one stream of Lanes, written by one goroutine.
type Stream struct {
	l    *Lanes
	bufs int
	back chan []byte // buffers hashed, for the writer
	res  chan Result

	// guarded by l.mu
	queue   [][]byte // chunks put, not yet in the lane
	held    int      // chunks put and not yet handed back
	size    uint64   // bytes put
	last    bool     // the final chunk was put
	aborted bool
	lane    int // the lane's index + 1; 0: none yet
}

// Put hands b to the engine, which hashes it in place and then sends it
// on Back; the writer must not touch b meanwhile. Every chunk but the
// last is a whole number of 64-byte blocks; last marks the final chunk,
// which may be of any length (empty too).
func (s *Stream) Put(b []byte, last bool) {
	if !last && len(b)%64 != 0 {
		panic(fmt.Sprintf("mbsha256: a chunk of %d bytes before the last: not whole blocks", len(b)))
	}
	l := s.l
	l.mu.Lock()
	if s.last || s.aborted || s.held >= s.bufs {
		l.mu.Unlock()
		panic("mbsha256: Put after the last chunk or Abort, or with every buffer held")
	}
	s.queue = append(s.queue, b)
	s.held++
	s.size += uint64(len(b))
	s.last = last
	// Wake the engine when, asleep, it would now run: the same test it
	// made before it slept, on the lanes as they are now.
	// An engine asleep with no data at all (untimed) is woken by the first
	// chunk too, to start its patience.
	wake := l.asleep && s.lane != 0 && (!l.timed || l.runnable())
	if wake {
		l.asleep = false
	}
	l.mu.Unlock()
	if wake {
		l.signal()
	}
}

// Back delivers the buffers the engine has hashed.
func (s *Stream) Back() <-chan []byte { return s.back }

// Sum waits for the stream's result, once its last chunk was put. By
// then the engine has handed every buffer back.
func (s *Stream) Sum() Result { return <-s.res }

// Abort gives the stream up and returns once the engine holds none of its
// buffers; those it held are not sent on Back.
func (s *Stream) Abort() {
	l := s.l
	l.mu.Lock()
	s.aborted = true
	l.asleep = false
	l.mu.Unlock()
	l.signal()
	<-s.res
}

// run is the engine's goroutine.
func (l *Lanes) run() {
	defer close(l.done)
	patience := time.NewTimer(time.Hour)
	defer patience.Stop()
	force := false      // patience ran out: hash what is there
	var since time.Time // when the engine first waited with data, since it last ran
	for {
		l.mu.Lock()
		l.tidy()
		ready, _, busy := l.count()
		if busy == 0 && len(l.waiting) == 0 && l.closed {
			l.mu.Unlock()
			return
		}
		if !l.runnable() && !(force && ready > 0) {
			l.asleep, l.timed = true, ready > 0
			l.mu.Unlock()
			switch {
			case ready == 0:
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			}
			force = l.sleep(patience, since)
			continue
		}
		force, since = false, time.Time{}
		n := l.aim(ready >= l.e.k.minLanes)
		l.mu.Unlock()
		if n > 0 {
			l.step(n)
		} else {
			l.alone()
		}
		l.mu.Lock()
		l.advance(n)
		l.mu.Unlock()
	}
}

// patience is how long the engine waits for more lanes to have data
// while some have: a writer slower than that (a disk busy with others'
// reads in the idle class) no longer holds the others' chunks back, and
// should the engine ever misjudge a writer as reading on, it goes on
// rather than waits for ever. (Tests shorten it.)
var patience = time.Second

// sleep waits for a wake-up, or, when some lanes have data (since is when
// the engine first waited with it), until patience from since at most, and
// reports whether that ran out. Wake-ups that leave the engine waiting
// (an Open, an Abort) do not restart patience.
func (l *Lanes) sleep(t *time.Timer, since time.Time) bool {
	if since.IsZero() {
		<-l.wake
		return false
	}
	t.Reset(time.Until(since.Add(patience)))
	select {
	case <-l.wake:
		t.Stop()
		return false
	case <-t.C:
		return true
	}
}

// tidy ends the aborted streams and those hashed to their end, gives
// free lanes to waiting streams and the next chunk to lanes that hashed
// theirs.
func (l *Lanes) tidy() {
	kept := l.waiting[:0]
	for _, s := range l.waiting {
		if s.aborted {
			s.res <- Result{Size: int64(s.size), Err: ErrAborted}
			continue
		}
		kept = append(kept, s)
	}
	clear(l.waiting[len(kept):])
	l.waiting = kept
	for i := range l.slots {
		sl := &l.slots[i]
		for {
			switch {
			case sl.s == nil && len(l.waiting) > 0:
				l.attach(i, l.waiting[0])
				l.waiting = l.waiting[1:]
				continue
			case sl.s == nil:
			case sl.s.aborted:
				sl.s.res <- Result{Size: int64(sl.s.size), Err: ErrAborted}
				*sl = slot{}
				continue
			case len(sl.cur) == 0 && !sl.final && len(sl.s.queue) > 0:
				l.take(sl)
				continue
			case len(sl.cur) == 0 && sl.final:
				l.finish(i)
				continue
			}
			break
		}
	}
}

// attach starts stream s in lane i.
func (l *Lanes) attach(i int, s *Stream) {
	l.slots[i] = slot{s: s}
	s.lane = i + 1
	for w, v := range iv {
		l.e.state[w][i] = v
	}
}

// take moves the stream's next chunk into its lane. An empty chunk
// before the last has nothing to hash: it goes back at once (advance
// hands back only the chunks it hashed).
func (l *Lanes) take(sl *slot) {
	s := sl.s
	b := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	whole := len(b) &^ 63
	sl.buf, sl.cur = b, b[:whole]
	if s.last && len(s.queue) == 0 {
		sl.final, sl.rest = true, b[whole:]
	}
	if len(b) == 0 && !sl.final {
		s.held--
		s.back <- b
		sl.buf = nil
	}
}

// finish ends lane i's stream, hashed but for its final partial block,
// with crypto/sha256 resumed from the lane's state.
func (l *Lanes) finish(i int) {
	sl := &l.slots[i]
	h := resumeColumn(&l.e.state, i, sl.hashed)
	h.Write(sl.rest)
	r := Result{Size: int64(sl.hashed) + int64(len(sl.rest))}
	h.Sum(r.Sum[:0])
	sl.s.held--
	sl.s.back <- sl.buf
	sl.s.res <- r
	*sl = slot{}
}

// count returns the lanes with something to do (data to hash, after tidy
// in hand), the busy ones without whose writers read on, and the busy ones.
func (l *Lanes) count() (ready, starving, busy int) {
	for i := range l.slots {
		sl := &l.slots[i]
		if sl.s == nil {
			continue
		}
		busy++
		switch {
		case sl.ready():
			ready++
		case !sl.s.last && sl.s.held < sl.s.bufs:
			starving++
		}
	}
	return ready, starving, busy
}

// runnable reports whether the engine has work to do now rather than wait:
// a lane has data, and either enough lanes have some for the kernel to pay
// (three quarters of the busy ones, and its minimum) or no lane without
// data has a writer that reads on (each waits for the engine, or has put
// its end).
func (l *Lanes) runnable() bool {
	ready, starving, busy := l.count()
	need := max(l.e.k.minLanes, busy-busy/4)
	return ready > 0 && (ready >= need || starving == 0)
}

// aim points the kernel at the lanes with data and returns the blocks
// each has in common; 0 when the kernel does not pay (too few lanes),
// and the lanes are then hashed alone. The other lanes' pointers read the
// data of one that has some: hashed and ignored, their state kept aside.
func (l *Lanes) aim(kernel bool) int {
	if !kernel {
		return 0
	}
	n := -1
	var any *byte
	for i := range l.slots {
		sl := &l.slots[i]
		if l.have[i] = len(sl.cur) > 0; !l.have[i] {
			continue
		}
		if nb := len(sl.cur) / 64; n < 0 || nb < n {
			n = nb
		}
		l.e.ptrs[i] = unsafe.SliceData(sl.cur)
		any = l.e.ptrs[i]
	}
	for i := range l.slots {
		if !l.have[i] {
			l.e.ptrs[i] = any
		}
	}
	return n
}

// step runs the kernel over n blocks of each lane with data; the others
// get their state back afterwards. Called without the lock: the lanes'
// chunks stay put until advance.
func (l *Lanes) step(n int) {
	var saved [8][maxLanes]uint32
	for i := range l.slots {
		if !l.have[i] {
			for w := range 8 {
				saved[w][i] = l.e.state[w][i]
			}
		}
	}
	l.e.k.block(&l.e.state, &l.e.ptrs, n)
	for i := range l.slots {
		if !l.have[i] {
			for w := range 8 {
				l.e.state[w][i] = saved[w][i]
			}
		}
	}
}

// alone hashes the chunk in hand of each lane with data with crypto/sha256,
// resumed from and saved back to the lane's state.
func (l *Lanes) alone() {
	for i := range l.slots {
		sl := &l.slots[i]
		if len(sl.cur) == 0 {
			continue
		}
		h := resumeColumn(&l.e.state, i, sl.hashed)
		h.Write(sl.cur)
		saveColumn(&l.e.state, i, sl.hashed+uint64(len(sl.cur)), h)
	}
}

// advance records that the lanes with data had n blocks hashed (all of
// their chunk when n is 0: alone), and hands back the chunks done.
func (l *Lanes) advance(n int) {
	for i := range l.slots {
		sl := &l.slots[i]
		if len(sl.cur) == 0 {
			continue
		}
		m := len(sl.cur)
		if n > 0 {
			m = n * 64
		}
		sl.cur = sl.cur[m:]
		sl.hashed += uint64(m)
		if len(sl.cur) == 0 && !sl.final {
			sl.s.held--
			sl.s.back <- sl.buf
			sl.buf = nil
		}
	}
	clear(l.e.ptrs[:])
}
