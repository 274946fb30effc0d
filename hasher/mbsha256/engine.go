package mbsha256

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"
)

// ChunkSize is how many bytes an Engine reads from a stream at a time; each
// lane owns one buffer of this size.
const ChunkSize = 64 << 10

// Result is the outcome of hashing one stream.
type Result struct {
	Sum  [sha256.Size]byte // valid when Err is nil
	Size int64             // bytes read from the stream
	Err  error             // the stream's read error, or the context's error
}

// Engine hashes batches of streams with one kernel. The zero value hashes
// with crypto/sha256, one stream at a time, like NewKernel(Generic).
type Engine struct {
	k     *kernel // nil: crypto/sha256, one stream at a time
	lanes []lane
	state [8][maxLanes]uint32
	ptrs  [maxLanes]*byte
	// minLanes: with an empty queue and fewer busy lanes than this, the
	// rest is finished by the finisher, or by crypto/sha256.
	minLanes int
	// finisher, when not nil, is a narrower engine that finishes the
	// streams left when too few are left for this one's lanes.
	finisher *Engine
	buf      []byte // the generic path's read buffer
}

// New returns an Engine with the fastest kernel this machine has.
func New() *Engine {
	for _, k := range kernels() {
		if k.have && k.auto {
			return newEngine(k)
		}
	}
	return newEngine(nil)
}

// NewKernel returns an Engine with the named kernel (one of Kernels), or an
// error wrapping ErrUnsupported saying what the machine lacks.
func NewKernel(name string) (*Engine, error) {
	k, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return newEngine(k), nil
}

func newEngine(k *kernel) *Engine {
	e := &Engine{k: k}
	if k != nil {
		e.lanes = make([]lane, k.lanes)
		e.minLanes = k.minLanes
		if f := finisherKernel(); f != nil && f.lanes < k.lanes {
			e.finisher = newEngine(f)
			e.minLanes = k.finishLanes
		}
	}
	return e
}

// Kernel names the engine's kernel.
func (e *Engine) Kernel() string {
	if e.k == nil {
		return Generic
	}
	return e.k.name
}

// Lanes is the number of streams the engine hashes at once.
func (e *Engine) Lanes() int {
	if e.k == nil {
		return 1
	}
	return e.k.lanes
}

// SumMany returns the SHA-256 digest of each input, in order.
func (e *Engine) SumMany(inputs [][]byte) [][sha256.Size]byte {
	sums := make([][sha256.Size]byte, len(inputs))
	if e.k == nil {
		for i, in := range inputs {
			sums[i] = sha256.Sum256(in)
		}
		return sums
	}
	i := 0
	next := func(bool) (source, Feed) {
		if i == len(inputs) {
			return source{}, Dry
		}
		i++
		return source{mem: inputs[i-1]}, Taken
	}
	// Memory sources cannot fail and the context is never done.
	_ = e.run(context.Background(), next, func(i int, r Result) { sums[i] = r.Sum })
	return sums
}

// SumReaders hashes each reader to its end and returns the results in order.
// A reader's error ends only its own stream. If ctx is done first, the
// unfinished streams' results carry ctx.Err().
func (e *Engine) SumReaders(ctx context.Context, rs []io.Reader) []Result {
	res := make([]Result, len(rs))
	i := 0
	next := func() (io.Reader, bool) {
		if i == len(rs) {
			return nil, false
		}
		i++
		return rs[i-1], true
	}
	if err := e.Hash(ctx, next, func(i int, r Result) { res[i] = r }); err != nil {
		for j := i; j < len(rs); j++ {
			res[j].Err = err
		}
	}
	return res
}

// Hash hashes every stream next yields, reading each to its end in
// ChunkSize pieces, and calls done with the stream's position in next's
// sequence (0, 1, …) and its Result as soon as the stream is finished; done
// is called once per stream taken, on the caller's goroutine. next is called
// only when a lane is free, so it may open a file on demand (and done close
// it); a nil reader ends its stream with ErrNilReader. next reporting false
// means no stream for now: while streams are in flight, Hash asks again
// after each step, so a queue that fills while it runs keeps the lanes
// busy; Hash returns once next reports false with every lane idle. It
// returns ctx.Err() if ctx is done first: the streams in flight are then
// reported with that error and next is not called again.
func (e *Engine) Hash(ctx context.Context, next func() (io.Reader, bool), done func(i int, r Result)) error {
	return e.HashFeed(ctx, func(bool) (Input, Feed) {
		r, ok := next()
		if !ok {
			return Input{}, Dry
		}
		if r == nil {
			r = failing{ErrNilReader}
		}
		return Input{R: r}, Taken
	}, done)
}

