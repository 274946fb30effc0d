package hasher

import (
	"io/fs"
	"time"

	"github.com/annexd/annexd/internal/directio"
	"github.com/annexd/annexd/internal/durable"
)

// A small file none of whose pages is in the page cache is read with
// O_DIRECT: the disk's data goes straight into the caller's buffer, with
// no copy out of the page cache and no pages that an indexer, reading a
// tree once, would only push other data out of memory with. On the
// benchmark machine's virtual disk, in 10 alternated cold first scans of
// the corpus, it took 0.91× the wall time and 0.88× the CPU time, and a
// warm scan did not change (BENCHMARKS.md).
// A direct read sees what a buffered one would: the kernel writes back a
// range's dirty pages before reading it directly. Whatever does not fit
// the rules (a buffer or size the device cannot read directly, a file
// system without O_DIRECT, a read that ends anywhere but at the recorded
// size) is read the usual way, from the start. Package directio does the
// direct reading, for the audit too.

// testHookDirect, set only by tests, runs after each direct read with
// its result, which it may replace.
var testHookDirect func(path string, n int, err error) (int, error)

// readCold reads f's before.Size bytes into the start of data with
// O_DIRECT when goesDirect says so (package directio), and reports whether
// it did; when it did not, f is open as before, at offset 0, for a
// buffered read (an error says it could not be made so). A device that
// wants a larger alignment than data's capacity holds is read the usual
// way. After a direct read O_DIRECT stays set: the caller only syncs,
// checks and closes f.
func (f *stableFile) readCold(o readOpts, data []byte) (bool, error) {
	size := f.before.Size
	if !directio.Aligned(data) || size > int64(cap(data)) || !f.goesDirect(o) {
		return false, nil // the allocator aligns these sizes; TestColdSmallFilesReadDirect checks it
	}
	df, err := directio.Open(f.fd, f.before.Dev)
	if err != nil {
		return false, nil
	}
	n, err := df.ReadAt(data[:cap(data)], 0, int(size))
	if testHookRead != nil {
		testHookRead(f.path)
	}
	if testHookDirect != nil {
		n, err = testHookDirect(f.path, n, err)
	}
	if err == nil && int64(n) == size {
		return true, nil // grown since its stat, it fails the check after reading
	}
	if err := df.Close(); err != nil {
		return false, &fs.PathError{Op: "fcntl", Path: f.path, Err: err}
	}
	return false, nil // pread left the offset at 0
}

// goesDirect reports whether f is to be read with O_DIRECT: none of it is
// in the page cache, its ctime is older than the data window (a file
// written lately is most likely cached, and gets no look), and its device
// has not refused O_DIRECT. The look is the one makeDurable would take.
func (f *stableFile) goesDirect(o readOpts) bool {
	switch {
	case f.before.Size <= 0:
		return false
	case o.syncWindow >= 0 && durable.MayHoldDirtyData(f.before.CtimeNs, time.Now().UnixNano(), o.window()):
		return false
	}
	if directio.Refused(f.before.Dev) {
		return false
	}
	cached, known := f.cachedPages()
	return known && cached == 0
}
