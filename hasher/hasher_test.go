package hasher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher/mbsha256"
	"github.com/annexd/annexd/internal/durable"
	"github.com/annexd/annexd/key"
)

// serialEngine is a BatchEngine that hashes the streams it pulls one after
// the other with crypto/sha256: the reference the pool's batch plumbing is
// tested with. Each call, after taking its first stream, waits for release
// to be closed (nil: no wait).
type serialEngine struct {
	lanes   int
	release chan struct{}
	mu      sync.Mutex
	calls   []int // streams taken by each call
	inMem   int   // streams that came read into memory
}

// fromMemory returns how many streams came read into memory.
func (e *serialEngine) fromMemory() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inMem
}

func (e *serialEngine) factory() func() BatchEngine { return func() BatchEngine { return e } }

func (e *serialEngine) Lanes() int { return e.lanes }

func (e *serialEngine) Hash(ctx context.Context, next func(bool) (Stream, mbsha256.Feed), done func(int, [32]byte, error)) error {
	e.mu.Lock()
	e.calls = append(e.calls, 0)
	call := len(e.calls) - 1
	e.mu.Unlock()
	for i := 0; ; i++ {
		s, ok := nextStream(ctx, next)
		if !ok {
			return nil
		}
		var r io.Reader = bytes.NewReader(s.Data)
		if s.R != nil {
			r = s.R
		}
		e.mu.Lock()
		e.calls[call]++
		if s.R == nil {
			e.inMem++
		}
		e.mu.Unlock()
		if i == 0 && e.release != nil {
			select {
			case <-e.release:
			case <-ctx.Done():
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		h := sha256.New()
		var sum [32]byte
		_, err := io.Copy(h, r)
		h.Sum(sum[:0])
		done(i, sum, err)
	}
}

// nextStream is what a one-lane engine does with its feed: it waits for
// the next stream while more is coming, and ends when the feed is dry.
func nextStream(ctx context.Context, next func(bool) (Stream, mbsha256.Feed)) (Stream, bool) {
	for ctx.Err() == nil {
		switch s, f := next(true); f {
		case mbsha256.Taken:
			return s, true
		case mbsha256.Dry:
			return Stream{}, false
		}
	}
	return Stream{}, false
}

// taken returns how many streams each call took so far.
func (e *serialEngine) taken() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int(nil), e.calls...)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// makeFiles writes n files of size, size+1, … bytes (patternFiles).
func makeFiles(t *testing.T, n, size int) ([]string, [][32]byte) {
	t.Helper()
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = size + i
	}
	return patternFiles(t, sizes...)
}

// patternFiles writes a file of each size, filled by pattern, and returns
// their paths and SHA-256 digests.
func patternFiles(t *testing.T, sizes ...int) ([]string, [][32]byte) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	var sums [][32]byte
	for i, n := range sizes {
		data := pattern(n)
		p := filepath.Join(dir, fmt.Sprintf("f%03d.bin", i))
		writeFile(t, p, data)
		paths = append(paths, p)
		sums = append(sums, sha256.Sum256(data))
	}
	return paths, sums
}

func hashAll(t *testing.T, h *Hasher, paths []string, sums [][32]byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(paths))
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Hash(context.Background(), p, key.SHA256E)
			if err == nil && !bytes.Equal(res.Digest, sums[i][:]) {
				err = fmt.Errorf("%s: wrong digest %x", p, res.Digest)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestPoolManyConcurrentCallers(t *testing.T) {
	paths, sums := makeFiles(t, 40, 200<<10)
	h := New(Policy{InlineMax: 100 << 10, Workers: 2}, nil)
	defer h.Close()
	hashAll(t, h, paths, sums)
}

// Files queued while the engine is busy are pulled into the same call.
func TestBatchPullsQueuedFiles(t *testing.T) {
	paths, sums := makeFiles(t, 9, 300<<10)
	eng := &serialEngine{lanes: 4, release: make(chan struct{})}
	h := New(Policy{InlineMax: -1, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1}, nil)
	defer h.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		hashAll(t, h, paths, sums)
	}()
	// The first call holds the only worker until the queue is full.
	deadline := time.Now().Add(10 * time.Second)
	for len(h.bat) < cap(h.bat) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(eng.release)
	<-done
	calls := eng.taken()
	if sum(calls) != len(paths) || calls[0] < 1+cap(h.bat) {
		t.Fatalf("streams per call %v: want all %d files, the first call taking at least the %d queued", calls, len(paths), 1+cap(h.bat))
	}
}