// Input is one stream of HashFeed: R read to its end, or, when R is nil,
// the bytes of Data, hashed where they are without a copy.
type Input struct {
	Data []byte
	R    io.Reader
}

// Feed is what a HashFeed next says it gave.
type Feed uint8

const (
	// Taken: the Input is a stream to hash.
	Taken Feed = iota
	// Dry: nothing now. With too few lanes busy for the kernel to pay, the
	// streams in flight are hashed on without it, a slice at a time, and
	// next is asked again between slices; with none, HashFeed returns.
	Dry
	// Soon: nothing yet, but more is on its way (its callers are reading
	// it). The engine keeps its lanes rather than finish them off, and when
	// too few are busy to pay, it calls next with wait set; next should
	// then block until it has a stream or is dry.
	Soon
)

// HashFeed is Hash for streams that may be in memory already, such as small
// files their callers read themselves, from a feed that can tell a pause
// from its end (Feed). Streams in memory are not copied.
func (e *Engine) HashFeed(ctx context.Context, next func(wait bool) (Input, Feed), done func(i int, r Result)) error {
	if e.k == nil {
		return e.hashGeneric(ctx, next, done)
	}
	return e.run(ctx, func(wait bool) (source, Feed) {
		in, f := next(wait)
		return source{r: in.R, mem: in.Data}, f
	}, done)
}

func (e *Engine) hashGeneric(ctx context.Context, next func(bool) (Input, Feed), done func(int, Result)) error {
	if e.buf == nil {
		e.buf = make([]byte, ChunkSize)
	}
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		in, f := next(true)
		for f == Soon && ctx.Err() == nil {
			in, f = next(true)
		}
		if f != Taken {
			return ctx.Err()
		}
		if in.R == nil {
			done(i, Result{Sum: sha256.Sum256(in.Data), Size: int64(len(in.Data))})
			continue
		}
		h := sha256.New()
		n, err := copyChunks(ctx, h, in.R, e.buf)
		res := Result{Size: n, Err: err}
		if err == nil {
			h.Sum(res.Sum[:0])
		}
		done(i, res)
	}
}

// failing is a reader that fails with err.
type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

// copyChunks writes what r yields to w through buf, one ReadFull at a time,
// and stops with ctx.Err() between chunks once ctx is done.
func copyChunks(ctx context.Context, w io.Writer, r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := io.ReadFull(r, buf)
		w.Write(buf[:m])
		n += int64(m)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return n, nil
		case err != nil:
			return n, err
		}
	}
}

// source is one stream: a reader, or bytes in memory (r == nil).
type source struct {
	r   io.Reader
	mem []byte
}

// lane is one stream in flight.
type lane struct {
	busy   bool
	idx    int
	src    source
	buf    []byte // reader streams: the chunk buffer
	blocks []byte // whole blocks ready for the kernel
	hashed uint64 // bytes the kernel has taken
	size   uint64 // bytes read so far
	ended  bool   // the stream is read to its end
	padded bool   // blocks holds the final, padded blocks
	rest   int    // data bytes at the start of tail, once ended
	tail   [2 * 64]byte
	err    error
}

// feeder attaches the next stream to lane i of e, or says why it has none;
// with wait it may block until it has one.
type feeder func(e *Engine, i int, wait bool) Feed

// sources feeds the streams next yields, numbering them from 0.
func sources(next func(wait bool) (source, Feed)) feeder {
	taken := 0
	return func(e *Engine, i int, wait bool) Feed {
		s, f := next(wait)
		if f != Taken {
			return f
		}
		e.attach(i, taken, s)
		taken++
		return Taken
	}
}

// run is the multi-lane loop shared by HashFeed and SumMany.
func (e *Engine) run(ctx context.Context, next func(wait bool) (source, Feed), done func(int, Result)) error {
	return e.loop(ctx, sources(next), done)
}

