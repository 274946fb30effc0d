package hasher

import (
	"context"
	"errors"
	"hash"
	"io/fs"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
)

// DefaultBufferSize is the read size used when a Policy does not set one.
// BenchmarkBufferSize measures the alternatives.
const DefaultBufferSize = 1 << 20

// Result is a file's digest and the identity the file had both before and
// after it was read.
type Result struct {
	Digest []byte
	Info   fsstat.FileInfo
}

// HashFile hashes the regular file at path with backend b on the caller's
// goroutine, using crypto/sha256 for SHA-256; a file of DefaultReadAhead
// bytes or more is read by a second goroutine meanwhile, which ends before
// HashFile returns. A file that may hold data not yet on disk is synced
// (fdatasync) before its identity is checked again, within
// durable.DataWindow. It returns an error wrapping
// ErrNotRegular for anything but a regular file, a *ChangedError when the
// file changed while it was read, ctx.Err() when ctx ends first, and the
// *fs.PathError of a failed lstat, open or read otherwise.
func HashFile(ctx context.Context, path string, b key.Backend) (Result, error) {
	return hashFile(ctx, path, b, nil, readOpts{})
}

// HashFile is HashFile with p's read options (SHA256, BufferSize,
// ReadAhead, SyncWindow): what a Hasher following p does with a file it
// hashes inline. Calibration measures it.
func (p Policy) HashFile(ctx context.Context, path string, b key.Backend) (Result, error) {
	return hashFile(ctx, path, b, nil, p.readOpts())
}

// testHookAfterRead, set only by tests, runs between reading a file and
// checking its identity again.
var testHookAfterRead func(path string)

// testHookRead, set only by tests, runs after every read(2) of a file.
var testHookRead func(path string)

// readOpts are the knobs a Policy sets for in-process hashing.
type readOpts struct {
	impl      SHA256Impl
	bufSize   int
	readAhead int64 // files of at least this size are read ahead; 0: default, <0: never
	// syncWindow: files whose ctime is younger have their data synced before
	// the check after reading; 0: durable.DataWindow(), <0: never.
	syncWindow time.Duration
	noEpochs   bool // fdatasync every file that needs it (benchmarks)
}

// DefaultReadAhead is the size from which a file is read by a second
// goroutine while the first hashes: reading from the page cache costs about
// a fifth of SHA-NI hashing, and overlapping the two is what lets one large
// file hash faster than a single-threaded tool.
const DefaultReadAhead = 8 << 20

// readOpts are the read options p sets; its zero fields keep theirs.
func (p Policy) readOpts() readOpts {
	return readOpts{impl: p.SHA256, bufSize: p.BufferSize, readAhead: p.ReadAhead, syncWindow: p.SyncWindow}
}

func (o readOpts) readsAhead(size int64) bool {
	switch {
	case o.readAhead < 0:
		return false
	case o.readAhead == 0:
		return size >= DefaultReadAhead
	}
	return size >= o.readAhead
}

func (o readOpts) size() int {
	if o.bufSize <= 0 {
		return DefaultBufferSize
	}
	return o.bufSize
}

// hashFile is HashFile with an optional lstat already taken by the caller
// (the router) and the policy's read options.
func hashFile(ctx context.Context, path string, b key.Backend, before *fsstat.FileInfo, o readOpts) (Result, error) {
	h, err := newHash(b, o.impl)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	f, err := openStable(path, before)
	if err != nil {
		return Result{}, err
	}
	defer f.close()
	return hashOpen(ctx, f, h, o)
}

// hashOpenWith is hashOpen with a new hash of backend b.
func hashOpenWith(ctx context.Context, f *stableFile, b key.Backend, o readOpts) (Result, error) {
	h, err := newHash(b, o.impl)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return hashOpen(ctx, f, h, o)
}

// hashOpen is hashFile's work once the file is open; the caller closes f.
func hashOpen(ctx context.Context, f *stableFile, h hash.Hash, o readOpts) (Result, error) {
	if f.before.Size > int64(o.size()) {
		// A larger kernel read-ahead for files read in several chunks.
		_ = unix.Fadvise(f.fd, 0, 0, unix.FADV_SEQUENTIAL)
	}
	read := f.readInto
	if o.readsAhead(f.before.Size) {
		read = f.readAhead
	}
	if err := read(ctx, h, o.size()); err != nil {
		return Result{}, err
	}
	if err := f.makeDurable(o); err != nil {
		return Result{}, err
	}
	if testHookAfterRead != nil {
		testHookAfterRead(f.path)
	}
	if err := f.verify(); err != nil {
		return Result{}, err
	}
	return Result{Digest: h.Sum(nil), Info: f.before}, nil
}

