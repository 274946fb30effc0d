package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// dedupeChunk is the length asked of one FIDEDUPERANGE call. The kernel
// caps a call at 1 GiB (btrfs works in 16 MiB steps) and holds both
// inodes locked while it compares, so shorter calls keep writers waiting
// less and let a cancelled run stop sooner.
const dedupeChunk = 16 << 20

// dedupeRange makes the first size bytes of dst share src's extents. The
// kernel compares the bytes under its locks first: any difference leaves
// dst untouched and returns ErrDiffers. A call may do less than asked, so
// it loops on bytes_deduped. Both files are open for reading only; the
// kernel accepts that for a destination its caller owns or may write, and
// for CAP_SYS_ADMIN. It returns how many bytes from the start were
// shared, also when a later call fails.
func dedupeRange(ctx context.Context, src, dst *os.File, size int64) (int64, error) {
	var off int64
	for off < size {
		if err := ctx.Err(); err != nil {
			return off, err
		}
		n := min(size-off, dedupeChunk)
		r := unix.FileDedupeRange{Src_offset: uint64(off), Src_length: uint64(n),
			Info: []unix.FileDedupeRangeInfo{{Dest_fd: int64(dst.Fd()), Dest_offset: uint64(off)}}}
		if err := unix.IoctlFileDedupeRange(int(src.Fd()), &r); err != nil {
			return off, fmt.Errorf("FIDEDUPERANGE at offset %d: %w", off, err)
		}
		info := r.Info[0]
		switch {
		case info.Status == unix.FILE_DEDUPE_RANGE_DIFFERS:
			return off, fmt.Errorf("%w at offset %d", ErrDiffers, off)
		case info.Status < 0:
			return off, fmt.Errorf("FIDEDUPERANGE at offset %d: %w", off, syscall.Errno(-info.Status))
		case info.Bytes_deduped == 0:
			return off, fmt.Errorf("FIDEDUPERANGE at offset %d: %w", off, errNoProgress)
		}
		off += int64(info.Bytes_deduped)
		stepDone("shared")
	}
	return off, nil
}

var errNoProgress = errors.New("no bytes deduplicated")

// canReflink asks the kernel whether the file system of f can share
// extents: a call of length zero with no destination changes nothing, and
// fails with EOPNOTSUPP (or EINVAL) where the file system has no remap.
func canReflink(f *os.File) error {
	r := unix.FileDedupeRange{}
	if err := unix.IoctlFileDedupeRange(int(f.Fd()), &r); err != nil {
		return err
	}
	return nil
}

// reflink makes the target of one pair share the keeper's extents.
func (r *run) reflink(ctx context.Context, p *pair) (freed int64, reason Reason, err error) {
	kx, err := fiemap(int(p.keeper.f.Fd()), p.keeper.fi.Size)
	if err != nil {
		return 0, SkipError, err
	}
	tx, err := fiemap(int(p.target.f.Fd()), p.target.fi.Size)
	if err != nil {
		return 0, SkipError, err
	}
	same, _ := sharing(tx, kx)
	all := placed(tx)
	switch {
	case all == 0 && p.target.fi.Size > 0:
		return 0, SkipNoBlocks, nil
	case same == all:
		return 0, SkipShared, nil
	}
	size := p.target.fi.Size
	shared, err := dedupeRange(ctx, p.keeper.f, p.target.f, size)
	after, ferr := fiemap(int(p.target.f.Fd()), size)
	if ferr == nil {
		freed = freedBy(tx, after)
	}
	if err != nil {
		why := partly(shared, size, freed, err)
		return freed, r.remapFailed(p, err), why
	}
	if ferr != nil {
		return 0, SkipError, ferr
	}
	return freed, "", nil
}

// remapFailed says why sharing a pair failed. A target that no longer
// matches its record changed under the run (truncated, say); the kernel's
// refusal of one pair on a file system that can share extents is about
// that pair alone (a btrfs nodatacow file, a swap file), never about the
// file system: only the probe of a device says that (run.supported).
func (r *run) remapFailed(p *pair, err error) Reason {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return SkipError
	}
	if reason, _ := r.recheck(p.target); reason != "" {
		return reason
	}
	if errors.Is(err, ErrDiffers) {
		return SkipDiffers
	}
	if reason := reasonOfRemap(err); reason != SkipUnsupported {
		return reason
	}
	return SkipRefused
}

// partly says how far a pair got before err: nothing, or some bytes
// shared and freed, which the run counts.
func partly(shared, size, freed int64, err error) error {
	if shared == 0 && freed == 0 {
		return err
	}
	return fmt.Errorf("%d of %d bytes were shared (%d freed) before: %w", shared, size, freed, err)
}

// freedBy counts the bytes that were the target's alone before and that
// it holds no longer: they are the keeper's blocks now, or holes where
// the keeper has holes. Those blocks went back to the file system.
func freedBy(before, after []extent) int64 {
	var freed int64
	for _, b := range before {
		if b.unplaced() || b.shared() {
			continue
		}
		kept := int64(0)
		for _, a := range after {
			if a.unplaced() {
				continue
			}
			lo, hi := max(a.physical, b.physical), min(a.physical+a.length, b.physical+b.length)
			if lo < hi {
				kept += int64(hi - lo)
			}
		}
		freed += max(int64(b.length)-kept, 0)
	}
	return freed
}

// reasonOfRemap classifies a refusal of FIDEDUPERANGE by its error.
func reasonOfRemap(err error) Reason {
	switch {
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL):
		return SkipUnsupported
	case errors.Is(err, unix.EXDEV):
		return SkipOtherMount
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, unix.ETXTBSY):
		return SkipRefused
	}
	return SkipError
}