// loop hashes the streams feed attaches until it is dry and every lane is
// idle. A feed that had none is asked again at the next round; one with
// more coming while too few lanes are busy is asked to wait for it.
func (e *Engine) loop(ctx context.Context, feed feeder, done func(int, Result)) error {
	defer e.release()
	return e.loopFor(ctx, feed, done, -1)
}

// loopFor is loop's body. With budget ≥ 0 it also returns once the kernel
// has hashed budget blocks of each lane, or a drain has run, leaving the
// streams it holds in its lanes: drain gives a finisher's lanes a budget,
// so that it hands them back and the feed is asked again.
func (e *Engine) loopFor(ctx context.Context, feed feeder, done func(int, Result), budget int) error {
	wait := false
	for {
		if err := ctx.Err(); err != nil {
			e.abort(err, done)
			return err
		}
		busy, got := 0, Taken
		for i := range e.lanes {
			l := &e.lanes[i]
			for len(l.blocks) == 0 {
				if l.busy {
					if l.padded || l.err != nil {
						done(l.idx, e.finish(i))
						continue
					}
					e.fill(l)
					continue
				}
				if got != Taken {
					break
				}
				got = feed(e, i, wait)
				wait = false // at most once a round
			}
			if l.busy {
				busy++
			}
		}
		if busy == 0 && got == Dry {
			return nil
		}
		if got == Soon && busy < max(e.minLanes, 1) {
			wait = true // too few lanes to pay: wait for more, not step
			continue
		}
		if got == Dry && busy < e.minLanes && !e.padding() {
			if err := e.drain(ctx, done); err != nil {
				return err
			}
			if budget >= 0 {
				return nil
			}
			continue // ask the feed again before the next slice
		}
		n := e.step() // with padding in a lane, the kernel ends it first
		if budget >= 0 {
			if budget -= n; budget <= 0 {
				return nil
			}
		}
	}
}

// attach starts stream s, number idx, on lane i.
func (e *Engine) attach(i, idx int, s source) {
	l := &e.lanes[i]
	buf := l.buf
	*l = lane{busy: true, idx: idx, src: s, buf: buf}
	for w, v := range iv {
		e.state[w][i] = v
	}
}

var iv = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// fill gives a busy lane with no blocks its next blocks: more data, or the
// padded end of the stream. A read error is recorded in l.err.
func (e *Engine) fill(l *lane) {
	if l.ended {
		l.blocks = l.tail[:pad(&l.tail, l.rest, l.size)]
		l.padded = true
		return
	}
	var data []byte
	if l.src.r == nil {
		data = l.src.mem
		l.src.mem = nil
		l.ended = true
	} else {
		if l.buf == nil {
			l.buf = make([]byte, ChunkSize)
		}
		n, err := io.ReadFull(l.src.r, l.buf)
		data = l.buf[:n]
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			l.ended = true
		case err != nil:
			l.err = err
			return
		}
	}
	l.size += uint64(len(data))
	whole := len(data) &^ 63
	l.blocks = data[:whole]
	if l.ended {
		l.rest = copy(l.tail[:], data[whole:])
	}
}

// pad writes SHA-256 padding for a message of size bytes after the rest data
// bytes already in tail, and returns the padded length (64 or 128).
func pad(tail *[128]byte, rest int, size uint64) int {
	n := 64
	if rest >= 56 {
		n = 128
	}
	tail[rest] = 0x80
	clear(tail[rest+1 : n-8])
	binary.BigEndian.PutUint64(tail[n-8:n], size*8)
	return n
}

// step runs the kernel over as many blocks as every busy lane has, and
// returns that number.
func (e *Engine) step() int {
	n := -1
	var any *byte
	for i := range e.lanes {
		l := &e.lanes[i]
		if !l.busy {
			continue
		}
		if nb := len(l.blocks) / 64; n < 0 || nb < n {
			n = nb
		}
		e.ptrs[i] = unsafe.SliceData(l.blocks)
		any = e.ptrs[i]
	}
	for i := range e.lanes {
		if !e.lanes[i].busy {
			e.ptrs[i] = any // read, hashed, ignored
		}
	}
	e.k.block(&e.state, &e.ptrs, n)
	for i := range e.lanes {
		l := &e.lanes[i]
		if l.busy {
			l.blocks = l.blocks[n*64:]
			l.hashed += uint64(n * 64)
		}
	}
	return n
}

