package hasher

import (
	"context"
	"sync"

	"github.com/annexd/annexd/fsstat"
)

// DefaultReaders is how many small files callers read at once from one
// device for the batch engine when a Policy does not say. On the
// benchmark machine's virtual disk 16 readers were within 1 % of the best
// `cat` fan-out; one reader per spinning disk may do better there (set
// Policy.Readers). BENCHMARKS.md has the curve.
const DefaultReaders = 16

// laneMemMax is the largest file a caller reads into memory for the lanes;
// larger ones up to InlineMax go to the engine to be read there. Each
// caller holds at most this much until its answer: with Streams callers,
// 2 × workers × lanes of it (64 callers, 4 MiB, on 2 CPUs with 16 lanes).
const laneMemMax = 64 << 10

// readOpen reads the small regular file f into a pooled buffer, makes
// recent data durable and checks the file's identity after reading, as
// hashFile does, so that the bytes can be hashed later and elsewhere. The
// caller closes f and puts the buffer back.
func readOpen(ctx context.Context, f *stableFile, o readOpts) (*[]byte, fsstat.FileInfo, error) {
	bp := getData(f.before.Size)
	buf := (*bp)[:f.before.Size]
	direct, err := f.readCold(o, *bp)
	if err != nil {
		putData(bp)
		return nil, fsstat.FileInfo{}, err
	}
	for got := 0; !direct && got < len(buf); {
		if err := ctx.Err(); err != nil {
			putData(bp)
			return nil, fsstat.FileInfo{}, err
		}
		n, err := f.read(buf[got:])
		if err != nil {
			putData(bp)
			return nil, fsstat.FileInfo{}, err
		}
		got += n
	}
	if err := f.makeDurable(o); err != nil {
		putData(bp)
		return nil, fsstat.FileInfo{}, err
	}
	if testHookAfterRead != nil {
		testHookAfterRead(f.path)
	}
	if err := f.verify(); err != nil {
		putData(bp)
		return nil, fsstat.FileInfo{}, err
	}
	*bp = buf
	return bp, f.before, nil
}

// Data buffers come in powers of two from 4 KiB, one pool per size.
const minDataShift = 12

var dataPools [32]sync.Pool // index: log2 of the capacity

func dataClass(n int64) int {
	c := minDataShift
	for int64(1)<<c < n {
		c++
	}
	return c
}

func getData(n int64) *[]byte {
	c := dataClass(n)
	if b, ok := dataPools[c].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 1<<c)
	return &b
}

func putData(b *[]byte) {
	c := dataClass(int64(cap(*b)))
	if int64(1)<<c != int64(cap(*b)) || c >= len(dataPools) {
		return
	}
	*b = (*b)[:0]
	dataPools[c].Put(b)
}

// readSlots bounds the small files read at once per device.
type readSlots struct {
	n  int
	mu sync.Mutex
	by map[uint64]chan struct{}
}

func (r *readSlots) of(dev uint64) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = make(map[uint64]chan struct{})
	}
	c, ok := r.by[dev]
	if !ok {
		c = make(chan struct{}, r.n)
		r.by[dev] = c
	}
	return c
}

// tryAcquire takes a read slot on dev if one is free; the returned func
// gives it back.
func (r *readSlots) tryAcquire(dev uint64) (func(), bool) {
	c := r.of(dev)
	select {
	case c <- struct{}{}:
		return func() { <-c }, true
	default:
		return nil, false
	}
}

// acquire waits for a read slot on dev; the returned func gives it back.
func (r *readSlots) acquire(ctx context.Context, dev uint64) (func(), error) {
	c := r.of(dev)
	select {
	case c <- struct{}{}:
		return func() { <-c }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