// A lone small file read for the lanes is hashed on its own when
// BatchMinStreams asks for more.
func TestBatchBelowMinStreamsHashedSingly(t *testing.T) {
	paths, sums := makeFiles(t, 1, 10<<10)
	eng := &serialEngine{lanes: 4}
	h := New(Policy{InlineMax: 100 << 10, Workers: 1, Batch: eng.factory(), BatchMinStreams: 2}, nil)
	defer h.Close()
	hashAll(t, h, paths, sums)
	if calls := eng.taken(); len(calls) != 0 {
		t.Fatalf("engine called (%v) for a single small file", calls)
	}
}

// A lone large file goes to the engine all the same: the files queued after
// it join it in the lanes (TestLargeFilesShareOneEngine). A smaller one is
// hashed alone (TestBatchBelowMinStreamsHashedSingly).
func TestBatchLoneLargeFileInEngine(t *testing.T) {
	paths, sums := makeFiles(t, 1, 300<<10)
	eng := &serialEngine{lanes: 4}
	h := New(Policy{InlineMax: -1, Workers: 1, Batch: eng.factory(), BatchMinStreams: 2, LargeMin: 200 << 10}, nil)
	defer h.Close()
	hashAll(t, h, paths, sums)
	if calls := eng.taken(); !slices.Equal(calls, []int{1}) {
		t.Fatalf("streams per engine call %v; want the lone large file in one call", calls)
	}
}

// Large files queued together go to one engine while its lanes have room,
// not half to each worker's: two engines with half their lanes empty cost
// up to twice the CPU per byte.
func TestLargeFilesShareOneEngine(t *testing.T) {
	const lanes = 16
	paths, sums := makeFiles(t, lanes, 300<<10)
	eng := &serialEngine{lanes: lanes, release: make(chan struct{})}
	h := New(Policy{InlineMax: -1, Workers: 2, Batch: eng.factory(), LargeMin: 200 << 10}, nil)
	defer h.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		hashAll(t, h, paths, sums)
	}()
	// The first call holds its worker until every file is in a call,
	// queued, or handed to a call by the other worker.
	waiting := func() int {
		h.joinMu.Lock()
		defer h.joinMu.Unlock()
		n := len(h.bat) + sum(eng.taken())
		for _, b := range h.open {
			n += len(b.joined)
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for waiting() < lanes && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(eng.release)
	<-done
	if calls := eng.taken(); !slices.Equal(calls, []int{lanes}) {
		t.Fatalf("streams per engine call %v; want all %d files in one call", calls, lanes)
	}

	// Past what one engine's lanes hold, the other worker starts its own.
	more, moreSums := makeFiles(t, 6*lanes, 200<<10)
	eng2 := &serialEngine{lanes: lanes, release: make(chan struct{})}
	h2 := New(Policy{InlineMax: -1, Workers: 2, Batch: eng2.factory(), LargeMin: 200 << 10}, nil)
	defer h2.Close()
	done = make(chan struct{})
	go func() {
		defer close(done)
		hashAll(t, h2, more, moreSums)
	}()
	for len(eng2.taken()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(eng2.release)
	<-done
	if calls := eng2.taken(); len(calls) < 2 {
		t.Fatalf("%d files: streams per engine call %v; want a call on each of the 2 workers", len(more), calls)
	}
}

// A file that changes while in a batch fails alone; the others succeed.
func TestBatchChangedFileFailsAlone(t *testing.T) {
	paths, sums := makeFiles(t, 3, 300<<10)
	eng := &serialEngine{lanes: 4, release: make(chan struct{})}
	h := New(Policy{InlineMax: -1, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1}, nil)
	defer h.Close()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Hash(context.Background(), p, key.SHA256)
			if err == nil && !bytes.Equal(res.Digest, sums[i][:]) {
				err = fmt.Errorf("wrong digest for %s", p)
			}
			errs[i] = err
		}()
	}
	inEngineOrQueued := func() int { return len(h.bat) + sum(eng.taken()) }
	deadline := time.Now().Add(10 * time.Second)
	for inEngineOrQueued() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// All three are in the engine or queued now; grow the last one.
	f, err := os.OpenFile(paths[2], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("grown"))
	f.Close()
	close(eng.release)
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("unchanged files failed: %v", errs)
	}
	if !errors.Is(errs[2], ErrChanged) {
		t.Fatalf("grown file: got %v, want ErrChanged", errs[2])
	}
}

