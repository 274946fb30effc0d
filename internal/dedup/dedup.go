package dedup

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Index is what dedup reads of the index. *store.Store implements it.
type Index interface {
	// Dups calls fn for each duplicate group, largest waste first.
	Dups(ctx context.Context, opts store.DupOptions, fn func(store.Group) error) error
	// Get returns the record of one path.
	Get(path []byte) (store.Record, bool, error)
	// DupGroup reads one duplicate group.
	DupGroup(b key.Backend, d []byte, opts store.DupOptions) (store.Group, bool, error)
	// SubmitSurvey keeps the survey of a whole group until a record of
	// it changes (store.PutSurvey), without waiting.
	SubmitSurvey(b key.Backend, d []byte, sv store.Survey, seen []store.Seen, done func(error))
	// DropSurvey forgets the survey of a group, without waiting.
	DropSurvey(b key.Backend, d []byte)
}

// Ledger says whether the watcher saw a write to a file at or after a
// time. The daemon's write ledger implements it.
type Ledger interface {
	WrittenSince(path string, dev, ino uint64, sinceNs int64) bool
}

// Indexer is what deduplication needs of the indexer (*indexer.Indexer).
type Indexer interface {
	// Rehash asks for path to be checked and hashed again, because its
	// content or its inode no longer matches its record. It returns once
	// the path is queued, or the indexer stopped.
	Rehash(path string)
}

// Options configure a Deduper. The zero value works for reflink mode.
type Options struct {
	// Ledger, when set, makes every action skip a file written since its
	// record was hashed, even when its stat looks unchanged.
	Ledger Ledger
	// Intents is the journal hardlink mode writes before it acts. Without
	// it, hardlink mode is refused with ErrNoIntents.
	Intents Intents
	// Indexer hears of paths whose content or inode no longer matches
	// their records; nil: none is told.
	Indexer Indexer
	// Roots are the daemon's roots. Hardlink mode links a copy only to a
	// keeper whose every link is a name the index holds inside them, and
	// recovery looks under them for a folder renamed while the daemon was
	// down. None: any indexed name counts, and recovery looks under the
	// nearest folder above the recorded one that is still there.
	Roots [][]byte
	// Grace is how long hardlink mode keeps the old copy where it can put
	// it back after the exchange, so that a process that found the copy's
	// name just before and opens, changes or links it just after undoes
	// the exchange instead of losing its work. Default 50 ms.
	Grace time.Duration
	// Workers is how many groups a run works on at once. Default 4: the
	// kernel's comparisons wait on the disk more than on the CPU.
	Workers int
	// AtStep, when set, is called after each step of a move to the trash
	// ("trash-intent", "trash-info", "trashed"): a seam for the end-to-end
	// tests, which kill the daemon there.
	AtStep func(step string)
	// Logger receives what a run skipped and why. Default: discard.
	Logger *slog.Logger
}

// Deduper plans and carries out deduplication runs over one index.
type Deduper struct {
	idx Index
	opt Options
	log *slog.Logger

	// turn serialises runs that change files, so two never race on one
	// pair and hardlink recovery sees every journal entry settled.
	turn chan struct{}
}

// New returns a Deduper over idx.
func New(idx Index, opt Options) *Deduper {
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Deduper{idx: idx, opt: opt, log: log, turn: make(chan struct{}, 1)}
}

// Request is one run as a caller asks for it.
type Request struct {
	PlanOptions
	// Caller is who asks. Files the caller cannot read are left out of
	// the plan, and files the caller could not modify are not acted on.
	// nil is the daemon acting for itself: only the kernel's checks apply.
	Caller *Caller
	// DataHome is the caller's $XDG_DATA_HOME, or empty: trash mode puts
	// the copies on its file system in DataHome/Trash when the caller owns
	// it, and the others in the trash of their own mount.
	DataHome []byte
	// Progress, when set, is called after each action.
	Progress func(Progress)
}

// Progress is how far a run got.
type Progress struct {
	Done, Total int   // actions finished (done or skipped), actions planned
	Freed       int64 // bytes freed so far
	Path        []byte
}

// Reason says why an action was not done.
type Reason string

