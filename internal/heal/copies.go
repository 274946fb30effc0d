package heal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// rot is the rotten file as flagged.
type rot struct {
	path    string
	rec     store.Record // flagged, with the recorded digest
	fi      fsstat.FileInfo
	backend key.Backend
}

// rotten gathers the rotten file of p, or says why it is not healed:
// Changed (since it was flagged), Away (its file system is not mounted)
// or Refused (it has several names).
func (h *Healer) rotten(p *audit.Problem) (rot, string, string) {
	r := rot{path: string(p.Path)}
	rec, ok, err := h.st.Get(p.Path)
	switch {
	case err != nil:
		return r, Changed, "its record cannot be read: " + err.Error()
	case !ok:
		return r, Changed, "no longer indexed"
	case rec.State == store.StateUntraced && bytes.Equal(rec.Digest, p.Recorded):
		return r, Refused, notCorrupt(audit.Untraced) // its record says so, whatever the finding says
	case rec.State != store.StateCorrupt || !bytes.Equal(rec.Digest, p.Recorded):
		return r, Changed, "its record changed since it was flagged (the indexer saw an edit)"
	}
	r.rec, r.backend = rec, rec.Backend
	fi, err := fsstat.Lstat(r.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && fsstat.Away(r.path, rec.Dev):
		return r, Away, "its file system is not mounted (a disk unplugged or unmounted): heal it again once it is"
	case err != nil:
		return r, Changed, "cannot stat it: " + err.Error()
	}
	r.fi = fi
	if why := h.changed(&r, fi); why != "" {
		return r, Changed, why
	}
	if fi.Nlink > 1 {
		return r, Refused, fmt.Sprintf(linked, fi.Nlink)
	}
	return r, "", ""
}

// linked says why a file with several names is not healed.
const linked = "the file has %d names (hard links): a restored file would split them, the others keeping the rot; " +
	"restore it by hand, or remove the other names and heal again"

// changed says how the file now (fi) differs from the rotten file as
// flagged: its stat, or a write the ledger saw since it was hashed.
func (h *Healer) changed(r *rot, fi fsstat.FileInfo) string {
	rec := &r.rec
	if !fi.IsRegular() || fi.Dev != rec.Dev || fi.Ino != rec.Ino || fi.Size != rec.Size ||
		fi.MtimeNs != rec.MtimeNs || fi.CtimeNs != rec.CtimeNs {
		return "the file changed since it was flagged (its stat differs)"
	}
	if h.o.Ledger != nil && h.o.Ledger.Since(r.path, fi.Dev, fi.Ino, rec.HashedAt) == ledger.Written {
		return "the file was written since it was flagged (the write ledger saw it)"
	}
	return ""
}

// copyOf is one physical copy: names of inodes that share blocks.
type copyOf struct {
	names [][]byte
	recs  []store.Record
	local bool // on the rotten file's file system
}

// candidates lists the physical copies of the rotten file's content:
// the other records with its digest (peers: files flagged with the same
// recorded digest, which the index lists by digest no more; they are
// read like the others, and count as copies), less every inode that shares blocks
// with it (a hard link, a reflinked twin), one entry per physical copy
// (dedup's survey of shared extents says which inodes are one).
type candidates struct {
	copies []copyOf
	twins  int // names that share the rotten file's blocks
}

func (h *Healer) candidates(p *audit.Problem, r rot, peers [][]byte) (candidates, error) {
	var cs candidates
	paths, err := h.st.ByDigest(r.backend, r.rec.Digest)
	if err != nil {
		return cs, fmt.Errorf("the index cannot list copies: %w", err)
	}
	paths = append(paths, peers...)
	g := store.Group{Backend: r.backend.Base(), Digest: r.rec.Digest, Size: r.rec.Size,
		Members: []store.Member{{Path: p.Path, Record: r.rec}}}
	for _, q := range paths {
		if bytes.Equal(q, p.Path) {
			continue
		}
		rec, ok, err := h.st.Get(q)
		if err != nil || !ok || (rec.State != store.StateOK && !rec.State.Flagged()) || !bytes.Equal(rec.Digest, r.rec.Digest) {
			continue
		}
		if slices.ContainsFunc(g.Members, func(m store.Member) bool { return bytes.Equal(m.Path, q) }) {
			continue
		}
		g.Members = append(g.Members, store.Member{Path: q, Record: rec})
	}
	if len(g.Members) == 1 {
		return cs, nil
	}
	sv, _ := dedup.SurveyGroup(g)
	copyIdx := func(rec *store.Record) int {
		for _, in := range sv.Inodes {
			if in.Dev == rec.Dev && in.Ino == rec.Ino {
				return in.Copy
			}
		}
		return -1
	}
	mine := copyIdx(&r.rec)
	byCopy := map[int]int{} // survey copy → index in cs.copies
	for _, m := range g.Members[1:] {
		c := copyIdx(&m.Record)
		if (m.Record.Dev == r.rec.Dev && m.Record.Ino == r.rec.Ino) || (c >= 0 && c == mine) {
			cs.twins++
			continue
		}
		i, ok := byCopy[c]
		if !ok || c < 0 {
			i = len(cs.copies)
			byCopy[c] = i
			cs.copies = append(cs.copies, copyOf{local: m.Record.Dev == r.rec.Dev})
		}

		cs.copies[i].names = append(cs.copies[i].names, m.Path)
		cs.copies[i].recs = append(cs.copies[i].recs, m.Record)
	}
	slices.SortStableFunc(cs.copies, func(a, b copyOf) int { // this file system first
		switch {
		case a.local == b.local:
			return 0
		case a.local:
			return -1
		}
		return 1
	})
	return cs, nil
}

