package indexer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// A file hashed again is held against the record it had: its own, or its
// inode's under another name (a rename or a hard link the renamer did not
// take over). judge decides from facts gathered once; the checker acts.

// FindingKind says how a file's bytes changed with no witness of a write.
type FindingKind uint8

// The kinds of findings.
const (
	// FoundLostWrite: after an unclean end, the disk holds older bytes
	// than the record, under its stat identity. The record takes them.
	FoundLostWrite FindingKind = iota + 1
	// FoundCorrupt: other bytes under the record's stat identity, ctime
	// included, so no write made them. The record keeps its key, flagged.
	FoundCorrupt
	// FoundUntraced: other bytes, and only the ctime moved (a chmod, a
	// chown, an extended attribute, a link, or a rewrite that set the
	// mtime back while nothing watched). The record keeps its key,
	// flagged; the user accepts the bytes or restores the file.
	FoundUntraced
)

var findingNames = [...]string{"", "lost write", "corrupt", "changed without a trace"}

// feedNames name the findings in the change feed (store.Change.Finding)
// as the audit's classes do.
var feedNames = [...]string{"", "lost_write", "corrupt", "untraced"}

func (k FindingKind) String() string { return findingNames[k] }

// Finding is a file whose bytes changed with no witness of a write.
type Finding struct {
	Path string
	Kind FindingKind
	// From is the path Was was recorded at: Path, or another name of the
	// file's inode.
	From string
	// Was is the record the file had; Now the one written for Path.
	Was, Now store.Record
	// Digest is the digest hashed: the bytes on disk.
	Digest []byte
}

// FindingFunc hears of findings (Options.OnFinding).
type FindingFunc func(Finding)

// prior is the record a file had before it was hashed again.
type prior struct {
	rec  store.Record
	from string // where rec is recorded: the file's path, or another name of its inode
	seen bool   // the ledger saw a write to either path or the inode since rec was hashed
}

// rehash is what is known once a file with a prior record was hashed again.
type rehash struct {
	was     store.Record
	now     store.Identity // the file as the hash saw it
	backend key.Backend
	digest  []byte
	seen    bool // the ledger saw a write since was was hashed
	linked  bool // it saw one at another name of the inode (linkedSince)
	racy    bool // was is racily clean by its timestamps
	trusted bool // was was hashed outside the spans an unclean end casts doubt on
	unread  bool // a write may not have reached the ledger yet
}

// outcome is what judge makes of a rehash.
type outcome uint8

const (
	takeDigest   outcome = iota // the digest hashed is the file's key
	keepCorrupt                 // keep the recorded key, flagged: no write made these bytes
	keepUntraced                // keep the recorded key, flagged: changed without a trace
	takeLost                    // the record takes the bytes on disk: a write was lost
	askLater                    // judge again once the ledger has caught up
)

var outcomeNames = [...]string{"take digest", "keep corrupt", "keep untraced", "take lost write", "ask later"}

func (o outcome) String() string { return outcomeNames[o] }

// judge decides what other bytes than the prior record's mean. Only a
// witness of a write makes them the file's key: a size or an mtime that
// moved, a write the ledger saw, or a record racily clean (a write in its
// timestamp tick shows nowhere). A write seen at another name of the
// inode is one when the ctime moved (a write through any name moves it),
// or when was is flagged: a finding takes the ctime it met, so the write
// came before that finding. A record hashed just before an unclean
// end whose file has its ctime or an older one (the journal kept the new
// metadata, or some of it, and not the bytes) lost a write: the record
// takes the bytes on disk. Otherwise the recorded key stays: with the
// ctime unchanged no write made the bytes (corrupt); with only the ctime
// moved the change left no trace, once the ledger has caught up. A
// flagged record keeps the class it has (standing).
func judge(r rehash) outcome {
	w := &r.was
	switch {
	case !w.HasDigest() || w.Backend != r.backend || !keyed(w.State):
		return takeDigest // nothing to hold the bytes against
	case bytes.Equal(w.Digest, r.digest):
		return takeDigest // the same bytes: verified, or healed
	case w.Dev != r.now.Dev || w.Ino != r.now.Ino || w.Size != r.now.Size || w.MtimeNs != r.now.MtimeNs:
		return takeDigest // a write shows in stat, or another file is there
	case r.seen:
		return takeDigest
	case r.linked && (w.CtimeNs != r.now.CtimeNs || w.State != store.StateOK):
		return takeDigest // written through another name
	case w.State == store.StateOK && r.racy:
		return takeDigest
	case w.State == store.StateOK && !r.trusted && r.now.CtimeNs <= w.CtimeNs:
		return takeLost // the unclean end kept the bytes, or the metadata too, from the disk
	case w.CtimeNs == r.now.CtimeNs:
		return standing(w.State, keepCorrupt)
	case r.unread:
		return askLater
	}
	return standing(w.State, keepUntraced)
}

