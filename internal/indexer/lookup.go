package indexer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// State says what a Lookup found.
type State uint8

// Lookup states. Only Current carries a key to trust as the file's key now.
const (
	Current    State = iota + 1 // Key is the key of the file's content now
	Pending                     // new or changed, not hashed yet
	Missing                     // nothing at the path
	NotRegular                  // a directory, symlink, FIFO, socket or device
	Ignored                     // left out by the ignore patterns or excluded
	Unreadable                  // the file cannot be read (Message says why)
	Corrupt                     // an audit found content that no longer matches the recorded key
)

var stateNames = [...]string{"", "current", "pending", "missing", "not_regular", "ignored", "unreadable", "corrupt"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Result is the answer of Lookup.
type Result struct {
	State   State
	Key     key.Key // set when Current or Corrupt
	Size    int64   // from the fresh lstat when the path exists
	Message string
}

// maxLookupRounds bounds how often a waiting Lookup re-checks a file that
// keeps changing.
const maxLookupRounds = 8

// Lookup reports the key of the regular file at path as it is now. It
// compares the record with a fresh lstat; when they differ it hashes the file
// on demand (files up to OnDemandMax, or any size when wait is set), waits for
// work already in the pipeline (wait), or reports Pending. A stale key is
// never reported as Current.
func (ix *Indexer) Lookup(ctx context.Context, path string, wait bool) (Result, error) {
	path = filepath.Clean(path)
	if !ix.inRoots(path) {
		return Result{}, fmt.Errorf("%w: %s", ErrOutsideRoots, path)
	}
	for round := 0; ; round++ {
		fi, err := fsstat.Lstat(path)
		switch {
		case isGone(err):
			return Result{State: Missing}, nil
		case err != nil:
			return Result{State: Unreadable, Message: err.Error()}, nil
		case !fi.IsRegular():
			return Result{State: NotRegular, Size: fi.Size}, nil
		case ix.skip(path):
			return Result{State: Ignored, Size: fi.Size}, nil
		}
		rec, ok, err := ix.get(path)
		if err != nil {
			return Result{}, err
		}
		if ok && sameIdentity(&rec, fi) {
			switch {
			case rec.State == store.StateUnreadable:
				return Result{State: Unreadable, Size: fi.Size, Message: "could not be read when last tried"}, nil
			case rec.State == store.StateCorrupt:
				k, err := recordKey(path, &rec)
				return Result{State: Corrupt, Key: k, Size: fi.Size}, err
			case ix.current(&rec, fi):
				k, err := recordKey(path, &rec)
				if err != nil {
					return Result{}, err
				}
				return Result{State: Current, Key: k, Size: fi.Size}, nil
			}
		}
		if round >= maxLookupRounds || ctx.Err() != nil {
			return Result{State: Pending, Size: fi.Size}, nil
		}
		if done := ix.pend.wait(path); done != nil {
			if !wait {
				return Result{State: Pending, Size: fi.Size}, nil
			}
			select {
			case <-done:
			case <-ctx.Done():
				return Result{State: Pending, Size: fi.Size}, nil
			}
			continue
		}
		if !wait && fi.Size > ix.opt.OnDemandMax {
			ix.enqueue(ctx, path, nil, fi.Size)
			return Result{State: Pending, Size: fi.Size}, nil
		}
		r, retry := ix.hashNow(ctx, path, fi)
		if !retry {
			return r, nil
		}
		if !wait {
			return Result{State: Pending, Size: fi.Size}, nil
		}
	}
}

// hashNow hashes path for Lookup, records the result through the pipeline's
// write path and returns it. retry reports that the file is now pending
// (someone else took it, or it changed while hashed).
func (ix *Indexer) hashNow(ctx context.Context, path string, fi fsstat.FileInfo) (r Result, retry bool) {
	if !ix.pend.add(path, nil, fi.Size) {
		return Result{}, true
	}
	j := job{path: path}
	select {
	case ix.onDemand <- struct{}{}:
	case <-ctx.Done():
		ix.finish(j)
		return Result{State: Pending, Size: fi.Size}, false
	}
	start := time.Now()
	res, err := ix.h.Hash(ctx, path, ix.opt.Backend)
	<-ix.onDemand
	switch {
	case err == nil:
		ix.m.onDemand.Add(1)
		ix.m.filesHashed.Add(1)
		ix.m.bytesHashed.Add(res.Info.Size)
		rec := ix.okRecord(res, start.UnixNano())
		k, kerr := recordKey(path, &rec)
		ix.write(j, putChange(path, rec))
		if kerr != nil {
			return Result{State: Unreadable, Message: kerr.Error()}, false
		}
		return Result{State: Current, Key: k, Size: res.Info.Size}, false
	case errors.Is(err, hasher.ErrChanged):
		// The retry belongs to the pipeline: the caller's ctx ends with its
		// request, and a retry stopped with it would leave the path pending
		// for ever.
		ix.retry(ix.ctx(), j, err)
		return Result{}, true
	case isGone(err):
		ix.finish(j)
		return Result{State: Missing}, false
	case errors.Is(err, hasher.ErrNotRegular):
		ix.finish(j)
		return Result{State: NotRegular}, false
	case ctx.Err() != nil:
		ix.finish(j)
		return Result{State: Pending, Size: fi.Size}, false
	}
	ix.finish(j)
	ix.Changed(ctx, path) // let the pipeline record it as unreadable
	return Result{State: Unreadable, Size: fi.Size, Message: err.Error()}, false
}

// recordKey is the key of a record for the file at path.
func recordKey(path string, rec *store.Record) (key.Key, error) {
	return key.FromDigest(rec.Backend, rec.Digest, rec.Size, filepath.Base(path), key.ExtRule{})
}

// Current reports whether the stored record of path describes the file as it
// is now, without hashing.
func (ix *Indexer) Current(path string) (bool, error) {
	fi, err := fsstat.Lstat(path)
	if err != nil {
		return false, nil
	}
	rec, ok, err := ix.get(path)
	if err != nil || !ok {
		return false, err
	}
	return ix.current(&rec, fi), nil
}

// Unchanged reports whether the file at path, lstat'ed now, is still the
// file rec describes: the same identity, and, for a record in state ok, not
// racily clean (a write in the tick it was hashed in could hide behind the
// same identity). A false answer means rec's key may be wrong.
func (ix *Indexer) Unchanged(path string, rec *store.Record) bool {
	fi, err := fsstat.Lstat(path)
	if err != nil || !sameIdentity(rec, fi) {
		return false
	}
	return rec.State != store.StateOK || !ix.racy(rec)
}

// Roots returns the roots.
func (ix *Indexer) Roots() []string { return ix.opt.Roots }