// verified returns a name of copy c whose bytes, read from the device,
// have the recorded digest, and its stat; ok false when none has.
func (h *Healer) verified(ctx context.Context, r *rot, c *copyOf) (string, fsstat.FileInfo, bool) {
	for i, name := range c.names {
		q := string(name)
		fi, err := fsstat.Lstat(q)
		if err != nil || !fi.IsRegular() || !fi.Same(recInfo(&c.recs[i])) {
			continue // gone or changed since it was hashed
		}
		if h.verify(ctx, q, fi, r) {
			return q, fi, true
		}
	}
	return "", fsstat.FileInfo{}, false
}

// recInfo is the stat identity a record keeps.
func recInfo(rec *store.Record) fsstat.FileInfo {
	return fsstat.FileInfo{Dev: rec.Dev, Ino: rec.Ino, Size: rec.Size, MtimeNs: rec.MtimeNs, CtimeNs: rec.CtimeNs}
}

// verify reads the file at path (lstat fi) from the device, as the audit
// reads, and reports whether it has the rotten file's recorded digest.
func (h *Healer) verify(ctx context.Context, path string, fi fsstat.FileInfo, r *rot) bool {
	hh, err := h.dg.NewHash(r.backend)
	if err != nil {
		return false
	}
	got := audit.ReadFile(ctx, path, fi, hh)
	if got.Err != nil {
		h.log.Warn("heal cannot read a copy", "path", path, "err", got.Err)
		return false
	}
	if !got.After.Same(fi) || !bytes.Equal(got.Digest, r.rec.Digest) {
		h.log.Warn("a copy does not verify: not used", "path", path, "for", r.path)
		return false
	}
	return true
}

// settle fills f from a restore's answer res, why; healed says where
// from. It reports false for a copy not used: the next may be tried.
func settle(f *File, res, why, healed string) bool {
	switch res {
	case Healed:
		f.Outcome, f.Aside, f.Reason = Healed, why, healed
	case unlifted:
		f.Outcome, f.Reason = Healed, why
	case Changed, Busy:
		f.Outcome, f.Reason, f.Again = res, why, res == Busy
	case failed:
		f.Outcome, f.Reason = Refused, why
	default:
		return false
	}
	return true
}

// fromCopies heals (or plans) the rotten file r from the first verified
// copy of cs, then from the Remote.
func (h *Healer) fromCopies(ctx context.Context, p *audit.Problem, r rot, cs candidates, dry bool) File {
	f := File{Path: p.Path, Key: p.RecordedKey}
	healthy, tried := 0, 0
	var notes []string
	for i := range cs.copies {
		c := &cs.copies[i]
		src, sfi, ok := h.verified(ctx, &r, c)
		tried++
		if !ok {
			continue
		}
		healthy++
		if dry {
			f.Outcome, f.Source, f.Reason = WouldHeal, []byte(src), fmt.Sprintf("a verified copy (%s)", how(c.local))
			return f
		}
		res, why := h.restore(ctx, &r, p, source{path: src, fi: sfi})
		if settle(&f, res, why, "restored from a verified copy ("+how(c.local)+")") {
			if f.Outcome == Healed {
				f.Source = []byte(src)
			}
			return f
		}
		healthy--
		notes = append(notes, fmt.Sprintf("%s: %s", src, why))
	}
	if h.o.Remote != nil && dry {
		host, note := h.remoteHolder(ctx, p.RecordedKey)
		if host != "" {
			f.Outcome, f.Host = WouldHeal, host
			f.Reason = "a copy on " + host + ", as the hub lists it; the heal reads it there and checks it before using it"
			return f
		}
		notes = append(notes, note)
	}
	if h.o.Remote != nil && !dry {
		res, host, why := h.fromRemote(ctx, &r, p)
		if settle(&f, res, why, "restored from a verified copy on "+host) {
			if f.Outcome == Healed {
				f.Host = host
			}
			return f
		}
		f.Again = res == unreachable
		notes = append(notes, why)
	}
	f.Outcome = NoCopy
	f.Reason = fmt.Sprintf("no verified copy: %d of %d %s healthy", healthy, tried, plural(tried, "copy", "copies"))
	if cs.twins > 0 {
		f.Reason += fmt.Sprintf("; %d %s the rotten file's blocks (a hard link or reflinked twin: no copy)",
			cs.twins, plural(cs.twins, "name shares", "names share"))
	}
	if h.o.Remote == nil {
		f.Reason += "; other hosts not asked ([audit] heal = \"any\" asks them)"
	}
	if len(notes) > 0 {
		f.Reason += "; " + strings.Join(notes, "; ")
	}
	return f
}

// remoteHolder is the first host the Remote lists as holding key, for a
// dry run; else "" and why none.
func (h *Healer) remoteHolder(ctx context.Context, key string) (host, why string) {
	l, ok := h.o.Remote.(Lister)
	if !ok {
		return "", "other hosts are asked only by a heal that is not a dry run"
	}
	hosts, err := l.Holders(ctx, key)
	switch {
	case err != nil:
		return "", "other hosts: " + err.Error()
	case len(hosts) == 0:
		return "", "no other host holds it"
	}
	return hosts[0], ""
}

func how(local bool) string {
	if local {
		return "same file system"
	}
	return "another file system of this host"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