func TestCloseStopsWorkAndRefusesNew(t *testing.T) {
	paths, _ := makeFiles(t, 1, 300<<10)
	eng := &serialEngine{lanes: 2, release: make(chan struct{})}
	h := New(Policy{InlineMax: -1, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1}, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := h.Hash(context.Background(), paths[0], key.SHA256)
		errc <- err
	}()
	for sum(eng.taken()) == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() {
		h.Close()
		close(closed)
	}()
	for h.base.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	close(eng.release)
	<-closed
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-flight hash: got %v, want ErrClosed", err)
	}
	if _, err := h.Hash(context.Background(), paths[0], key.SHA256); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: got %v, want ErrClosed", err)
	}
	small := filepath.Join(t.TempDir(), "small")
	writeFile(t, small, []byte("abc"))
	if _, err := h.Hash(context.Background(), small, key.SHA256); !errors.Is(err, ErrClosed) {
		t.Fatalf("inline hash after Close: got %v, want ErrClosed", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRoute(t *testing.T) {
	eng := &serialEngine{lanes: 2}
	p := Policy{InlineMax: 100, ExternalMin: 1000, External: "/usr/bin/sha256sum", Batch: eng.factory(), BatchMin: 500}.withDefaults()
	cases := []struct {
		size   int64
		sha256 bool
		want   route
	}{
		{0, true, routeInline}, {100, true, routeInline}, {101, true, routePool},
		{500, true, routeBatch}, {999, true, routeBatch}, {1000, true, routeExternal},
		{1000, false, routePool}, {500, false, routePool},
	}
	for _, c := range cases {
		if got := p.route(c.size, c.sha256); got != c.want {
			t.Errorf("route(%d, sha256=%v) = %d, want %d", c.size, c.sha256, got, c.want)
		}
	}
	never := Policy{InlineMax: -1}.withDefaults()
	if never.route(0, true) != routeInline || never.route(1, true) != routePool {
		t.Error("InlineMax < 0 must send every non-empty file to the pool")
	}
}

func TestPolicyValidate(t *testing.T) {
	bad := []Policy{
		{SHA256: "md4"},
		{ExternalMin: 1},
		{ExternalMin: 1, External: "/bin/cat"},
		{ExternalMin: -1},
		{BufferSize: 1 << 30},
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if err := (Policy{}).Validate(); err != nil {
		t.Errorf("zero policy: %v", err)
	}
}

// funcEngine is a one-lane BatchEngine that hashes each stream it takes
// with stream, after calling taken (when set).
type funcEngine struct {
	taken  func(i int)
	stream func(r io.Reader) ([32]byte, error)
}

func (e funcEngine) Lanes() int { return 1 }

func (e funcEngine) Hash(ctx context.Context, next func(bool) (Stream, mbsha256.Feed), done func(int, [32]byte, error)) error {
	for i := 0; ; i++ {
		s, ok := nextStream(ctx, next)
		if !ok {
			return nil
		}
		var r io.Reader = bytes.NewReader(s.Data)
		if s.R != nil {
			r = s.R
		}
		if e.taken != nil {
			e.taken(i)
		}
		sum, err := e.stream(r)
		done(i, sum, err)
	}
}

func (e funcEngine) policy() Policy {
	return Policy{InlineMax: -1, Workers: 1, Batch: func() BatchEngine { return e }, BatchMinStreams: 1}
}

// An engine that reports a digest without reading its stream to the end
// gets an error for that file, never a digest.
func TestBatchEngineStoppingShortGivesNoDigest(t *testing.T) {
	paths, _ := makeFiles(t, 1, 300<<10)
	h := New(funcEngine{stream: func(r io.Reader) ([32]byte, error) {
		head := make([]byte, 4096)
		n, err := io.ReadFull(r, head)
		return sha256.Sum256(head[:n]), err
	}}.policy(), nil)
	defer h.Close()
	res, err := h.Hash(context.Background(), paths[0], key.SHA256)
	if !errors.Is(err, errBatchEngine) || res.Digest != nil || !strings.Contains(err.Error(), paths[0]) {
		t.Fatalf("got digest %x, error %v; want errBatchEngine naming the file and no digest", res.Digest, err)
	}
}

// A file whose caller gives up while it is in the engine stops being read:
// the engine's reads of it fail with the context's error.
func TestBatchCancelledFileStopsReading(t *testing.T) {
	paths, _ := makeFiles(t, 1, 300<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readErr := make(chan error, 1)
	h := New(funcEngine{
		taken: func(int) { cancel() },
		stream: func(r io.Reader) ([32]byte, error) {
			_, err := io.Copy(io.Discard, r)
			readErr <- err
			return [32]byte{}, err
		},
	}.policy(), nil)
	defer h.Close()
	if _, err := h.Hash(ctx, paths[0], key.SHA256); !errors.Is(err, context.Canceled) {
		t.Fatalf("Hash: got %v, want context.Canceled", err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("engine read the cancelled file to its end (error %v)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("engine never finished the cancelled file")
	}
}

// With a batch engine, a small file's caller reads and checks it and the
// engine hashes the bytes in a lane; SmallInline keeps it inline.
func TestSmallFileInLanesUnlessInline(t *testing.T) {
	paths, sums := makeFiles(t, 3, 3000)
	for _, inline := range []bool{false, true} {
		eng := &serialEngine{lanes: 4}
		h := New(Policy{InlineMax: 100 << 10, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1, SmallInline: inline}, nil)
		hashAll(t, h, paths, sums)
		h.Close()
		want := len(paths)
		if inline {
			want = 0
		}
		if got := eng.fromMemory(); got != want {
			t.Errorf("small_inline %v: %d small files hashed in the lanes from memory, want %d", inline, got, want)
		}
	}
}

// A small file that changes between its caller's read and the check after
// it gets ErrChanged from the lanes' path, never a digest.
func TestSmallFileChangedAfterReadForLanes(t *testing.T) {
	paths, _ := makeFiles(t, 1, 3000)
	eng := &serialEngine{lanes: 4}
	h := New(Policy{InlineMax: 100 << 10, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1}, nil)
	defer h.Close()
	testHookAfterRead = func(p string) {
		writeFile(t, p, pattern(3001)) // the size is what changes for sure
	}
	defer func() { testHookAfterRead = nil }()
	res, err := h.Hash(context.Background(), paths[0], key.SHA256)
	if !errors.Is(err, ErrChanged) || res.Digest != nil {
		t.Fatalf("got digest %x, error %v; want ErrChanged and no digest", res.Digest, err)
	}
	if eng.fromMemory() != 0 {
		t.Fatal("the engine hashed bytes that changed after they were read")
	}
}

// HashStat takes the caller's lstat as the identity before: a file changed
// since then fails with ErrChanged, one unchanged hashes right.
func TestHashStatChecksTheCallersStat(t *testing.T) {
	paths, sums := makeFiles(t, 1, 3000)
	h := New(Policy{}, nil)
	defer h.Close()
	before, err := fsstat.Lstat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.HashStat(context.Background(), paths[0], key.SHA256, before)
	if err != nil || !bytes.Equal(res.Digest, sums[0][:]) {
		t.Fatalf("unchanged file: digest %x, error %v", res.Digest, err)
	}
	writeFile(t, paths[0], pattern(3001)) // a new size: changed on any clock
	if res, err := h.HashStat(context.Background(), paths[0], key.SHA256, before); !errors.Is(err, ErrChanged) {
		t.Fatalf("changed file: digest %x, error %v; want ErrChanged", res.Digest, err)
	}
}

// openOf returns the paths among paths that this process holds open, once
// the background epochs (each holds a file of its file system) are done.
func openOf(t *testing.T, paths []string) []string {
	t.Helper()
	durable.WaitEpochs()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && slices.Contains(paths, target) {
			open = append(open, target)
		}
	}
	return open
}

// A batch job's caller opens its file before queueing it. Every way a job
// ends closes that file: answered by the engine or hashed alone, cancelled
// while queued, refused by a full queue, and queued or in the engine when
// the Hasher closes.
func TestBatchJobsCloseTheirFiles(t *testing.T) {
	paths, sums := makeFiles(t, 12, 300<<10)
	noneOpen := func(t *testing.T) {
		t.Helper()
		if open := openOf(t, paths); len(open) != 0 {
			t.Fatalf("files left open: %v", open)
		}
	}
	t.Run("answered", func(t *testing.T) {
		eng := &serialEngine{lanes: 4}
		h := New(Policy{InlineMax: -1, Workers: 1, Batch: eng.factory()}, nil)
		defer h.Close()
		hashAll(t, h, paths[:8], sums[:8])
		if _, err := h.Hash(context.Background(), paths[0], key.SHA256); err != nil { // alone
			t.Fatal(err)
		}
		noneOpen(t)
	})
	t.Run("cancelled while queued", func(t *testing.T) {
		h, eng, first := blockedEngine(t, paths[0])
		defer h.Close()
		ctx, cancel := context.WithCancel(context.Background())
		queued := hashEach(h, ctx, paths[1:4])
		waitFor(t, func() bool { return len(h.bat) == 3 })
		cancel()
		if err := wait(queued); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled callers: %v", err)
		}
		close(eng.release) // the engine meets the cancelled jobs
		if err := wait(first); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return len(openOf(t, paths)) == 0 })
	})
	t.Run("queue full", func(t *testing.T) {
		h, eng, first := blockedEngine(t, paths[0])
		defer h.Close()
		queued := hashEach(h, context.Background(), paths[1:9])
		waitFor(t, func() bool { return len(h.bat) == cap(h.bat) })
		ctx, cancel := context.WithCancel(context.Background())
		refused := hashEach(h, ctx, paths[9:10])
		waitFor(t, func() bool { return len(openOf(t, paths[9:10])) == 1 }) // opened, now in submit
		cancel()
		if err := wait(refused); !errors.Is(err, context.Canceled) {
			t.Fatalf("refused caller: %v", err)
		}
		if open := openOf(t, paths[9:10]); len(open) != 0 {
			t.Fatalf("refused job left its file open")
		}
		close(eng.release)
		if err := errors.Join(wait(first), wait(queued)); err != nil {
			t.Fatal(err)
		}
		noneOpen(t)
	})
	t.Run("closed", func(t *testing.T) {
		h, eng, first := blockedEngine(t, paths[0])
		queued := hashEach(h, context.Background(), paths[1:5])
		waitFor(t, func() bool { return len(h.bat) == 4 })
		closed := make(chan struct{})
		go func() {
			h.Close()
			close(closed)
		}()
		waitFor(t, func() bool { return h.base.Err() != nil })
		close(eng.release)
		<-closed
		for _, errc := range []<-chan error{first, queued} {
			for range cap(errc) {
				if err := <-errc; !errors.Is(err, ErrClosed) {
					t.Fatalf("caller: got %v, want ErrClosed", err)
				}
			}
		}
		noneOpen(t)
	})
}

// blockedEngine starts a Hasher whose one engine holds path, its first
// stream, until eng.release is closed; first reports that hash's end.
func blockedEngine(t *testing.T, path string) (*Hasher, *serialEngine, <-chan error) {
	t.Helper()
	eng := &serialEngine{lanes: 4, release: make(chan struct{})}
	h := New(Policy{InlineMax: -1, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1}, nil)
	first := hashEach(h, context.Background(), []string{path})
	waitFor(t, func() bool { return sum(eng.taken()) == 1 })
	return h, eng, first
}

// hashEach hashes each path on a goroutine of its own; the channel gets
// each one's error.
func hashEach(h *Hasher, ctx context.Context, paths []string) <-chan error {
	errc := make(chan error, len(paths))
	for _, p := range paths {
		go func() {
			_, err := h.Hash(ctx, p, key.SHA256)
			errc <- err
		}()
	}
	return errc
}

// wait joins the errors of the hashes behind errc.
func wait(errc <-chan error) error {
	var errs []error
	for range cap(errc) {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
	}
}

// Two files hashed together by the multi-buffer pool: the engine drains
// them into its finisher, which hands the shorter one back one block into
// its two padding blocks. Its digest must still be right.
func TestPoolFinisherHalfPaddedFile(t *testing.T) {
	paths, sums := patternFiles(t, 16384*64+36, 16383*64+60)
	h := New(Policy{InlineMax: -1, Workers: 1, Batch: MultiBuffer, BatchMinStreams: 1}, nil)
	defer h.Close()
	for range 20 {
		if hashAll(t, h, paths, sums); t.Failed() {
			return
		}
	}
}