// stableFile is a regular file opened after an lstat, with the fstat of the
// descriptor matching that lstat (openStable), or opened first and
// identified by that fstat alone (Open); before is the identity verify
// checks after reading.
type stableFile struct {
	path   string
	fd     int
	before fsstat.FileInfo
	cache  cacheSeen   // what cachestat(2) told of the file before reading, if asked
	pages  uint64      // with cache: how many of its pages were in the page cache
	cold   *coldStream // its direct reads ahead of a batch engine (coldstream.go)
}

// regularStat returns before, or an lstat of path when before is nil, and
// refuses what is not a regular file.
func regularStat(path string, before *fsstat.FileInfo) (fi fsstat.FileInfo, err error) {
	if before != nil {
		fi = *before
	} else if fi, err = fsstat.Lstat(path); err != nil {
		return fi, err
	}
	if !fi.IsRegular() {
		return fi, notRegular(path, fi)
	}
	return fi, nil
}

// openStable lstats path (unless before is given), refuses non-regular files
// without opening them, opens with O_NOFOLLOW|O_NONBLOCK so that a file swapped
// for a FIFO or symlink in between can neither block nor be followed, and
// checks that the descriptor is the file the lstat saw.
func openStable(path string, before *fsstat.FileInfo) (*stableFile, error) {
	fi, err := regularStat(path, before)
	if err != nil {
		return nil, err
	}
	fd, now, err := openFstat(path)
	if err == unix.ELOOP {
		// A symlink replaced the file after the lstat.
		return nil, &ChangedError{Path: path, Before: fi, After: fsstat.FileInfo{Mode: fs.ModeSymlink}}
	}
	if err != nil {
		return nil, err
	}
	f := &stableFile{path: path, fd: fd, before: fi}
	if !now.IsRegular() || !now.Same(fi) {
		f.close()
		return nil, &ChangedError{Path: path, Before: fi, After: now}
	}
	return f, nil
}

// openFstat opens path with openNoFollow and fstats the descriptor. A
// symlink at path is unix.ELOOP, as it is; other failures are
// *fs.PathError, with nothing left open.
func openFstat(path string) (int, fsstat.FileInfo, error) {
	return openFstatAt(unix.AT_FDCWD, path, path)
}