// finish frees lane i and returns its stream's result.
func (e *Engine) finish(i int) Result {
	l := &e.lanes[i]
	r := Result{Size: int64(l.size), Err: l.err}
	if l.err == nil {
		for w := range 8 {
			binary.BigEndian.PutUint32(r.Sum[4*w:], e.state[w][i])
		}
	}
	l.busy = false
	l.src = source{}
	return r
}

// drain moves every busy lane that has not reached its padding on: the
// finisher engine's kernel hashes the next finisherSlice bytes of each,
// when there are enough such lanes for it to pay, and gives back those not
// finished; else crypto/sha256, resumed from each lane's state, hashes the
// next aloneSlice bytes of each and finishes those that end.
func (e *Engine) drain(ctx context.Context, done func(int, Result)) error {
	var movable []int
	for i := range e.lanes {
		if l := &e.lanes[i]; l.busy && !l.padded {
			movable = append(movable, i)
		}
	}
	if f := e.finisher; f != nil && len(movable) >= f.minLanes {
		err := f.loopFor(ctx, e.handOver(movable), done, finisherSlice/64)
		if err != nil {
			f.release() // loopFor aborted the finisher's lanes
			e.abort(err, done)
			return err
		}
		e.takeBack(f)
		return nil
	}
	for i := range e.lanes {
		l := &e.lanes[i]
		if !l.busy || l.padded {
			continue
		}
		if err := ctx.Err(); err != nil {
			e.abort(err, done)
			return err
		}
		if r, ended := e.hashAlone(ctx, i, aloneSlice); ended {
			done(l.idx, r)
		}
	}
	return nil
}

// handOver feeds the given lanes of e, streams in flight, to another engine:
// the lane (its stream, position and pending data) and its state column move
// over, and the two lanes swap chunk buffers so that each keeps one.
func (e *Engine) handOver(lanes []int) feeder {
	return func(to *Engine, i int, _ bool) Feed {
		if len(lanes) == 0 {
			return Dry
		}
		moveLane(&to.lanes[i], &e.lanes[lanes[0]])
		for w := range 8 {
			to.state[w][i] = e.state[w][lanes[0]]
		}
		lanes = lanes[1:]
		return Taken
	}
}

// takeBack moves the streams still in f's lanes, given by handOver, back
// into free lanes of e, and frees f's lanes.
func (e *Engine) takeBack(f *Engine) {
	i := 0
	for j := range f.lanes {
		src := &f.lanes[j]
		if !src.busy {
			continue
		}
		for e.lanes[i].busy {
			i++ // every stream came from a lane of e, freed when it left
		}
		moveLane(&e.lanes[i], src)
		for w := range 8 {
			e.state[w][i] = f.state[w][j]
		}
	}
	f.release()
}

// moveLane moves the stream in lane src to the free lane dst, which gives
// src its chunk buffer in exchange, so that each keeps one. A padded end
// lies in the lane's own tail, which moves by value: dst's blocks are
// pointed at its own copy before src's is cleared.
func moveLane(dst, src *lane) {
	buf := dst.buf
	*dst = *src
	if dst.padded && len(dst.blocks) > 0 {
		end := pad(&dst.tail, dst.rest, dst.size)
		dst.blocks = dst.tail[end-len(dst.blocks) : end]
	}
	*src = lane{buf: buf}
}

// finisherSlice is how much of each stream a finisher hashes before it
// gives the streams back and the loop asks the feed again: a finisher that
// kept its streams to their ends hashed the tails of a scan's large files
// at its own, lower rate while small files queued for the wider lanes.
// A hand-over moves two lane structs and their state columns each way,
// against the slice's 0.7 ms on two SHA-NI lanes (2 MiB at the 2,955 MB/s
// `annexd calibrate` measures for shanix2).
const finisherSlice = aloneSlice

// aloneSlice is how much of a stream drain hashes alone before the loop
// asks the feed again. A large file whose lane was finished alone to its
// end kept crypto/sha256's one-stream rate (0.6 of the two-stream SHA-NI
// kernel's) long after other files were queued: on the corpus a third of
// the bytes were hashed so. One resume and one save of the state per slice
// cost about a microsecond against the slice's 0.6 ms.
const aloneSlice = 16 * ChunkSize

