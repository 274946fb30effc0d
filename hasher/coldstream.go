package hasher

import (
	"sync"

	"github.com/annexd/annexd/internal/directio"
)

// A large file for the lanes none of whose pages is in the page cache (a
// cold first scan) is read with O_DIRECT, ahead of the engine, into
// buffers of huge pages, as the audit reads, rather than through the page
// cache with read-ahead, which the kernel pays for in CPU and which keeps
// bytes a scan reads once: a cold first scan of the benchmark corpus took
// 6.27 s against 7.76 s (medians of 5 alternated rounds, bench/cold_ab.sh;
// BENCHMARKS.md). A goroutine of the file's reads coldChunk bytes at a
// time into coldBufs buffers, one read ahead of the engine, which copies
// out of them as it copies out of the page cache. At most coldStreams
// files are read so at once; the others, and every file that cannot be
// read directly, are read the usual way.

// The shape of cold streams.
const (
	coldChunk   = 2 << 20 // a read, and a buffer: a huge page
	coldBufs    = 2
	coldStreams = 4
)

var (
	coldSlots = make(chan struct{}, coldStreams)
	coldPool  sync.Pool // of *[][]byte: coldBufs buffers of coldChunk bytes
)

// testHookCold, set only by tests, hears of each file read as a cold stream.
var testHookCold func(path string)

// coldChunkRead is one read of a cold stream: the bytes, the buffer
// holding them, or the error that ended the stream.
type coldChunkRead struct {
	b, buf []byte
	err    error
}

// coldStream reads a file with O_DIRECT one chunk ahead of its reader.
type coldStream struct {
	f    *stableFile
	df   *directio.File
	bufs *[][]byte
	full chan coldChunkRead
	free chan []byte
	stop chan struct{}
	done chan struct{}
	cur  coldChunkRead // the chunk being copied out
	err  error         // the error that ended the stream, for every read after it
}

// startCold starts reading f as a cold stream, and reports whether it did:
// f must go direct (goesDirect), a slot must be free, and its first read
// must succeed, made here. When it fails (a device that refuses direct
// reads, an I/O error, a file cut short), f is left as it was, for a
// buffered read from the start, which meets the same error or change.
func (f *stableFile) startCold(o readOpts) bool {
	if f.before.Size <= coldChunk || !f.goesDirect(o) {
		return false
	}
	select {
	case coldSlots <- struct{}{}:
	default:
		return false
	}
	df, err := directio.Open(f.fd, f.before.Dev)
	if err != nil {
		<-coldSlots
		return false
	}
	bufs, _ := coldPool.Get().(*[][]byte)
	if bufs == nil {
		b := directio.Buffers(coldBufs, coldChunk)
		bufs = &b
	}
	first := f.readChunk(df, (*bufs)[0], 0)
	if first.err != nil {
		coldPool.Put(bufs)
		<-coldSlots
		_ = df.Close() // O_DIRECT off again: read the usual way
		return false
	}
	s := &coldStream{f: f, df: df, bufs: bufs, full: make(chan coldChunkRead, coldBufs), free: make(chan []byte, coldBufs),
		stop: make(chan struct{}), done: make(chan struct{})}
	s.full <- first
	for _, b := range (*bufs)[1:] {
		s.free <- b
	}
	if testHookCold != nil {
		testHookCold(f.path)
	}
	go s.produce(int64(len(first.b)))
	f.cold = s
	return true
}

// readChunk reads the chunk of f at off into buf.
func (f *stableFile) readChunk(df *directio.File, buf []byte, off int64) coldChunkRead {
	want := int(min(int64(coldChunk), f.before.Size-off))
	n, err := df.ReadAt(buf, off, want)
	if testHookRead != nil {
		testHookRead(f.path)
	}
	switch {
	case err != nil:
		return coldChunkRead{buf: buf, err: err}
	case n < want:
		return coldChunkRead{buf: buf, err: f.changed()} // shorter than its size said
	}
	return coldChunkRead{b: buf[:want], buf: buf}
}

// produce reads the chunks from off on, each into a free buffer, until
// the file's recorded size, an error, or stop.
func (s *coldStream) produce(off int64) {
	defer close(s.done)
	for off < s.f.before.Size {
		var buf []byte
		select {
		case buf = <-s.free:
		case <-s.stop:
			return
		}
		c := s.f.readChunk(s.df, buf, off)
		select {
		case s.full <- c:
		case <-s.stop:
			return
		}
		if c.err != nil {
			return
		}
		off += int64(len(c.b))
	}
}

// read copies the stream's next bytes into p.
func (s *coldStream) read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if len(s.cur.b) == 0 {
		if s.cur.buf != nil {
			s.free <- s.cur.buf
		}
		s.cur = <-s.full
		if s.cur.err != nil {
			s.err = s.cur.err
			return 0, s.err
		}
	}
	n := copy(p, s.cur.b)
	s.cur.b = s.cur.b[n:]
	return n, nil
}

// close stops the reads, waits for the one in flight, and lets go of the
// buffers and the slot. O_DIRECT stays set: f is only checked and closed.
func (s *coldStream) close() {
	close(s.stop)
	<-s.done
	coldPool.Put(s.bufs)
	<-coldSlots
}
