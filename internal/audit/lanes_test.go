package audit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/mbsha256"
	"github.com/annexd/annexd/internal/loopfs"
)

// laneKernels runs f with lanes of each multi-lane kernel this CPU runs
// (avx512x16 and shanix2 here; GODEBUG=cpu.avx512f=off leaves shanix2).
func laneKernels(t *testing.T, f func(t *testing.T, l *mbsha256.Lanes)) {
	n := 0
	for _, name := range mbsha256.Kernels() {
		e, err := mbsha256.NewKernel(name)
		if err != nil {
			t.Fatal(err)
		}
		l, err := mbsha256.NewLanes(e)
		if err != nil {
			continue // generic
		}
		n++
		t.Run(name, func(t *testing.T) {
			defer l.Close()
			f(t, l)
		})
	}
	if n == 0 {
		t.Skip("no multi-lane kernel on this CPU")
	}
}

// laneReader returns a reader whose SHA-256 files go to l, reading what a
// full-speed run's reader would at a time.
func laneReader(l *mbsha256.Lanes) *reader {
	r := newLaneReader(l, chunkFor(laneReaders(l.Width()), laneBufs))
	r.sha256 = true
	return r
}

// countLanes counts the files read in the lanes until the test ends.
func countLanes(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	testHookLanes = func(string) { n.Add(1) }
	t.Cleanup(func() { testHookLanes = nil })
	return &n
}

// More readers than lanes, each reading files of its own at once, sizes
// around the read size, hash in the lanes: every digest is the file's.
func TestReaderLanesDigests(t *testing.T) {
	dir := t.TempDir()
	sizes := []int{readSize + 1, readSize + 64, 2 * readSize, 2*readSize + 55, 3*readSize + 4097}
	var paths []string
	var want [][32]byte
	for i := range 24 {
		p := filepath.Join(dir, fmt.Sprint(i))
		want = append(want, sha256.Sum256(writeRandom(t, p, sizes[i%len(sizes)])))
		paths = append(paths, p)
	}
	laneKernels(t, func(t *testing.T, l *mbsha256.Lanes) {
		used := countLanes(t)
		readers := laneReaders(l.Width()) + 3 // some wait for a lane
		var wg sync.WaitGroup
		for w := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := laneReader(l)
				for i := w; i < len(paths); i += readers {
					got := r.read(t.Context(), paths[i], lstat(t, paths[i]), sha256.New(), false)
					if got.Err != nil || string(got.Digest) != string(want[i][:]) || got.Source != FromDevice {
						t.Errorf("%s (%d bytes): %x, %v, %v; want %x from the device", paths[i], sizes[i%len(sizes)],
							got.Digest, got.Err, got.Source, want[i])
					}
				}
			}()
		}
		wg.Wait()
		if used.Load() != int64(len(paths)) {
			t.Errorf("%d files of %d read in the lanes", used.Load(), len(paths))
		}
	})
}

// In the lanes too, a file is read from the device: a byte changed under
// the cached pages is read as it is on disk, beside other files read at
// once.
func TestReaderLanesReadTheDevice(t *testing.T) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: max(loopfs.MinSize[loopfs.Ext4], 64<<20)})
	const size = 3<<20 + 123
	var paths []string
	for i := range 4 {
		p := fs.Path(fmt.Sprint(i))
		writeRandom(t, p, size)
		evict(t, p)
		readPrefix(t, p, size)
		paths = append(paths, p)
	}
	fs.FlipByteUnderCache(t, paths[0], 2<<20+1000)
	disk := sha256.Sum256(readDirect(t, paths[0]))
	laneKernels(t, func(t *testing.T, l *mbsha256.Lanes) {
		used := countLanes(t)
		var wg sync.WaitGroup
		for i, p := range paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := laneReader(l).read(t.Context(), p, lstat(t, p), sha256.New(), false)
				if got.Err != nil || got.Source != FromDevice {
					t.Errorf("%s: %v, %v", p, got.Err, got.Source)
				}
				if i == 0 && string(got.Digest) != string(disk[:]) {
					t.Errorf("the digest is not that of the bytes on disk: the page cache answered")
				}
			}()
		}
		wg.Wait()
		if used.Load() != int64(len(paths)) {
			t.Errorf("%d files of %d read in the lanes", used.Load(), len(paths))
		}
	})
}

