// Package walker walks a directory tree in parallel and delivers every
// regular file with its lstat identity, never following symlinks and never
// opening anything but directories.
//
// # Basics
//
// [Walk] reads directories on Options.Workers goroutines. Entry types come
// from the directory itself (d_type), so directories, symlinks, FIFOs,
// sockets and devices cost no stat call; each regular file costs one
// fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW), unless Options.NoStat leaves
// that to the caller. Directories are opened with
// O_NOFOLLOW|O_DIRECTORY, so a directory swapped for a symlink mid-walk is
// not followed. Non-regular files are skipped without being opened, so a
// FIFO in the tree cannot block the walk.
//
// The callback fn runs on the goroutine that called Walk, one call at a time
// (never concurrently), so it needs no locking. Entries arrive in no
// particular order: files of one directory arrive together in batches, but
// directories are interleaved.
//
// # Errors
//
// A directory that cannot be opened or read, or a file that cannot be
// stat'ed, is reported to Options.OnError with its path and the walk goes
// on; such errors never end the walk. Files and directories that vanish
// while the walk runs (ENOENT) are skipped silently: they are gone, which
// the caller learns by not seeing them. Walk returns an error only when the
// root cannot be walked, when fn returns an error (returned as is), or when
// ctx is cancelled (ctx.Err()).
//
// # Memory
//
// Memory does not grow with the size of the tree: directories are read in
// chunks, at most a few batches of entries are in flight, and the queue of
// directories waiting to be read is capped; beyond the cap a worker walks
// the subdirectory itself, depth first. What remains is proportional to the
// depth of the tree and to the number of subdirectories of one directory.
package walker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
)

// ErrRoot wraps the error when the root itself cannot be walked.
var ErrRoot = errors.New("walker: cannot walk root")

// Entry is one regular file found by the walk.
type Entry struct {
	Path string          // root joined with the root-relative path, bytes as on disk
	Info fsstat.FileInfo // from lstat, or the mode alone (Options.NoStat); Info.IsRegular() is always true
	// Stated says Info is an lstat; false only for a file Options.NoStat
	// left unstat'ed.
	Stated bool
}

// Matcher tells which paths, relative to Options.IgnoreRoot, are left out
// (internal/ignore's gitignore-style patterns, say).
type Matcher interface {
	Match(rel string, isDir bool) bool
}

// matchNothing is the Matcher of a walk without Options.Ignore.
type matchNothing struct{}

func (matchNothing) Match(string, bool) bool { return false }

// Options tune a walk. The zero value works.
type Options struct {
	// Workers is the number of goroutines reading directories; 0 means 2.
	Workers int
	// Ignore excludes paths; excluded directories are not entered. Nil
	// excludes nothing. Patterns are matched relative to IgnoreRoot.
	Ignore Matcher
	// IgnoreRoot is the directory Ignore's patterns are relative to: the
	// watched root when walking one of its subdirectories (a Rescan of
	// root/a/b walks root/a/b with IgnoreRoot root). Empty means root.
	// It must be root or contain it.
	IgnoreRoot string
	// OneFileSystem skips directories on a different device than root
	// (mount points), like find -xdev.
	OneFileSystem bool
	// OnError is called for each path that could not be read; the walk goes
	// on. It may be called concurrently from several workers. Nil drops
	// such errors.
	OnError func(path string, err error)
	// NoStat delivers the regular files whose type their directory entry
	// gives without a stat: Info then holds only the mode. For a caller
	// that opens every file anyway and takes its identity from the
	// descriptor (a first scan, see hasher.Open). Entries of unknown type
	// are still stat'ed.
	NoStat bool
	// BeforeDir, when set, is called before each directory is opened and
	// read, the root included: a caller may wait there until the
	// directory is watched (watcher.Watcher.WaitWatched). It gets the
	// walk's context, and runs on a worker (for the root, on the goroutine
	// that called Walk). An error ends the walk, which returns it.
	BeforeDir func(ctx context.Context, dir string) error

	// openDir opens a directory; a test seam, nil means openDirAt.
	openDir func(path string) (int, error)
}

