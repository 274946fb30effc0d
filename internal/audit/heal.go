package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// The audit's side of a heal (package heal does the work): reading a
// copy as the audit reads, lifting a finding once the restored file
// verifies, and the history of heals with the rotten bytes each kept
// aside until an accept or the retention time.

// metaHeal + path names the record of the last heal of the file at path.
const metaHeal = "audit/h/"

// ReadFile reads the regular file at path as the audit does: from the
// device with O_DIRECT where its file system allows, else through the
// page cache (Read.Source says which), and hashes it into h. before is
// its lstat; a file that is not the one before is a *hasher.ChangedError.
func ReadFile(ctx context.Context, path string, before fsstat.FileInfo, h hash.Hash) Read {
	return newReader(nil, readSize).read(ctx, path, before, h, true)
}

// HealRecord is a heal in the audit's history: the file at Path was
// restored from a verified copy, and its rotten bytes are kept at Aside
// (a second name of the rotten inode, AsideIno) until an accept of the
// path or the retention time removes them.
type HealRecord struct {
	Path     []byte `json:"-"`
	At       int64  `json:"at"` // Unix ns
	Key      string `json:"key"`
	Source   string `json:"source,omitempty"` // the copy's path on this host
	Host     string `json:"host,omitempty"`   // the host a remote copy came from
	Aside    string `json:"aside,omitempty"`  // "" once removed
	AsideIno uint64 `json:"aside_ino,omitempty"`
	Released int64  `json:"released,omitempty"` // when Aside was removed
}

// Healed lifts the finding of h.Path once its file, restored from a
// verified copy, verifies: it is read from the device and must have the
// finding's recorded digest. Then the record takes the file's stat and
// state ok, the finding's entry goes, and h is recorded in the history.
// ErrNotFlagged when the path has no corrupt finding; ErrUnverified when
// the file does not verify (the finding stands).
func (a *Auditor) Healed(ctx context.Context, h HealRecord) error {
	if err := a.ready(ctx); err != nil {
		return err
	}
	path := string(h.Path)
	e, ok := a.getEntry(path)
	if c, _ := parseClass(e.Class); !ok || c != Corrupt {
		return fmt.Errorf("%w: %s", ErrNotFlagged, path)
	}
	rec, ok, err := a.st.Get(h.Path)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s has no record", ErrNotFlagged, path)
	}
	fi, err := fsstat.Lstat(path)
	if err != nil {
		return err
	}
	hh, err := a.dg.NewHash(rec.Backend)
	if err != nil {
		return err
	}
	start := time.Now().UnixNano()
	got := ReadFile(ctx, path, fi, hh)
	if got.Err == nil && !got.After.Same(fi) {
		got.Err = fmt.Errorf("audit: %s changed while read", path)
	}
	if got.Err != nil {
		return got.Err
	}
	if !bytes.Equal(got.Digest, e.Recorded) {
		return fmt.Errorf("%w: %s", ErrUnverified, path)
	}
	nr := rec
	nr.Digest, nr.State = e.Recorded, store.StateOK
	nr.Size, nr.MtimeNs, nr.CtimeNs, nr.Dev, nr.Ino = fi.Size, fi.MtimeNs, fi.CtimeNs, fi.Dev, fi.Ino
	nr.HashedAt, nr.VerifiedAt = start, start
	err = commit(a.st, store.Change{Op: store.OpPutIf, Path: h.Path, Record: nr, Expect: rec})
	if errors.Is(err, store.ErrConflict) {
		// The indexer recorded the restored file first: it is the same
		// file when its record has the recorded digest and this stat.
		cur, ok, gerr := a.st.Get(h.Path)
		if gerr != nil || !ok || !bytes.Equal(cur.Digest, e.Recorded) || cur.State != store.StateOK || cur.Ino != fi.Ino {
			return fmt.Errorf("audit: %s changed meanwhile; the indexer records it", path)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	if err := a.deleteEntry(ctx, path); err != nil {
		return err
	}
	if h.At == 0 {
		h.At = time.Now().UnixNano()
	}
	if err := a.putHeal(h); err != nil {
		return err
	}
	a.log.Info("audit finding healed", "path", path, "key", h.Key, "source", h.Source, "host", h.Host, "aside", h.Aside)
	return nil
}

func (a *Auditor) putHeal(h HealRecord) error {
	v, err := json.Marshal(&h)
	if err != nil {
		return err
	}
	return commit(a.st, store.Change{Op: store.OpPutMeta, Path: []byte(metaHeal + string(h.Path)), Value: v})
}

// Heals calls fn for each heal in the history, in path order.
func (a *Auditor) Heals(ctx context.Context, fn func(HealRecord) error) error {
	return a.st.MetaPrefix(ctx, metaHeal, func(name string, v []byte) error {
		var h HealRecord
		if json.Unmarshal(v, &h) != nil {
			return nil
		}
		h.Path = []byte(name[len(metaHeal):])
		return fn(h)
	})
}

// ReleaseHeals removes the rotten bytes kept aside by the heals of the
// files at or below path (an accept), or by every heal older than keep
// when path is nil (the retention time; keep < 0: never). It returns the
// paths whose rotten bytes went. An aside that is no longer the rotten
// inode (another file took the name) is left where it is, and forgotten.
func (a *Auditor) ReleaseHeals(ctx context.Context, path []byte, keep time.Duration) ([][]byte, error) {
	if path == nil && keep < 0 {
		return nil, nil
	}
	now := time.Now()
	var todo []HealRecord
	err := a.Heals(ctx, func(h HealRecord) error {
		if h.Aside == "" {
			return nil
		}
		if path != nil && !under(h.Path, path) {
			return nil
		}
		if path == nil && now.Sub(time.Unix(0, h.At)) < keep {
			return nil
		}
		todo = append(todo, h)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, h := range todo {
		if err := removeAside(h.Aside, h.AsideIno); err != nil {
			a.log.Warn("cannot remove the rotten bytes a heal kept aside", "path", string(h.Path), "aside", h.Aside, "err", err)
			continue
		}
		a.log.Info("rotten bytes kept aside by a heal removed", "path", string(h.Path), "aside", h.Aside)
		h.Aside, h.AsideIno, h.Released = "", 0, now.UnixNano()
		if err := a.putHeal(h); err != nil {
			return out, err
		}
		out = append(out, h.Path)
	}
	return out, nil
}

// under reports whether p is dir or below it.
func under(p, dir []byte) bool {
	return bytes.Equal(p, dir) || bytes.HasPrefix(p, append(bytes.TrimSuffix(dir, []byte("/")), '/'))
}

// removeAside removes the name aside when it still holds the inode ino;
// a name gone already, or holding another file, is left alone.
func removeAside(aside string, ino uint64) error {
	fi, err := fsstat.Lstat(aside)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsRegular() || fi.Ino != ino {
		return fmt.Errorf("audit: %s is no longer the rotten file (inode %d, not %d); left there", aside, fi.Ino, ino)
	}
	return os.Remove(aside)
}
