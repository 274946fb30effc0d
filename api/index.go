package api

import (
	"context"
	"time"

	"github.com/annexd/annexd/key"
)

// Index is what the server needs of the daemon. The daemon implements it;
// the server calls it from many goroutines at once, so every method must be
// safe for concurrent use. Paths given to Index methods are absolute, cleaned
// (no "." or ".." components, no trailing slash) and under one of Roots().
type Index interface {
	// Roots returns the watched roots as absolute, cleaned paths, in the
	// form the index stores paths under them. The server calls it on every
	// request that names a path (to refuse paths outside the roots with a
	// 4xx), so it must be cheap and must not block.
	Roots() []string

	// Lookup reports the key of the file at path as it is now. It lstats the
	// path and compares (dev, ino, size, mtime_ns, ctime_ns) with the stored
	// record. When they agree it returns StateCurrent with the key. When
	// they differ, or there is no record yet, it may hash the file on
	// demand (bounded in size and time); failing that, with wait false it
	// returns StatePending, and with wait true it waits until the file has
	// been indexed (or ctx ends, then StatePending). It never returns a key
	// that does not match the file's current content as StateCurrent.
	// Files that will never be indexed get StateMissing, StateNotRegular,
	// StateIgnored or StateUnreadable (with Message). The returned error is
	// for failures of the index itself (store closed, I/O error on the
	// index), not for problems with this path.
	Lookup(ctx context.Context, path []byte, wait bool) (LookupResult, error)

	// Whereis calls fn, in path order, for every indexed file whose content
	// has q.Digest under q.Backend's hash (the bare digest: SHA256E and
	// SHA256 keys with the same digest match each other, whatever the
	// extension). Each Location's Key is derived from the digest, size and
	// that location's own file name. Files whose stored record no longer
	// matches a fresh lstat are reported with Stale set (not as current).
	// Extra names of one inode have LinkOf, and copies that share blocks
	// with an earlier one have SharesWith, as far as the index knows.
	// An error returned by fn stops the walk and is returned.
	Whereis(ctx context.Context, q WhereisQuery, fn func(Location) error) error

	// Dups calls fn for each group of two or more distinct files (hardlinks
	// to one inode count once) with the same bare digest and a size of at
	// least q.MinSize, ordered by duplicate bytes (Size × (files − 1))
	// descending, ties broken by digest ascending. Unless q.Outside, files
	// outside the roots are left out and the figures count the rest; such
	// a group keeps the place its whole group gives it. With q.Paths, only
	// groups with a file at or below one of them are listed, whole. It
	// starts after the group whose Cursor is q.After (nil: from the
	// start) and stops after q.Limit groups (0: no limit). Memory must
	// stay flat however many groups there are. Files need no fresh lstat
	// here (leave Stale false), and a group's survey of block sharing may
	// be reused until a record of it changes (unless q.Resurvey): a
	// listing of thousands of groups should cost little more than reading
	// the index, and whoever acts on a group re-checks the files first.
	// An error returned by fn stops the walk and is returned.
	Dups(ctx context.Context, q DupQuery, fn func(DupGroup) error) error

	// Status returns a snapshot of the daemon's state. It must be cheap (no
	// walk over the index): a client waiting for idle calls it ~10 times a
	// second. The server fills in APIVersion.
	Status(ctx context.Context) (Status, error)

	// Backend returns the backend the index hashes with (either variant).
	// The server refuses whereis of another hash's key with
	// CodeOtherBackend, instead of answering that no file has that content.
	Backend() key.Backend

	// Forget drops every record at or below dir that is outside the roots
	// (with dryRun, only counts them) and reports how many
	// (POST /v1/forget). dir is absolute, clean and not at or below a root
	// (the server refuses those with CodeUnderRoot); it may hold roots,
	// whose records are kept.
	Forget(ctx context.Context, dir []byte, dryRun bool) (ForgetResult, error)

	// Sync returns once the daemon has seen every file system change
	// made before the call (it is pending or indexed), or ctx ends. GET
	// /v1/status?wait=idle calls it first, so the wait covers every change
	// made before the request. An index without a watcher returns nil.
	Sync(ctx context.Context) error

	// WaitIdle returns once the index's own work is done (its Status may
	// still say busy for other reasons), or ctx ends: a status long poll
	// waits on it, and reads Status only when it returns. An index that
	// cannot tell returns at once; the server then asks Status again a
	// little later.
	WaitIdle(ctx context.Context) error
}

