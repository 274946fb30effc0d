package audit

import (
	"context"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
)

// readSize is the size of one read(2), and of one draw on the pacer.
const readSize = 1 << 20

// partSize is how much of a file is looked at with mincore, read, and
// cleaned of the pages the audit brought in, before the next part.
const partSize = 64 << 20

// maxSnapPages bounds the residency kept for a second read (1 byte a page:
// 16 MiB, a 64 GiB file). A larger file's second read drops every page.
const maxSnapPages = 16 << 20

var pageSize = int64(os.Getpagesize())

// testHookDrop and testHookResident, set only by tests, hear of each range
// of pages dropped after a read, and of the residency the reader acts on.
var (
	testHookDrop     func(firstPage, pages int64)
	testHookResident func(firstPage int64, vec []byte)
)

// reader reads whole files for an audit. It leaves the page cache as it
// found it: before reading a part of a file it asks mincore(2) which pages
// are cached, and afterwards drops (posix_fadvise DONTNEED) only the ones
// it brought in. Reads are paced by a shared token bucket. A reader is
// used by one goroutine.
type reader struct {
	buf  []byte
	vec  []byte
	snap []byte // residency before the first read, for a second one
	pace *pacer // nil: full speed
	keep bool   // drop what the audit brought in
	// cached and fresh count bytes found in the cache and read from disk.
	cached, fresh int64
}

func newReader(pace *pacer, keep bool) *reader {
	return &reader{buf: make([]byte, readSize), pace: pace, keep: keep}
}

// read hashes the regular file at path, whose lstat was before, into h.
// again says this is a second read: the file's cached pages are dropped
// first so that the bytes come from the disk, and afterwards the pages
// cached before the first read are kept. It returns the digest and the
// lstat after, or the error; a file that is not the one before, or
// shorter, is a *hasher.ChangedError.
func (r *reader) read(ctx context.Context, path string, before fsstat.FileInfo, h hash.Hash, again bool) Read {
	fd, err := openNoFollow(path)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return Read{Err: &hasher.ChangedError{Path: path, Before: before, After: fsstat.FileInfo{Mode: fs.ModeSymlink}}}
		}
		return Read{Err: &fs.PathError{Op: "open", Path: path, Err: err}}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Read{Err: &fs.PathError{Op: "fstat", Path: path, Err: err}}
	}
	if now := fsstat.FromFstat(fd, &st); !now.IsRegular() || !now.Same(before) {
		return Read{Err: &hasher.ChangedError{Path: path, Before: before, After: now}}
	}
	keep := r.keep && cacheVisible(&st, path)
	if again {
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	} else {
		r.snap = r.snap[:0]
	}
	if before.Size > readSize {
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL) // a larger kernel read-ahead
	}
	h.Reset()
	for off := int64(0); off < before.Size; off += partSize {
		n := min(partSize, before.Size-off)
		resident := r.resident(fd, off, n, keep, again)
		if testHookResident != nil && resident != nil {
			testHookResident(off/pageSize, resident)
		}
		if err := r.readPart(ctx, fd, path, before, off, n, h); err != nil {
			return Read{Err: err}
		}
		if keep {
			r.count(resident, n)
			dropFresh(fd, off, n, resident)
		}
	}
	after, err := fsstat.Lstat(path)
	if err != nil {
		return Read{Err: err}
	}
	return Read{Digest: h.Sum(nil), After: after}
}

// resident returns which pages of [off, off+n) are cached now, or, for a
// second read, were cached before the first; nil when that is not known.
func (r *reader) resident(fd int, off, n int64, keep, again bool) []byte {
	if !keep {
		return nil
	}
	pages := (n + pageSize - 1) / pageSize
	first := off / pageSize
	if again {
		if int64(len(r.snap)) < first+pages {
			return nil
		}
		return r.snap[first : first+pages]
	}
	if int64(cap(r.vec)) < pages {
		r.vec = make([]byte, pages)
	}
	vec := r.vec[:pages]
	if err := mincore(fd, off, n, vec); err != nil {
		return nil
	}
	if int64(len(r.snap)) == first && first+pages <= maxSnapPages {
		r.snap = append(r.snap, vec...)
	}
	return vec
}

// count adds the part's bytes to the cached and fresh totals.
func (r *reader) count(resident []byte, n int64) {
	if resident == nil {
		r.fresh += n
		return
	}
	var in int64
	for _, v := range resident {
		if v&1 != 0 {
			in++
		}
	}
	c := min(in*pageSize, n)
	r.cached += c
	r.fresh += n - c
}

// readPart reads [off, off+n) of fd into h, paced.
func (r *reader) readPart(ctx context.Context, fd int, path string, before fsstat.FileInfo, off, n int64, h hash.Hash) error {
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := r.buf[:min(int64(len(r.buf)), n-done)]
		if err := r.pace.wait(ctx, len(b)); err != nil {
			return err
		}
		m, err := pread(fd, b, off+done)
		switch {
		case err != nil:
			return &fs.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			// Shorter than its size said: it changed.
			after, _ := fsstat.Fstat(fd)
			return &hasher.ChangedError{Path: path, Before: before, After: after}
		}
		h.Write(b[:m])
		done += int64(m)
	}
	return nil
}

// dropFresh drops the pages of [off, off+n) that resident says were not
// cached before the audit read them. Without resident nothing is known,
// and nothing is dropped: the audit never evicts what it cannot see.
func dropFresh(fd int, off, n int64, resident []byte) {
	if resident == nil {
		return
	}
	for i := 0; i < len(resident); {
		if resident[i]&1 != 0 {
			i++
			continue
		}
		j := i
		for j < len(resident) && resident[j]&1 == 0 {
			j++
		}
		_ = unix.Fadvise(fd, off+int64(i)*pageSize, int64(j-i)*pageSize, unix.FADV_DONTNEED)
		if testHookDrop != nil {
			testHookDrop(off/pageSize+int64(i), int64(j-i))
		}
		i = j
	}
}

// mincore fills vec with the page-cache residency of [off, off+n) of fd
// (bit 0 of each byte set for a cached page), through a mapping that is
// never touched.
func mincore(fd int, off, n int64, vec []byte) error {
	mem, err := unix.Mmap(fd, off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// cacheVisible reports whether mincore tells this process about the page
// cache of the file: Linux answers only for files the caller owns or
// could open for writing (CAP_FOWNER counts as owning). For others it
// reports pages as absent, and dropping them would evict the user's.
func cacheVisible(st *unix.Stat_t, path string) bool {
	euid := uint32(os.Geteuid())
	return euid == 0 || st.Uid == euid || unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS) == nil
}

func openNoFollow(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func pread(fd int, b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, b, off)
		if err != unix.EINTR {
			if err == nil && n < 0 {
				return 0, io.ErrUnexpectedEOF
			}
			return n, err
		}
	}
}
