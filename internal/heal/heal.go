package heal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Remote is a source of copies on the person's other hosts.
type Remote interface {
	// Fetch writes a verified copy of key's content to w (a temporary
	// file the caller owns), checking the digest before returning; host
	// names where it came from. ErrNoCopy when no other host holds a
	// verified copy.
	Fetch(ctx context.Context, key string, w io.Writer) (host string, err error)
}

// Lister is a Remote that can also say which hosts hold a key, without
// a transfer. A dry run asks it; only a heal reads and checks a copy.
type Lister interface {
	Holders(ctx context.Context, key string) ([]string, error)
}

// ErrNoCopy says no verified copy was found.
var ErrNoCopy = errors.New("heal: no verified copy")

// ErrUnreachable says other hosts cannot be asked now (the hub is not
// connected): a Remote wraps it; the heal is tried again later.
var ErrUnreachable = errors.New("heal: other hosts cannot be asked now")

// The outcomes of a file (File.Outcome).
const (
	Healed    = "healed"     // restored from a verified copy
	WouldHeal = "would_heal" // a dry run found a verified copy
	NoCopy    = "no_copy"    // no copy verified
	Changed   = "changed"    // the file changed since it was flagged
	Busy      = "busy"       // another process holds the file open: not touched
	Away      = "away"       // its file system is not mounted: not touched
	Refused   = "refused"    // not a corrupt finding, or the heal failed
)

// File is what a heal did, or would do, for one flagged file.
type File struct {
	Path    []byte
	Key     string // the recorded key: the content restored
	Outcome string
	Source  []byte // the copy's path on this host
	Host    string // the host a remote copy came from
	Aside   string // where the rotten bytes are kept
	Reason  string
	// Again: not healed for a passing reason (the file was open, other
	// hosts could not be asked): worth trying again before the next pass.
	Again bool
}

// Index is what a heal needs of the index (*store.Store).
type Index interface {
	Get(path []byte) (store.Record, bool, error)
	ByDigest(b key.Backend, digest []byte) ([][]byte, error)
	GetMeta(name string) ([]byte, bool, error)
	MetaPrefix(ctx context.Context, prefix string, fn func(name string, v []byte) error) error
	PutMeta(ctx context.Context, name string, v []byte) error
	DeleteMeta(ctx context.Context, name string) error
}

// Auditor is what a heal needs of the audit (*audit.Auditor).
type Auditor interface {
	Problems(ctx context.Context, fn func(audit.Problem) error) error
	Healed(ctx context.Context, h audit.HealRecord) error
	ReleaseHeals(ctx context.Context, path []byte, keep time.Duration) ([][]byte, error)
}

// Ledger is the write ledger (*ledger.Ledger).
type Ledger interface {
	Since(path string, dev, ino uint64, sinceNs int64) ledger.Answer
}

// Options configure a Healer. The zero value heals from this host alone.
type Options struct {
	// Remote fetches copies from other hosts; nil: this host only.
	Remote Remote
	// Ledger tells of writes stat does not show; nil: stat alone.
	Ledger Ledger
	// SyncWrites returns once Ledger holds every write made before the
	// call (watcher.Watcher.Sync); nil: nothing to wait for.
	SyncWrites func(ctx context.Context) error
	// Keep is how long rotten bytes stay aside; 0: until an accept.
	Keep   time.Duration
	Logger *slog.Logger
}

// Healer heals the audit's corrupt findings. Heals run one at a time.
type Healer struct {
	st  Index
	au  Auditor
	dg  audit.Digester
	o   Options
	log *slog.Logger
	mu  sync.Mutex
}

// New returns a Healer.
func New(st Index, au Auditor, dg audit.Digester, o Options) *Healer {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Healer{st: st, au: au, dg: dg, o: o, log: log}
}

// Heal heals the files flagged at or below paths (none: every finding).
// With dry it only says what it would do. Findings other than corrupt
// are listed as refused. It fails only when the findings cannot be
// listed; each file's failure is its outcome.
func (h *Healer) Heal(ctx context.Context, paths [][]byte, dry bool) ([]File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var todo []audit.Problem
	err := h.au.Problems(ctx, func(p audit.Problem) error {
		if len(paths) == 0 || underAny(p.Path, paths) {
			todo = append(todo, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]File, 0, len(todo))
	for i := range todo {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		f := h.one(ctx, &todo[i], peers(todo, i), dry)
		h.logFile(&f, dry)
		out = append(out, f)
	}
	if !dry {
		h.expire(ctx)
	}
	return out, nil
}

// expire removes the rotten bytes kept aside longer than Keep.
func (h *Healer) expire(ctx context.Context) {
	if h.o.Keep <= 0 {
		return
	}
	if _, err := h.au.ReleaseHeals(ctx, nil, h.o.Keep); err != nil {
		h.log.Warn("cannot remove rotten bytes past heal_keep", "err", err)
	}
}

func (h *Healer) logFile(f *File, dry bool) {
	attrs := []any{"path", string(f.Path), "key", f.Key, "outcome", f.Outcome, "reason", f.Reason}
	if f.Source != nil {
		attrs = append(attrs, "source", string(f.Source))
	}
	if f.Host != "" {
		attrs = append(attrs, "host", f.Host)
	}
	switch {
	case f.Outcome == Healed:
		h.log.Info("healed a corrupt file from a verified copy", append(attrs, "aside", f.Aside)...)
	case dry || f.Outcome == WouldHeal:
		h.log.Info("heal (dry run)", attrs...)
	default:
		h.log.Warn("a corrupt file was not healed", attrs...)
	}
}

// one heals, or with dry plans, the file of finding p.
func (h *Healer) one(ctx context.Context, p *audit.Problem, peers [][]byte, dry bool) File {
	f := File{Path: p.Path, Key: p.RecordedKey}
	if p.Class != audit.Corrupt {
		f.Outcome, f.Reason = Refused, notCorrupt(p.Class)
		return f
	}
	rot, res, why := h.rotten(p)
	if res != "" {
		f.Outcome, f.Reason = res, why
		return f
	}
	cs, err := h.candidates(p, rot, peers)
	if err != nil {
		f.Outcome, f.Reason = Refused, err.Error()
		return f
	}
	return h.fromCopies(ctx, p, rot, cs, dry)
}

// peers are the paths of the other findings with the recorded digest of
// todo[i]: copies too, rotten or not.
func peers(todo []audit.Problem, i int) [][]byte {
	var out [][]byte
	for j := range todo {
		if j != i && bytes.Equal(todo[j].Recorded, todo[i].Recorded) {
			out = append(out, todo[j].Path)
		}
	}
	return out
}

// notCorrupt says why a finding of class c is not healed.
func notCorrupt(c audit.Class) string {
	switch c {
	case audit.LostWrite:
		return "a lost write, not rot: the bytes on disk are the file now; annexctl audit accept acknowledges it"
	case audit.Untraced:
		return "changed without a trace, not surely rot (a chmod or a rewrite may have made it): restore it by hand or accept it"
	case audit.Unreadable:
		return "unreadable: heal replaces only a file whose bytes were read and found wrong"
	}
	return fmt.Sprintf("a %s finding is not healed", c)
}

// underAny reports whether p is at or below one of dirs.
func underAny(p []byte, dirs [][]byte) bool {
	for _, d := range dirs {
		if under(p, d) {
			return true
		}
	}
	return false
}

func under(p, dir []byte) bool {
	if len(p) < len(dir) || string(p[:len(dir)]) != string(dir) {
		return false
	}
	return len(p) == len(dir) || dir[len(dir)-1] == '/' || p[len(dir)] == '/'
}