// LookupState says what a LookupResult means.
type LookupState string

// Lookup states. Only StateCurrent carries a key to be trusted as the
// file's key now.
const (
	// StateCurrent: Key is the key of the file's content now.
	StateCurrent LookupState = "current"
	// StatePending: the file is new or changed and has not been hashed yet;
	// Key is empty.
	StatePending LookupState = "pending"
	// StateMissing: nothing exists at the path.
	StateMissing LookupState = "missing"
	// StateNotRegular: the path is a directory, symlink, device, fifo or
	// socket; only regular files have keys.
	StateNotRegular LookupState = "not_regular"
	// StateIgnored: the path matches an ignore pattern and is not indexed.
	StateIgnored LookupState = "ignored"
	// StateUnreadable: the file could not be read (Message says why).
	StateUnreadable LookupState = "unreadable"
	// StateAnnexLink: the path is a git-annex symlink (a locked annexed
	// file) into annex/objects; Key is the key it names, as "git annex
	// lookupkey" prints it. The content was not hashed.
	StateAnnexLink LookupState = "annex_link"
	// StateCorrupt: the file is unchanged by its metadata but its content no
	// longer hashes to the recorded key (an audit found it); Key is the
	// recorded key, not the content's.
	StateCorrupt LookupState = "corrupt"
	// StateUntraced: the content no longer hashes to the recorded key and
	// only the file's ctime moved (a chmod, a link, or a write with the
	// mtime set back that annexd did not see): an edit as likely as rot.
	// Key is the recorded key, not the content's.
	StateUntraced LookupState = "untraced"
	// StateAbsent: nothing is at the path, and its record is of a file
	// system not mounted there now (a disk unplugged, another one in its
	// place): the record is kept for when it is back. Key is the recorded
	// key, Finding the record's flagged state, if any; Message names the
	// file system.
	StateAbsent LookupState = "absent"
	// StateOutsideRoots: the path is not under any watched root. The
	// server sets it; Index.Lookup never sees such paths.
	StateOutsideRoots LookupState = "outside_roots"
	// StateInvalid: the request line could not be read as a path (Message
	// says why). Only in batch lookups; the server sets it.
	StateInvalid LookupState = "invalid"
)

// LookupResult is the answer for one path.
type LookupResult struct {
	Path    []byte      // the path as looked up (absolute, cleaned)
	State   LookupState // what this result means
	Key     key.Key     // the key; zero unless State is current, corrupt, untraced or absent
	Size    int64       // file size in bytes when known, else 0
	Message string      // detail for the user (why unreadable, …); may be empty
	// VerifiedAt is when the content was last read and found to match the
	// key (hashed, or verified by an audit); zero when never or unknown.
	VerifiedAt time.Time
	// Finding is an absent file's finding: StateCorrupt or StateUntraced,
	// as audit problems lists it; empty when it has none.
	Finding LookupState
}

// WhereisQuery names content by its bare digest.
type WhereisQuery struct {
	Backend key.Backend // the hash; E and non-E variants are equivalent
	Digest  []byte      // Backend.DigestLen() bytes
}

// Location is one indexed file.
type Location struct {
	Path  []byte  // absolute path
	Key   key.Key // key for this file (extension from its own name)
	Size  int64   // size in bytes
	State string  // the stored record's state ("ok", "corrupt", "untraced", …)
	Stale bool    // the file changed since it was hashed; Key may be wrong
	// OutsideRoots: the path is not under any of the daemon's roots. Its
	// record is left from an earlier run with other roots: nothing watches
	// or re-checks it, so the file may have changed or be gone.
	OutsideRoots bool
	// LinkOf names an earlier file of the list that this one is a hard
	// link of: the same inode, not another copy.
	LinkOf []byte
	// SharesWith names an earlier file of the list whose blocks this one
	// shares (a reflink, or a copy deduplicated): another inode, but not
	// another physical copy.
	SharesWith []byte
}