const (
	defaultWorkers = 2
	batchSize      = 256      // entries handed to fn at once
	readBuf        = 32 << 10 // bytes of directory entries read at once, as glibc's readdir
	queueCap       = 4096     // directories queued before workers recurse inline
)

// Walk walks the tree at root and calls fn for every regular file under it,
// serially on the calling goroutine. See the package documentation for
// ordering, errors and memory.
func Walk(ctx context.Context, root string, opts Options, fn func(Entry) error) error {
	return walkBatches(ctx, root, opts, true, func(batch []Entry) error {
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// WalkBatches is Walk handing over up to 256 entries at a time, all from
// one directory, so a caller can look them up in one store transaction. fn
// owns the slice; it is never reused.
func WalkBatches(ctx context.Context, root string, opts Options, fn func([]Entry) error) error {
	return walkBatches(ctx, root, opts, false, fn)
}

// walkBatches is WalkBatches; with recycle, a batch is reused once fn
// returns, which Walk's fn, handed entries by value, allows.
func walkBatches(ctx context.Context, root string, opts Options, recycle bool, fn func([]Entry) error) error {
	if opts.Workers <= 0 {
		opts.Workers = defaultWorkers
	}
	if opts.openDir == nil {
		opts.openDir = openDirAt
	}
	if opts.Ignore == nil {
		opts.Ignore = matchNothing{}
	}
	root = filepath.Clean(root)
	base, err := ignoreBase(root, opts.IgnoreRoot)
	if err != nil {
		return err
	}
	if opts.BeforeDir != nil {
		// Before the root is opened: a root replaced meanwhile is read as
		// it is once the caller lets it be.
		if err := opts.BeforeDir(ctx, root); err != nil {
			return err
		}
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrRoot, root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("%w %s: %w", ErrRoot, root, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &walk{
		ctx:     ctx,
		cancel:  cancel,
		opts:    opts,
		rootDev: uint64(st.Dev),
		batches: make(chan []Entry, 2*opts.Workers),
	}
	w.cond = sync.NewCond(&w.mu)
	w.base = base
	w.recycle = recycle
	w.bufs.New = func() any { b := make([]byte, readBuf); return &b }
	w.root, w.rootFd = root, fd
	w.queue = append(w.queue, dir{path: root, rel: base})
	w.pending = 1

	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.work()
		}()
	}
	go func() {
		wg.Wait()
		close(w.batches)
	}()
	// Wake workers blocked on the queue when the walk is cancelled.
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()

	var fnErr error
	for batch := range w.batches {
		if fnErr != nil || ctx.Err() != nil {
			continue // drain so workers can finish
		}
		if err := fn(batch); err != nil {
			fnErr = err
			cancel()
		}
		if recycle {
			w.reuse(batch)
		}
	}
	w.rootOnce.Do(func() { unix.Close(w.rootFd) })
	if fnErr != nil {
		return fnErr
	}
	if err := w.beforeErr(); err != nil {
		return err
	}
	return ctx.Err()
}

// ignoreBase is root's path relative to ignoreRoot.
func ignoreBase(root, ignoreRoot string) (string, error) {
	if ignoreRoot == "" {
		return "", nil
	}
	ignoreRoot = filepath.Clean(ignoreRoot)
	switch {
	case root == ignoreRoot:
		return "", nil
	case ignoreRoot == "/":
		return root[1:], nil
	case strings.HasPrefix(root, ignoreRoot+"/"):
		return root[len(ignoreRoot)+1:], nil
	}
	return "", fmt.Errorf("%w %s: not inside IgnoreRoot %s", ErrRoot, root, ignoreRoot)
}

type dir struct {
	path string // root-joined path
	rel  string // root-relative path, "" for the root
}

type walk struct {
	ctx      context.Context
	opts     Options
	rootDev  uint64
	root     string
	base     string    // root relative to IgnoreRoot
	bufs     sync.Pool // *[]byte of readBuf bytes for getdents
	recycle  bool      // batches go back to free once fn is done with them
	free     sync.Pool // *[]Entry
	rootFd   int
	rootOnce sync.Once // the root is read once, or closed unread
	batches  chan []Entry

	cancel   context.CancelFunc
	beforeMu sync.Mutex
	before   error // the first error of Options.BeforeDir

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []dir // LIFO: depth first keeps the queue short
	pending int   // directories queued or being read
}

// work takes directories off the queue until the walk is done.
func (w *walk) work() {
	for {
		d, ok := w.next()
		if !ok {
			return
		}
		w.walkDir(d)
		w.mu.Lock()
		w.pending--
		if w.pending == 0 {
			w.cond.Broadcast()
		}
		w.mu.Unlock()
	}
}

func (w *walk) next() (dir, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && w.pending > 0 && w.ctx.Err() == nil {
		w.cond.Wait()
	}
	if len(w.queue) == 0 || w.ctx.Err() != nil {
		return dir{}, false
	}
	d := w.queue[len(w.queue)-1]
	w.queue = w.queue[:len(w.queue)-1]
	return d, true
}

// push queues a subdirectory, or reports false when the queue is full.
func (w *walk) push(d dir) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) >= queueCap {
		return false
	}
	w.queue = append(w.queue, d)
	w.pending++
	w.cond.Signal()
	return true
}

func (w *walk) report(path string, err error) {
	if w.opts.OnError != nil {
		w.opts.OnError(path, err)
	}
}

// walkDir opens and reads one directory; the root is already open.
func (w *walk) walkDir(d dir) {
	if d.path == w.root { // BeforeDir was called before it was opened
		w.rootOnce.Do(func() { w.readDir(d, w.rootFd) })
		return
	}
	if !w.beforeDir(d.path) {
		return // the walk ends
	}
	fd, err := w.opts.openDir(d.path)
	if err != nil {
		// Gone, or no longer a directory (e.g. replaced by a symlink): skip.
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			w.report(d.path, err)
		}
		return
	}
	if w.opts.OneFileSystem {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || uint64(st.Dev) != w.rootDev {
			unix.Close(fd)
			return
		}
	}
	w.readDir(d, fd)
}

