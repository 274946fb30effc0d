package hubcopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/directio"
	"github.com/annexd/annexd/store"
)

// readSize is one read of a copy from its disk.
const readSize = 1 << 20

// errChanged: the file is not the one the index recorded.
var errChanged = errors.New("hubcopy: the file changed since it was indexed")

// errRot: the file's bytes do not match its key now.
var errRot = errors.New("hubcopy: the bytes do not match the key")

// readCopy reads the file at path, which the index recorded as rec, into
// h and w, and checks that its bytes are what want (a digest) and size
// say. It reads from the device with O_DIRECT where the file system
// allows, as the audit does, so that the page cache cannot vouch for a
// disk that rotted; elsewhere through the page cache. The file must be
// the one recorded, before and after. pace, unless nil, paces the reads.
func readCopy(ctx context.Context, path string, rec store.Record, h hash.Hash, want []byte, size int64, w io.Writer, pace *pacer) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hubcopy: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	before, err := fsstat.Fstat(fd)
	if err != nil {
		return fmt.Errorf("hubcopy: fstat %s: %w", path, err)
	}
	if !before.IsRegular() || !same(before, rec) || before.Size != size {
		return fmt.Errorf("%w: %s", errChanged, path)
	}
	h.Reset()
	dst := io.MultiWriter(h, w)
	if err := readAll(ctx, fd, before, dst, pace); err != nil {
		return fmt.Errorf("hubcopy: read %s: %w", path, err)
	}
	after, err := fsstat.Lstat(path)
	if err != nil || !after.Same(before) {
		return fmt.Errorf("%w: %s (during the read)", errChanged, path)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return fmt.Errorf("%w: %s", errRot, path)
	}
	return nil
}

func same(a fsstat.FileInfo, r store.Record) bool {
	return a.Dev == r.Dev && a.Ino == r.Ino && a.Size == r.Size && a.MtimeNs == r.MtimeNs && a.CtimeNs == r.CtimeNs
}

// readAll writes the file open as fd, of before.Size bytes, to w: direct
// reads where they work, else reads through the page cache.
func readAll(ctx context.Context, fd int, before fsstat.FileInfo, w io.Writer, pace *pacer) error {
	buf := directio.Buffer(readSize)
	var df *directio.File
	if b, _ := directio.BackingOf(fd); b != directio.Memory && b != directio.OwnCache {
		df, _ = directio.Open(fd, before.Dev)
	}
	if df != nil {
		defer df.Close()
	}
	for off := int64(0); off < before.Size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		want := int(min(readSize, before.Size-off))
		if err := pace.wait(ctx, want); err != nil {
			return err
		}
		n, err := readAt(fd, df, buf, off, want)
		if errors.Is(err, directio.ErrRefused) && df != nil {
			_ = df.Close()
			df = nil
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return errChanged // shorter than it was
		}
		n = min(n, want)
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

func readAt(fd int, df *directio.File, buf []byte, off int64, want int) (int, error) {
	if df != nil {
		return df.ReadAt(buf, off, want)
	}
	for {
		n, err := unix.Pread(fd, buf[:want], off)
		if err != unix.EINTR {
			return n, err
		}
	}
}