// DupQuery selects duplicate groups.
type DupQuery struct {
	MinSize int64  // only files of at least this many bytes
	After   []byte // resume after the group with this Cursor; nil from the start
	Limit   int    // at most this many groups; 0 means no limit
	// Outside includes members outside the daemon's roots (marked
	// OutsideRoots). Without it they are left out, and so is every group
	// left with fewer than two distinct inodes; the figures count only the
	// members listed.
	Outside bool
	// Paths, absolute and clean, list only the groups with a file at or
	// below one of them (none: every group).
	Paths [][]byte
	// Resurvey looks at the blocks of every group listed again, instead
	// of reusing a survey made since its records last changed.
	Resurvey bool
}

// DupGroup is a set of distinct files with the same content.
type DupGroup struct {
	Backend key.Backend // the hash (either variant: SHA256 or SHA256E)
	Digest  []byte      // bare digest
	Size    int64       // size of each file
	Copies  int         // distinct inodes among Files: hard links count once
	// Duplicate is Size × (Copies − 1): the bytes of the extra copies,
	// whether they share blocks or not.
	Duplicate int64
	// Reclaimable is what making the copies on each file system share one
	// copy's blocks would give back: blocks not shared already, holes not
	// counted, hard links once.
	Reclaimable int64
	// Physical counts the physical copies among Files: copies that share
	// blocks count once.
	Physical int
	// Unsurveyed counts the copies whose blocks could not be looked at
	// (gone, unreadable): Reclaimable leaves them out, as dedup could not
	// act on them either.
	Unsurveyed int
	// SurveyedAt is when the blocks were looked at.
	SurveyedAt time.Time
	Files      []Location // two or more, path order; extra names of an inode have LinkOf
	// Cursor is an opaque position: a DupQuery with After = Cursor resumes
	// right after this group. The server hands it to clients as base64.
	Cursor []byte
}

// Status is a snapshot of the daemon.
type Status struct {
	Version       string    `json:"version"`        // annexd version
	APIVersion    int       `json:"api_version"`    // set by the server
	GoVersion     string    `json:"go_version"`     // runtime.Version()
	PID           int       `json:"pid"`            // daemon process id
	StartedAt     time.Time `json:"started_at"`     // daemon start
	IndexPath     string    `json:"index_path"`     // the bbolt file
	SchemaVersion int       `json:"schema_version"` // index schema

	Roots   []RootStatus `json:"roots"`
	Files   int64        `json:"files"`   // indexed files
	Bytes   int64        `json:"bytes"`   // their total size
	Pending int64        `json:"pending"` // files waiting to be (re)hashed
	// Idle is true when the initial scan of every root is done and nothing
	// is pending, being hashed or in the Backlog.
	Idle bool `json:"idle"`
	// Backlog counts the changes the daemon could not write to its index
	// yet; they are retried, and the daemon is not idle meanwhile.
	Backlog Backlog `json:"backlog"`
	// Starting says what the daemon does before it serves the index
	// ("calibrating hashing"); empty once it serves. Until then only
	// ping, status and metrics are answered; the rest get 503.
	Starting string `json:"starting,omitempty"`

	// OutsideRoots lists where the index holds records outside the
	// roots (left from earlier runs with other roots), once the check
	// that runs at start has finished (OutsideRootsChecked).
	OutsideRoots        []OutsideRoot `json:"outside_roots,omitempty"`
	OutsideRootsChecked bool          `json:"outside_roots_checked"`
	// Away lists the file systems whose records are kept aside because
	// another file system is where they were (a second disk mounted in
	// the first one's place); they come back when it does.
	Away []AwayFileSystem `json:"away_file_systems,omitempty"`

	Scan        ScanProgress  `json:"scan"`
	Watcher     WatcherStatus `json:"watcher"`
	Calibration *Calibration  `json:"calibration,omitempty"`
	Dedup       *DedupStatus  `json:"dedup,omitempty"`
	Hub         *HubStatus    `json:"hub,omitempty"` // the link to a hub, when configured
	Audit       *AuditStatus  `json:"audit,omitempty"`
}

// Backlog is what the daemon holds because it cannot write its index:
// the file system holding the index is full. Its writer tries again as
// soon as there is room.
type Backlog struct {
	Changes int64     `json:"changes"`          // changes waiting to be written; 0 with none
	Since   time.Time `json:"since,omitzero"`   // when the first was refused
	Reason  string    `json:"reason,omitempty"` // why, e.g. "no space left on device"
}

