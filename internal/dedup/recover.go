package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Recover settles the hardlink steps a crash interrupted, from the intent
// journal: each is finished or rolled back, so every name holds a file
// with its content and no temporary name is left. Apply in hardlink mode
// recovers first; the daemon also calls Recover at start.
func (d *Deduper) Recover(ctx context.Context) error {
	if d.opt.Intents == nil {
		return nil
	}
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	return d.recover(ctx)
}

func (d *Deduper) recover(ctx context.Context) error {
	ins, err := d.opt.Intents.Intents()
	if err != nil {
		return err
	}
	var errs []error
	for _, in := range ins {
		errs = append(errs, d.settle(ctx, in))
	}
	return errors.Join(errs...)
}

// settle finishes or rolls back one step and drops its intent. A
// temporary name counts as the step's own only while it holds the
// keeper's or the target's inode; anything else there is left alone.
//
//   - Temp is the keeper: the exchange did not happen, or was undone.
//     Name holds the target; Temp is removed.
//   - Temp is the target and Name the keeper, with the same bytes: the
//     exchange happened; Temp is removed, which finishes the step.
//   - Temp is the target and Name differs from it or is not the keeper:
//     the names are exchanged back and the keeper's link removed, so
//     Name holds the target with whatever was written to it.
//   - Temp is absent: nothing is left to do.
//
// A file this run cannot prove its own is left where it is, reported
// (ErrForeign) and its intent dropped.
func (d *Deduper) settle(ctx context.Context, in Intent) error {
	dir, err := openPath(in.Dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, os.ErrNotExist) {
		return d.opt.Intents.DeleteIntent(ctx, in.ID) // the directory and all in it are gone
	}
	if err != nil {
		return fmt.Errorf("dedup: recover %s: %w", in.Dir, err)
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	if err := settleNames(ctx, dfd, in); err != nil {
		d.log.Warn("dedup recovery left a temporary name", "dir", string(in.Dir), "temp", in.Temp, "err", err)
		err = fmt.Errorf("dedup: recover %s/%s: %w", in.Dir, in.Temp, err)
		if errors.Is(err, ErrForeign) {
			// Said once; a later recovery could do no more.
			return errors.Join(err, d.opt.Intents.DeleteIntent(ctx, in.ID))
		}
		return err
	}
	if err := unix.Fsync(dfd); err != nil {
		return fmt.Errorf("dedup: recover: fsync %s: %w", in.Dir, err)
	}
	if d.opt.Rehash != nil {
		d.opt.Rehash([]byte(filepath.Join(string(in.Dir), string(in.Name))))
	}
	return d.opt.Intents.DeleteIntent(ctx, in.ID)
}

func settleNames(ctx context.Context, dfd int, in Intent) error {
	name := string(in.Name)
	switch {
	case isInode(dfd, in.Temp, in.Dev, in.Keeper):
		return unlinkAt(dfd, in.Temp)
	case isInode(dfd, in.Temp, in.Dev, in.Target):
		if isInode(dfd, name, in.Dev, in.Keeper) {
			same, err := sameAt(ctx, dfd, in.Temp, name)
			if err != nil {
				return err
			}
			if same {
				return unlinkAt(dfd, in.Temp)
			}
		} else if !exists(dfd, name) {
			return unix.Renameat2(dfd, in.Temp, dfd, name, unix.RENAME_NOREPLACE)
		} else {
			return fmt.Errorf("%w: the name holds a file this run did not make; the old target is kept", ErrForeign)
		}
		if err := unix.Renameat2(dfd, in.Temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("exchange back: %w", err)
		}
		if isInode(dfd, in.Temp, in.Dev, in.Keeper) {
			return unlinkAt(dfd, in.Temp)
		}
		return nil
	case exists(dfd, in.Temp):
		return fmt.Errorf("%w: the temporary name holds a file this run did not make", ErrForeign)
	}
	return nil
}

func unlinkAt(dfd int, name string) error {
	if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unlink: %w", err)
	}
	return nil
}

func exists(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// sameAt compares two regular files in one directory, opened unfollowed.
func sameAt(ctx context.Context, dfd int, a, b string) (bool, error) {
	fa, err := openAt(dfd, a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := openAt(dfd, b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	var sa, sb unix.Stat_t
	if err := unix.Fstat(int(fa.Fd()), &sa); err != nil {
		return false, err
	}
	if err := unix.Fstat(int(fb.Fd()), &sb); err != nil {
		return false, err
	}
	if sa.Size != sb.Size {
		return false, nil
	}
	return sameBytes(ctx, fa, fb, sa.Size)
}

func openAt(dfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}
