package audit

import (
	"context"
	"sync"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// checker gathers the witnesses of one file and reads it as often as
// Classify asks: it decides, it writes nothing. It learns, once, how the
// readers' idle I/O class fares on the disk.
type checker struct {
	o      *Options // the Auditor's; read only
	st     Store    // for the names of an inode
	dg     Digester
	gran   fsstat.Granularities
	book   *book // the findings, for the class of the one standing
	ioMu   sync.Mutex
	ioNote string
	ioOnce sync.Once
}

// syncTimeout bounds the wait for the write ledger.
const syncTimeout = 10 * time.Second

// ioPriority says how the readers' idle I/O class fares ("" before the
// first read).
func (c *checker) ioPriority() string {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	return c.ioNote
}

// noteIO records, once, how the readers' I/O class fares.
func (c *checker) noteIO(s string) {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	if c.ioNote == "" {
		c.ioNote = s
	}
}

// check gathers the witnesses of one file, reading it as often as
// Classify asks.
func (c *checker) check(ctx context.Context, rd *reader, d *store.Due, looks func() int) outcome {
	path := string(d.Path)
	out := outcome{f: Facts{Record: d.Record}}
	f := &out.f
	f.Before, f.BeforeErr = fsstat.Lstat(path)
	if (f.BeforeErr == nil || gone(f.BeforeErr)) && c.o.Indexer != nil {
		f.Busy = c.o.Indexer.Busy(path)
	}
	if gone(f.BeforeErr) {
		f.Away = fsstat.Away(path, d.Record.Dev)
		c.noteSettling(f, looks)
	}
	if f.BeforeErr == nil && f.Before.IsRegular() && !sameIdentity(&d.Record, f.Before) {
		f.OpenErr = probeOpen(path)
	}
	if f.BeforeErr == nil {
		f.Seen = c.seen(path, f.Before, &d.Record)
	}
	if d.Record.State != store.StateOK {
		f.Standing = c.book.standing(ctx, path, &d.Record)
	}
	for {
		v := Classify(f)
		switch v.Next {
		case Decided:
			if src := out.source(); v.Class == Corrupt && src != FromDevice {
				v.Why += "; read from the page cache only: " + src.why()
			}
			out.v = v
			return out
		case ReadIt:
			out.readAt = time.Now().UnixNano()
			f.First = c.readOnce(ctx, rd, path, f.Before, d.Record.Backend, false)
			c.witness(f, path)
			if gone(f.First.Err) {
				f.Away = f.Away || fsstat.Away(path, d.Record.Dev)
				c.noteSettling(f, looks)
			}
		case ReadAgain:
			f.Second = c.readOnce(ctx, rd, path, f.Before, d.Record.Backend, true)
			if gone(f.Second.Err) {
				f.Away = f.Away || fsstat.Away(path, d.Record.Dev)
				c.noteSettling(f, looks)
			}
		case SyncLedger:
			f.Synced, f.SyncErr = true, c.syncLedger(ctx)
			f.Seen = f.Seen || c.seen(path, f.Before, &d.Record)
		}
	}
}

// maxSettleLooks bounds the looks at a gone file put off while the
// indexer has changes on their way (Indexer.Settling, which any change
// under the roots keeps true): a busy machine would otherwise leave a file
// removed behind the indexer's back uncounted, pass after pass. A rename
// is applied within a look or two.
const maxSettleLooks = 3

// noteSettling notes, for a file found gone, whether the index may not
// say why yet (Facts.Settling): the run meets the path for the first
// time (looks says how often it met it before), or, for a few looks, the
// indexer has changes on their way.
func (c *checker) noteSettling(f *Facts, looks func() int) {
	if c.o.Indexer != nil && !f.Away && !f.Busy {
		n := looks()
		f.Settling = n == 0 || n < maxSettleLooks && c.o.Indexer.Settling()
	}
}

// syncLedger waits until the write ledger holds the writes made before
// now (Options.SyncWrites), for at most syncTimeout.
func (c *checker) syncLedger(ctx context.Context) error {
	if c.o.SyncWrites == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	return c.o.SyncWrites(ctx)
}

// seen reports whether the ledger saw a write to the file fi at path, by
// path or inode, since rec was hashed. Its doubts are no write. Where a
// write may hide behind the ctime (it moved, or a finding took it), a
// write seen at another name the index records for the inode counts too
// (ledger, # Hard links): a write through any name moves the ctime.
func (c *checker) seen(path string, fi fsstat.FileInfo, rec *store.Record) bool {
	l := c.o.Ledger
	switch {
	case l == nil:
		return false
	case l.Since(path, fi.Dev, fi.Ino, rec.HashedAt) == ledger.Written:
		return true
	case fi.CtimeNs == rec.CtimeNs && rec.State == store.StateOK:
		return false
	}
	names, err := c.st.ByInodeAll(fi.Dev, fi.Ino)
	if err != nil {
		return false
	}
	others := make([]string, 0, len(names))
	for _, n := range names {
		if q := string(n); q != path {
			others = append(others, q)
		}
	}
	return ledger.SinceNames(l, others, fi.Dev, fi.Ino, rec.HashedAt) == ledger.Written
}

func (c *checker) readOnce(ctx context.Context, rd *reader, path string, before fsstat.FileInfo, b key.Backend, again bool) *Read {
	h, err := c.dg.NewHash(b)
	if err != nil {
		return &Read{Err: err}
	}
	rd.sha256 = b.Base() == key.SHA256
	res := rd.read(ctx, path, before, h, again)
	if res.dev != 0 {
		c.ioOnce.Do(func() { c.noteScheduler(res.dev) })
	}
	return &res
}

// noteScheduler says whether the disk behind dev honours the idle class.
func (c *checker) noteScheduler(dev uint64) {
	switch s := schedulerOf(c.o.SysDir, dev); {
	case s == "":
		c.noteIO("idle (no block device: the class does not apply)")
	case idleHonoured(s):
		c.noteIO("idle (honoured by the " + s + " scheduler)")
	default:
		c.noteIO("idle (the " + s + " scheduler ignores I/O classes; the rate cap still applies)")
	}
}

// witness asks the ledger (again: a write may have been read meanwhile),
// the timestamp granularity and the record of unclean shutdowns about the
// file, after its first read.
func (c *checker) witness(f *Facts, path string) {
	r := &f.Record
	c.gran.Learn(f.Before.Dev, path)
	f.Racy = r.State == store.StateOK && racy(r, int64(c.gran.Of(f.Before.Dev)))
	f.Seen = f.Seen || c.seen(path, f.Before, r)
	if c.o.Crashes != nil {
		f.Unclean = c.o.Crashes.Suspect(r)
	}
}