// openFstatAt is openFstat for name in the directory dirfd, which path
// names (errors name path).
func openFstatAt(dirfd int, name, path string) (int, fsstat.FileInfo, error) {
	fd, err := openNoFollowAt(dirfd, name)
	if err == unix.ELOOP {
		return -1, fsstat.FileInfo{}, err
	}
	if err != nil {
		return -1, fsstat.FileInfo{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	fi, err := fsstat.Fstat(fd)
	if err != nil {
		unix.Close(fd)
		return -1, fsstat.FileInfo{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	return fd, fi, nil
}

func openNoFollowAt(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func (f *stableFile) close() {
	if f.cold != nil {
		f.cold.close()
	}
	unix.Close(f.fd)
}

// readInto streams exactly before.Size bytes into h, checking ctx between
// chunks. Reading stops at the recorded size: growth shows up in verify's
// lstat, an early end of file is reported here.
func (f *stableFile) readInto(ctx context.Context, h hash.Hash, bufSize int) error {
	want := f.before.Size
	if want == 0 {
		return nil
	}
	bp := getBuf(bufSize)
	defer putBuf(bp)
	buf := *bp
	var got int64
	for got < want {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := buf
		if rest := want - got; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		n, err := f.read(chunk)
		if err != nil {
			return err
		}
		h.Write(chunk[:n])
		got += int64(n)
	}
	return nil
}

// readAhead is readInto with reading and hashing on two goroutines: a
// reader fills buffers that the caller hashes, three buffers in rotation.
func (f *stableFile) readAhead(ctx context.Context, h hash.Hash, bufSize int) error {
	const nbuf = 3
	type chunk struct {
		b *[]byte
		n int
	}
	free := make(chan *[]byte, nbuf)
	full := make(chan chunk, nbuf)
	for range nbuf {
		free <- getBuf(bufSize)
	}
	var readErr error // written by the reader before it closes full
	go func() {
		defer close(full)
		for got, want := int64(0), f.before.Size; got < want; {
			b := <-free
			if readErr = ctx.Err(); readErr != nil {
				free <- b
				return
			}
			p := *b
			if rest := want - got; rest < int64(len(p)) {
				p = p[:rest]
			}
			n, err := f.read(p)
			if err != nil {
				readErr = err
				free <- b
				return
			}
			full <- chunk{b, n}
			got += int64(n)
		}
	}()
	for c := range full {
		h.Write((*c.b)[:c.n])
		free <- c.b
	}
	for range nbuf {
		putBuf(<-free)
	}
	return readErr
}

// read is one read(2) into p, retried on EINTR; the end of file before the
// recorded size is a *ChangedError.
func (f *stableFile) read(p []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, p)
		if testHookRead != nil {
			testHookRead(f.path)
		}
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: f.path, Err: err}
		case n == 0 && len(p) > 0:
			return 0, f.changed()
		}
		return n, nil
	}
}

// verify compares the identity of the path after reading with the one
// before. One lstat covers the descriptor too: openStable tied the
// descriptor to before's (dev, ino), an inode number is not reused while a
// descriptor holds the inode, so a path with before's identity names the
// descriptor's inode, unchanged in size, mtime and ctime. A rename over
// the path, or a write, shows as a different identity.
func (f *stableFile) verify() error {
	now, err := fsstat.Lstat(f.path)
	if err != nil {
		// Gone or unreachable now: the content read may no longer be there.
		return &ChangedError{Path: f.path, Before: f.before}
	}
	if !now.Same(f.before) || !now.IsRegular() {
		return &ChangedError{Path: f.path, Before: f.before, After: now}
	}
	return nil
}

// changed builds the ChangedError for a short read.
func (f *stableFile) changed() error {
	now, _ := fsstat.Fstat(f.fd)
	return &ChangedError{Path: f.path, Before: f.before, After: now}
}

// Buffers are pooled per size so a Policy may choose its own.
var bufPools sync.Map // int → *sync.Pool of *[]byte

func getBuf(size int) *[]byte {
	p, ok := bufPools.Load(size)
	if !ok {
		p, _ = bufPools.LoadOrStore(size, &sync.Pool{New: func() any {
			b := make([]byte, size)
			return &b
		}})
	}
	return p.(*sync.Pool).Get().(*[]byte)
}

func putBuf(b *[]byte) {
	if p, ok := bufPools.Load(len(*b)); ok {
		p.(*sync.Pool).Put(b)
	}
}

// File is a regular file that Open opened for HashOpen, with the identity
// of its descriptor. It lets a caller that knows a path names a regular
// file (a directory listing said so) skip the lstat before the open: the
// descriptor's fstat is the identity checked after reading. A File has one
// owner; it is not safe for concurrent use.
type File struct {
	f    *stableFile
	path string
	info fsstat.FileInfo
}

// errFileTaken is HashOpen's answer for a File already hashed or closed.
var errFileTaken = errors.New("hasher: file already hashed or closed")

// Open opens path as the hasher opens every file, read-only with
// O_NOFOLLOW|O_NONBLOCK (a symlink is not followed and a FIFO cannot
// block), and fstats the descriptor. Anything but a regular file is closed
// again and refused with an error wrapping ErrNotRegular. Opening a device
// node may have effects of its own, so Open is for paths that a directory
// listing says are regular files.
func Open(path string) (*File, error) { return OpenAt(unix.AT_FDCWD, path, path) }

// OpenAt is Open for the file name in the directory open as dirfd (an
// O_PATH descriptor will do) that path names, and saves the lookup of
// every directory on the path. The identity checked after reading is
// still the lstat of path, which ties the descriptor to path whatever
// directory dirfd names by then (renamed, say).
func OpenAt(dirfd int, name, path string) (*File, error) {
	fd, fi, err := openFstatAt(dirfd, name, path)
	if err == unix.ELOOP {
		return nil, notRegular(path, fsstat.FileInfo{Mode: fs.ModeSymlink})
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsRegular() {
		unix.Close(fd)
		return nil, notRegular(path, fi)
	}
	return &File{f: &stableFile{path: path, fd: fd, before: fi}, path: path, info: fi}, nil
}

// Info is the identity of f's descriptor when it was opened.
func (f *File) Info() fsstat.FileInfo { return f.info }

// Path is the path f was opened by.
func (f *File) Path() string { return f.path }

// Close closes f unless HashOpen took it; it may be called more than once.
func (f *File) Close() {
	if sf := f.take(); sf != nil {
		sf.close()
	}
}

// take hands f's open file to its new owner, once.
func (f *File) take() *stableFile {
	sf := f.f
	f.f = nil
	return sf
}