// standing keeps the class of a flagged record judged again, o being
// what the stat says now: a file that still has other bytes stays what it
// was found to be (the audit's rule too). A kept record takes the ctime it
// met, so the stat alone would call every untraced file corrupt when it is
// hashed again.
func standing(was store.State, o outcome) outcome {
	switch was {
	case store.StateCorrupt:
		return keepCorrupt
	case store.StateUntraced:
		return keepUntraced
	}
	return o
}

// keyed reports whether a record in state st holds a key to keep: the
// content's, or the last one known good.
func keyed(st store.State) bool {
	return st == store.StateOK || st.Flagged() || st == store.StateUnreadable
}

// kept is the record that keeps was's key for the file rec was hashed
// from: flagged as o says (corrupt or untraced), with rec's stat identity
// (so it is settled until the file changes again) and generation. Its
// hash time stays was's.
func kept(was, rec store.Record, o outcome) store.Record {
	k := was
	k.State = store.StateCorrupt
	if o == keepUntraced {
		k.State = store.StateUntraced
	}
	k.SetIdentity(rec.Identity())
	k.Generation = rec.Generation
	return k
}

// errUnsettled retries a file whose bytes are judged once the ledger has
// caught up.
var errUnsettled = errors.New("indexer: other bytes under a moved ctime while the watcher catches up")

// syncTimeout bounds the wait for the ledger before a judgement.
const syncTimeout = 10 * time.Second

// verdict judges rec, the record of the bytes hashed at path, against p,
// and returns the record to write. Before it judges a change without a
// trace it waits for the ledger (Watches.Sync), so a write whose
// event is still unread is not missed. Before it keeps a key it asks the
// ledger about the inode's other names too (linkedSince).
func (c *checker) verdict(ctx context.Context, path string, p *prior, rec store.Record) (store.Record, outcome) {
	r := rehash{was: p.rec, now: rec.Identity(), backend: rec.Backend, digest: rec.Digest, seen: p.seen,
		racy: c.ticks.racyTick(&p.rec), trusted: store.Trusted(&p.rec, c.ticks.suspect)}
	recent := c.unread.recent(rec.CtimeNs)
	r.unread = recent && (c.sync != nil || c.unread.may(rec.CtimeNs))
	o := judge(r)
	if o == askLater && !c.unread.may(rec.CtimeNs) && c.syncLedger(ctx) {
		r.seen = r.seen || c.seenSince(path, p, rec.Dev, rec.Ino)
		r.unread = false
		o = judge(r)
	}
	if o == keepCorrupt || o == keepUntraced || o == askLater {
		r.linked = c.linkedSince(path, p.from, rec.Dev, rec.Ino, p.rec.HashedAt)
		o = judge(r)
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("judged", "path", path, "from", p.from, "outcome", o.String(), "was", p.rec.State.String(),
			"facts", fmt.Sprintf("%+v", r))
	}
	switch o {
	case keepCorrupt, keepUntraced:
		return kept(p.rec, rec, o), o
	}
	return rec, o
}

// linkedSince reports whether the ledger saw a write at or after sinceNs
// at another name of inode (dev, ino) than path and from: to that inode,
// or of an inode unknown (ledger, # Hard links). The names are those the
// index records for the inode, and those whose write queued path
// (recheckLinks), whose records may be gone.
func (c *checker) linkedSince(path, from string, dev, ino uint64, sinceNs int64) bool {
	names, err := c.st.ByInodeAll(dev, ino)
	if err != nil {
		c.log.Debug("cannot read the names of an inode", "path", path, "err", err)
	}
	others := c.pipe.pend.viaOf(path)
	for _, n := range names {
		others = append(others, string(n))
	}
	others = slices.DeleteFunc(others, func(q string) bool { return q == path || q == from })
	return ledger.SinceNames(c.ledger, others, dev, ino, sinceNs) == ledger.Written
}

// syncLedger waits until the ledger holds the writes made before now,
// and reports whether it could.
func (c *checker) syncLedger(ctx context.Context) bool {
	if c.sync == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if err := c.sync(ctx); err != nil {
		c.log.Debug("cannot sync the write ledger", "err", err)
		return false
	}
	return true
}