// hashAlone hashes lane i's pending blocks and up to limit more bytes of
// its stream with crypto/sha256. When the stream ends, or fails, or ctx is
// done (the stream then ends with ctx.Err()), it frees the lane and returns
// the stream's result and true; else it leaves the lane busy at its new
// position, with its state column saved, for the kernel or another slice.
func (e *Engine) hashAlone(ctx context.Context, i int, limit int) (Result, bool) {
	l := &e.lanes[i]
	h := e.resume(i)
	for {
		h.Write(l.blocks)
		l.hashed += uint64(len(l.blocks))
		l.blocks = nil
		if l.ended || l.err != nil {
			break
		}
		if err := ctx.Err(); err != nil {
			l.err = err
			break
		}
		if limit <= 0 {
			e.save(i, h)
			return Result{}, false
		}
		e.fill(l) // reader streams only: fill reads memory ones whole
		limit -= ChunkSize
	}
	r := Result{Size: int64(l.size), Err: l.err}
	if l.err == nil {
		h.Write(l.tail[:l.rest])
		h.Sum(r.Sum[:0])
	}
	l.busy = false
	l.src = source{}
	return r, true
}

// aloneHash is crypto/sha256's hash as hashAlone uses it.
type aloneHash interface {
	io.Writer
	Sum([]byte) []byte
}

// resume returns a crypto/sha256 hash in the state of lane i after l.hashed
// bytes (a multiple of 64), through its documented binary marshaling.
func (e *Engine) resume(i int) aloneHash { return resumeColumn(&e.state, i, e.lanes[i].hashed) }

// save puts h's state, after a whole number of blocks, back into lane i's
// column of e.state, the inverse of resume.
func (e *Engine) save(i int, h aloneHash) { saveColumn(&e.state, i, e.lanes[i].hashed, h) }

// resumeColumn returns a crypto/sha256 hash in the state of column i of
// state after hashed bytes (a multiple of 64), through its documented
// binary marshaling.
func resumeColumn(state *[8][maxLanes]uint32, i int, hashed uint64) aloneHash {
	h := sha256.New()
	b := make([]byte, 0, 108)
	b = append(b, "sha\x03"...)
	for w := range 8 {
		b = binary.BigEndian.AppendUint32(b, state[w][i])
	}
	b = append(b, make([]byte, 64)...)
	b = binary.BigEndian.AppendUint64(b, hashed)
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(b); err != nil {
		// The format is part of crypto/sha256's compatibility promise.
		panic(fmt.Sprintf("mbsha256: resuming crypto/sha256: %v", err))
	}
	return h
}

// saveColumn puts h's state, after hashed bytes (a whole number of
// blocks), into column i of state, the inverse of resumeColumn.
func saveColumn(state *[8][maxLanes]uint32, i int, hashed uint64, h aloneHash) {
	b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil || len(b) != 108 || string(b[:4]) != "sha\x03" ||
		binary.BigEndian.Uint64(b[100:]) != hashed {
		panic(fmt.Sprintf("mbsha256: saving crypto/sha256's state: %q, %v", b, err))
	}
	for w := range 8 {
		state[w][i] = binary.BigEndian.Uint32(b[4+4*w:])
	}
}

// padding reports whether a busy lane holds its stream's padded end, which
// only the kernel can hash.
func (e *Engine) padding() bool {
	for i := range e.lanes {
		if l := &e.lanes[i]; l.busy && l.padded {
			return true
		}
	}
	return false
}

// abort reports err for every stream still in a lane and frees the lanes.
func (e *Engine) abort(err error, done func(int, Result)) {
	for i := range e.lanes {
		l := &e.lanes[i]
		if l.busy {
			l.busy = false
			done(l.idx, Result{Size: int64(l.size), Err: err})
		}
	}
}

// release drops references to the callers' streams and data once a batch
// is over; the chunk buffers are kept for the next batch.
func (e *Engine) release() {
	for i := range e.lanes {
		l := &e.lanes[i]
		l.busy, l.src, l.blocks = false, source{}, nil
	}
	clear(e.ptrs[:])
}