// beforeDir calls Options.BeforeDir for path and reports whether to read
// it; an error ends the walk.
func (w *walk) beforeDir(path string) bool {
	if w.opts.BeforeDir == nil {
		return true
	}
	err := w.opts.BeforeDir(w.ctx, path)
	if err == nil {
		return true
	}
	w.beforeMu.Lock()
	if w.before == nil && w.ctx.Err() == nil {
		w.before = err
	}
	w.beforeMu.Unlock()
	w.cancel()
	return false
}

// beforeErr is the error of Options.BeforeDir that ended the walk, if any.
func (w *walk) beforeErr() error {
	w.beforeMu.Lock()
	defer w.beforeMu.Unlock()
	return w.before
}

// readDir reads the open directory fd, sends its files and queues its
// subdirectories; those that do not fit the queue are walked here, after fd
// is closed, so a worker holds one directory open at a time.
func (w *walk) readDir(d dir, fd int) {
	buf := w.bufs.Get().(*[]byte)
	var inline []dir
	var batch []Entry // made at the first file: many directories hold none
	for w.ctx.Err() == nil {
		n, err := getdents(fd, *buf)
		if err != nil {
			w.report(d.path, &os.PathError{Op: "getdents", Path: d.path, Err: err})
			break
		}
		if n == 0 {
			break
		}
		for b := (*buf)[:n]; len(b) > 0; {
			name, typ, rest, ok := nextDirent(b)
			if !ok {
				break
			}
			b = rest
			if sub, ok := w.entry(d, fd, name, typ, &batch); ok && !w.push(sub) {
				inline = append(inline, sub)
			}
			if len(batch) == batchSize {
				w.send(batch)
				batch = nil
			}
		}
	}
	w.bufs.Put(buf)
	unix.Close(fd)
	if len(batch) > 0 {
		w.send(batch)
	}
	for _, sub := range inline {
		if w.ctx.Err() != nil {
			return
		}
		w.walkDir(sub)
	}
}