// seenSince reports whether the ledger saw a write to path, to p's path,
// or to inode (dev, ino), since p's record was hashed.
func (c *checker) seenSince(path string, p *prior, dev, ino uint64) bool {
	since := p.rec.HashedAt
	return c.ledger.Since(path, dev, ino, since) == ledger.Written ||
		(p.from != path && c.ledger.Since(p.from, dev, ino, since) == ledger.Written)
}

// conclude writes what hashing the file of j found, held against p (nil:
// no prior record), and reports the finding. It reports false when the
// file must wait for the ledger: nothing was written then.
func (c *checker) conclude(ctx context.Context, j job, p *prior, rec store.Record) (store.Record, bool) {
	if p == nil {
		c.pipe.write(j, shelving(j, rec))
		return rec, true
	}
	hashed := rec.Digest
	rec, o := c.verdict(ctx, j.path, p, rec)
	if o == askLater {
		return rec, false
	}
	kind := map[outcome]FindingKind{takeLost: FoundLostWrite, keepCorrupt: FoundCorrupt, keepUntraced: FoundUntraced}[o]
	ch := shelving(j, rec)
	ch.Finding = feedNames[kind] // the change feed logs it as rot
	// The finding is told after the write is submitted (the audit's
	// hearer submits a change that expects the record written), and
	// before the path's work ends (writeHeld).
	release := c.pipe.writeHeld(j, ch)
	c.displaced.written(rec.Dev, rec.Ino) // the inode has its record: submitted after it
	if kind != 0 {
		c.found(Finding{Path: j.path, Kind: kind, From: p.from, Was: p.rec, Now: rec, Digest: hashed})
	}
	release()
	return rec, true
}

// found logs a finding and hands it to Options.OnFinding. A record that
// was flagged already is logged at debug level: its finding stands.
func (c *checker) found(f Finding) {
	if f.Was.State == store.StateOK {
		c.log.Warn("bytes changed with no witness of a write; the key is kept", "path", f.Path,
			"finding", f.Kind.String())
	} else {
		c.log.Debug("a flagged file still has other bytes; the key is kept", "path", f.Path, "finding", f.Kind.String())
	}
	if f.Kind == FoundLostWrite {
		c.log.Warn("a write was lost: hashed again after an unclean end, the file holds other bytes under the same stat identity",
			"path", f.Path)
	}
	if c.onFinding != nil {
		c.onFinding(f)
	}
}

// priorOf is the prior record of the file fi at path, whose record has
// not been read yet: its own, or its inode's under another name (also
// when the record at path is of another inode: fi was renamed over it).
// Nil when there is none.
func (c *checker) priorOf(path string, fi fsstat.FileInfo) *prior {
	rec, ok, err := c.st.Get([]byte(path))
	if err != nil {
		return nil
	}
	if ok && (upgradeDev(&rec, fi) || rec.Dev != fi.Dev || rec.Ino == fi.Ino) {
		return c.ownPrior(path, fi, rec)
	}
	if p := c.moves.priorOf(path, fi); p != nil || !ok {
		return p
	}
	return c.ownPrior(path, fi, rec)
}

// ownPrior is the prior record of the file fi for its own record rec.
func (c *checker) ownPrior(path string, fi fsstat.FileInfo, rec store.Record) *prior {
	upgradeDev(&rec, fi)
	return &prior{rec: rec, from: path, seen: c.ledger.Since(path, fi.Dev, fi.Ino, rec.HashedAt) == ledger.Written}
}

// lastGood returns the prior record when its digest may still name the
// content of the file fi, which cannot be read: a record of its inode (its
// own, or one it had under another name: a rename, a swap of names, a
// displaced record), with no witness of a write since (size, mtime,
// inode, the ledger at either name, a racily clean record). An audit
// re-tries such a file. Otherwise nil.
func (p *prior) lastGood(fi fsstat.FileInfo, t *ticks) *store.Record {
	if p == nil || p.seen || !p.rec.HasDigest() || !keyed(p.rec.State) {
		return nil
	}
	r := &p.rec
	if !fsstat.OnFS(r.Dev, fi) || r.Ino != fi.Ino || r.Size != fi.Size || r.MtimeNs != fi.MtimeNs ||
		(r.State == store.StateOK && t.racyTick(r)) {
		return nil
	}
	return r
}