// A file that grows or shrinks while the lanes hash it is reported
// changed (Modified), never rot, and the stream it left does not stop the
// lanes: the next file read is hashed right.
func TestReaderLanesChangedWhileRead(t *testing.T) {
	dir := t.TempDir()
	p, next := filepath.Join(dir, "f"), filepath.Join(dir, "next")
	nextSum := sha256.Sum256(writeRandom(t, next, 2*readSize+7))
	laneKernels(t, func(t *testing.T, l *mbsha256.Lanes) {
		for _, grow := range []bool{true, false} {
			writeRandom(t, p, 3*readSize+100)
			fi := lstat(t, p)
			testHookDirect = func(path string, off int64) {
				if path == p && off == readSize {
					growOrCut(t, path, grow)
				}
			}
			r := laneReader(l)
			got := r.read(t.Context(), p, fi, sha256.New(), false)
			testHookDirect = nil
			wantModified(t, got, fi, grow)
			if n := r.read(t.Context(), next, lstat(t, next), sha256.New(), false); n.Err != nil || string(n.Digest) != string(nextSum[:]) {
				t.Errorf("the file after: %x, %v", n.Digest, n.Err)
			}
		}
	})
}

// A full-speed run with a hasher that has lanes reads the large SHA-256
// files in them: the files that did not change are OK, and the one whose
// record says other bytes is found corrupt.
func TestFullSpeedRunInLanes(t *testing.T) {
	kernels := mbsha256.Kernels()
	if len(kernels) < 2 {
		t.Skip("no multi-lane kernel on this CPU")
	}
	root := t.TempDir()
	for i := range 12 {
		writeRandom(t, filepath.Join(root, fmt.Sprint(i)), readSize+1+i*100_000)
	}
	writeRandom(t, filepath.Join(root, "small"), 1000)
	p := hasher.DefaultPolicy()
	p.BatchKernel = kernels[0]
	e := newEnvPolicy(t, root, envOptions(), p)
	rotten := e.path("5")
	e.rot(rotten)
	used := countLanes(t)
	s := e.run(StartOptions{FullSpeed: true})
	if s.StoppedBy != StopDone || s.Found(OK) != 12 || s.Found(Corrupt) != 1 {
		t.Fatalf("run: %+v\nlog:\n%s", s, e.log)
	}
	if pr, ok := e.problems()[rotten]; !ok || pr.Class != Corrupt {
		t.Errorf("problems: %+v", e.problems())
	}
	if used.Load() < 12 {
		t.Errorf("%d reads in the lanes; want the 12 large files' at least", used.Load())
	}
}

// A read cancelled half-way (the run stopped) gives its stream up: the
// reader's next file, and the other readers' at once, are hashed right.
func TestReaderLanesCancelled(t *testing.T) {
	dir := t.TempDir()
	p, next := filepath.Join(dir, "f"), filepath.Join(dir, "next")
	writeRandom(t, p, 4*readSize)
	nextSum := sha256.Sum256(writeRandom(t, next, 2*readSize+7))
	laneKernels(t, func(t *testing.T, l *mbsha256.Lanes) {
		ctx, cancel := context.WithCancel(t.Context())
		testHookDirect = func(path string, off int64) {
			if path == p && off == 2*readSize {
				cancel()
			}
		}
		t.Cleanup(func() { testHookDirect = nil })
		r := laneReader(l)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // another reader beside it, in the lanes at the same time
			defer wg.Done()
			if n := laneReader(l).read(t.Context(), next, lstat(t, next), sha256.New(), false); n.Err != nil || string(n.Digest) != string(nextSum[:]) {
				t.Errorf("the file beside: %x, %v", n.Digest, n.Err)
			}
		}()
		if got := r.read(ctx, p, lstat(t, p), sha256.New(), false); !errors.Is(got.Err, context.Canceled) || got.Digest != nil {
			t.Errorf("cancelled: %x, %v", got.Digest, got.Err)
		}
		wg.Wait()
		if n := r.read(t.Context(), next, lstat(t, next), sha256.New(), false); n.Err != nil || string(n.Digest) != string(nextSum[:]) {
			t.Errorf("the file after: %x, %v", n.Digest, n.Err)
		}
	})
}