// newBatch returns an empty batch, a reused one when there is one.
func (w *walk) newBatch() []Entry {
	if b, ok := w.free.Get().(*[]Entry); ok {
		return (*b)[:0]
	}
	return make([]Entry, 0, batchSize)
}

// reuse keeps batch for a later newBatch when the walk recycles.
func (w *walk) reuse(batch []Entry) {
	clear(batch) // drop the paths
	batch = batch[:0]
	w.free.Put(&batch)
}

func (w *walk) send(batch []Entry) {
	select {
	case w.batches <- batch:
	case <-w.ctx.Done():
	}
}

// entry handles one directory entry, its name NUL-terminated: a regular
// file is stat'ed (unless Options.NoStat leaves that to the caller) and
// added to batch; a directory is returned for walking;
// anything else is skipped without a system call (the type comes from the
// directory entry, and only an unknown type costs a stat).
func (w *walk) entry(parent dir, dirfd int, name []byte, typ byte, batch *[]Entry) (dir, bool) {
	base := name[:len(name)-1]
	if typ != unix.DT_DIR && typ != unix.DT_REG && typ != unix.DT_UNKNOWN {
		return dir{}, false // symlink, FIFO, socket, device
	}
	if string(base) == "." || string(base) == ".." {
		return dir{}, false
	}
	path := parent.path + "/" + string(base)
	if parent.path == "/" {
		path = "/" + string(base)
	}
	var st unix.Stat_t
	stated := !(typ == unix.DT_REG && w.opts.NoStat)
	if !stated {
		st.Mode = unix.S_IFREG
	} else if typ != unix.DT_DIR {
		if err := statAt(dirfd, name, &st); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				w.report(path, &os.PathError{Op: "fstatat", Path: path, Err: err})
			}
			return dir{}, false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			typ = unix.DT_DIR // an unknown type that is a directory
		case unix.S_IFREG:
		default:
			return dir{}, false
		}
	}
	rel := w.rel(parent, path, len(base))
	if typ == unix.DT_DIR {
		if w.opts.Ignore.Match(rel, true) {
			return dir{}, false
		}
		return dir{path: path, rel: rel}, true
	}
	if w.opts.Ignore.Match(rel, false) {
		return dir{}, false
	}
	if *batch == nil {
		*batch = w.newBatch()
	}
	var info fsstat.FileInfo // a regular file, all the walk knows when it did not stat
	if stated {
		info = fsstat.FromStatAt(dirfd, "", &st)
	}
	*batch = append(*batch, Entry{Path: path, Info: info, Stated: stated})
	return dir{}, false
}

// rel is the root-relative path of path, an entry of parent whose name is
// n bytes long: a suffix of path when the walk's root is its IgnoreRoot.
func (w *walk) rel(parent dir, path string, n int) string {
	if w.base == "" {
		return path[len(path)-len(parent.rel)-n-min(len(parent.rel), 1):]
	}
	return join(parent.rel, path[len(path)-n:])
}

// getdents reads directory entries of fd into buf.
func getdents(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != unix.EINTR {
			return max(n, 0), err
		}
	}
}

// nextDirent parses the first linux_dirent64 record of b: its name with
// the terminating NUL, its d_type and the records after it.
func nextDirent(b []byte) (name []byte, typ byte, rest []byte, ok bool) {
	const nameOff = 19 // d_ino(8) d_off(8) d_reclen(2) d_type(1)
	if len(b) < nameOff {
		return nil, 0, nil, false
	}
	reclen := int(binary.NativeEndian.Uint16(b[16:18]))
	if reclen <= nameOff || reclen > len(b) {
		return nil, 0, nil, false
	}
	name = b[nameOff:reclen]
	i := bytes.IndexByte(name, 0)
	if i < 0 {
		return nil, 0, nil, false
	}
	return name[:i+1], b[18], b[reclen:], true
}

// join appends name to a root-relative directory path.
func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// openDirAt opens a directory without following a symlink in its last
// component.
func openDirAt(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// statAt lstat's name, NUL-terminated, in the directory dirfd; the name
// is passed as it lies in the getdents buffer, without a copy.
func statAt(dirfd int, name []byte, st *unix.Stat_t) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(&name[0])),
			uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}