// The reasons an action is skipped.
const (
	SkipShared      Reason = "already-shared"   // the target already shares the keeper's blocks
	SkipNoBlocks    Reason = "no-blocks"        // nothing of the file's own to free: inline or sparse
	SkipChanged     Reason = "changed"          // a file no longer matches its record
	SkipAway        Reason = "away"             // a file's file system is not mounted at its path (a disk unplugged or unmounted)
	SkipWritten     Reason = "written"          // the ledger saw a write since the record was hashed
	SkipDiffers     Reason = "differs"          // the bytes differ; both files are hashed again
	SkipOpen        Reason = "open-for-writing" // hardlink: a process holds a file open for writing
	SkipInUse       Reason = "in-use"           // hardlink: a process holds the copy open
	SkipRaced       Reason = "raced"            // hardlink: a process opened, changed or linked a file during the exchange; it was undone
	SkipMetadata    Reason = "metadata-differs" // hardlink: owner, group or mode differ
	SkipXattrs      Reason = "xattrs-differ"    // hardlink: the target's xattrs or ACLs would be lost
	SkipLinks       Reason = "links-elsewhere"  // hardlink: the copy has names outside the plan, or several; the keeper has links the index does not know
	SkipPermission  Reason = "permission"       // the caller could not modify the file itself
	SkipSymlink     Reason = "symlink"          // a symlink is in the path
	SkipUnsupported Reason = "unsupported"      // the file system cannot share extents
	SkipOtherMount  Reason = "other-mount"      // keeper and target are on different mounts
	SkipRefused     Reason = "refused"          // the kernel refused: immutable, append-only, swap, no copy-on-write
	SkipNoTrash     Reason = "no-trash"         // trash: the file system has no trash the caller may use
	SkipError       Reason = "error"            // any other failure, in Skip.Detail
)

// Skip is one action that was not done.
type Skip struct {
	Keeper, Target []byte
	Reason         Reason
	Detail         string // the error, or what would be lost
	Freed          int64  // bytes freed before the action stopped: a copy shared in part
}

// Result is what a run did.
type Result struct {
	Mode        Mode
	Planned     int                 // actions in the plan
	Done        int                 // actions that made a target share its keeper's storage
	Freed       int64               // bytes the file system freed, as it reports them, skipped actions' parts included
	Skipped     map[Reason]int      // actions not done, by reason
	Skips       []Skip              // each of them
	Unsupported []*UnsupportedError // file systems that could not share extents
}

func (r *Result) skip(s Skip) {
	if r.Skipped == nil {
		r.Skipped = map[Reason]int{}
	}
	r.Skipped[s.Reason]++
	r.Skips = append(r.Skips, s)
}

// keepSurvey hands the survey of a whole group to the index, and counts
// it in kept until the index has taken it, or refused it when a record
// changed meanwhile (then nothing is kept). A plan or a run waits for
// kept before it returns, so that what the index says is reclaimable
// right after it is what it found or left.
func (d *Deduper) keepSurvey(b key.Backend, digest []byte, sv store.Survey, seen []store.Seen, kept *sync.WaitGroup) {
	kept.Add(1)
	d.idx.SubmitSurvey(b, digest, sv, seen, func(error) { kept.Done() })
}

// maxResurvey is the most inodes a group may have for a run to survey it
// again after acting on it; a larger group's survey is dropped instead,
// so a run of one action in a group of many copies stays short.
const maxResurvey = 64

// Resurvey surveys the group of digest d again and keeps what it finds,
// or drops its survey when the group is larger than maxResurvey inodes.
// A run calls it for each group it changed: sharing blocks changes no
// record, so nothing else would drop the group's older survey.
func (d *Deduper) Resurvey(b key.Backend, digest []byte, kept *sync.WaitGroup) {
	g, ok, err := d.idx.DupGroup(b, digest, store.DupOptions{Brief: true})
	switch {
	case err != nil || !ok:
		return
	case g.Inodes > maxResurvey:
		d.idx.DropSurvey(b, digest)
		return
	}
	sv, seen := SurveyGroup(g)
	if !Keepable(&sv, g) {
		d.idx.DropSurvey(b, digest) // the run changed its blocks: the older one is wrong
		return
	}
	d.keepSurvey(b, digest, sv, seen, kept)
}