// AwayFileSystem is a file system whose records wait for it to be
// mounted where it was.
type AwayFileSystem struct {
	ID       string    `json:"id"`  // as records name it, hexadecimal
	Key      string    `json:"key"` // what it is known by, e.g. "uuid:8bfc0409…"
	Type     string    `json:"type,omitempty"`
	Source   string    `json:"source,omitempty"`
	Point    string    `json:"mount_point,omitempty"` // where it was last mounted
	LastSeen time.Time `json:"last_seen,omitzero"`
	Records  int64     `json:"records"` // kept aside
}

// RootStatus is one watched root.
type RootStatus struct {
	Path     string `json:"path"`      // absolute, cleaned
	ScanDone bool   `json:"scan_done"` // its initial scan finished
	Watched  bool   `json:"watched"`   // fully covered by inotify watches
	Degraded bool   `json:"degraded"`  // partly covered by periodic rescans only
	Reason   string `json:"reason,omitempty"`
	// Away says why the root cannot be watched at all, e.g. "file system
	// not mounted, waiting"; its records are kept until it is back.
	Away string `json:"away,omitempty"`

	// Overflows counts the inotify queue overflows since start. Events
	// were lost in each, so the whole root is rescanned after it.
	Overflows    int       `json:"overflows"`
	LastOverflow time.Time `json:"last_overflow,omitzero"` // the latest overflow
	LastRescan   time.Time `json:"last_rescan,omitzero"`   // the latest rescan of the whole root
	// RescanPending: the latest overflow has no rescan after it yet.
	RescanPending bool `json:"rescan_pending,omitempty"`
}

// ScanProgress counts the work of the current (or last) scan.
type ScanProgress struct {
	Running     bool  `json:"running"`
	FilesSeen   int64 `json:"files_seen"`
	BytesSeen   int64 `json:"bytes_seen"`
	FilesHashed int64 `json:"files_hashed"`
	BytesHashed int64 `json:"bytes_hashed"`
	FilesQueued int64 `json:"files_queued"`
	BytesQueued int64 `json:"bytes_queued"`
	// EstimateSeconds is the estimated time left, or 0 when unknown: it
	// counts what the running walks have still to find (Walk).
	EstimateSeconds float64 `json:"estimate_seconds"`
	// Walk is the progress of the scans under way (WalkProgress); absent
	// when none is.
	Walk *WalkProgress `json:"walk,omitempty"`
}

// WalkProgress is the progress of the scans under way, against what they
// are expected to find in all. Scans of several roots, one after the
// other, count as one piece of work, from the first one's start until
// the last one's files are settled: their totals only grow, and a root
// still to walk counts with what its last scan saw.
type WalkProgress struct {
	Walking int   `json:"walking"` // walks running now; 0 once the files they met are all that is left
	Files   int64 `json:"files"`   // files the walks saw so far
	Bytes   int64 `json:"bytes"`   // their sizes; a first scan counts a file's size once it opens the file, so this lags Files
	// ExpectFiles and ExpectBytes are the expected totals; ExpectFrom
	// says whence: "previous scan" (what the last complete scan of the
	// root saw), "count" (a counting walk beside this one), "counting"
	// (that count still runs: a lower bound; EstimateSeconds is then 0).
	ExpectFiles int64  `json:"expect_files"`
	ExpectBytes int64  `json:"expect_bytes"`
	ExpectFrom  string `json:"expect_from"`
	// DoneBytes counts the bytes seen that are settled (hashed, or found
	// unchanged); below the total while anything is left.
	DoneBytes int64 `json:"done_bytes"`
}

// WatcherStatus is the health of the inotify watches.
type WatcherStatus struct {
	Healthy       bool     `json:"healthy"`
	Watches       int64    `json:"watches"`        // watches in use
	WatchLimit    int64    `json:"watch_limit"`    // fs.inotify.max_user_watches
	WatchesNeeded int64    `json:"watches_needed"` // estimate for full coverage
	Degraded      []string `json:"degraded_roots,omitempty"`
	// Message tells the user what to do, e.g. the sysctl that raises the
	// watch limit. Empty when healthy.
	Message string `json:"message,omitempty"`
}

// Calibration is the hasher's startup calibration result.
type Calibration struct {
	Summary    string            `json:"summary"` // one line for humans
	Params     map[string]string `json:"params,omitempty"`
	MeasuredAt time.Time         `json:"measured_at"`
}
