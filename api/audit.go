package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Auditor is the daemon's audit: it reads the files again and tells bit
// rot from edits (/v1/audit/...). A server without one answers 404.
// Paths are as the index stores them.
type Auditor interface {
	// AuditStart starts a run now and returns its id, never one it
	// handed out before. ErrNotFound when nothing is indexed at a path.
	AuditStart(ctx context.Context, req AuditRequest) (uint64, error)
	// AuditRun returns run id's summary; with wait, once it has ended or
	// ctx ends, whichever comes first. ErrNotFound for an unknown id.
	AuditRun(ctx context.Context, id uint64, wait bool) (AuditRun, error)
	// AuditStatus says what the audit does.
	AuditStatus(ctx context.Context) (AuditStatus, error)
	// AuditProblems calls fn for each file found not ok, in path order.
	AuditProblems(ctx context.Context, fn func(AuditProblem) error) error
	// AuditPause pauses the audit, across restarts; with paused false it
	// lets scheduled runs start again.
	AuditPause(ctx context.Context, paused bool) error
	// AuditAccept takes the content the flagged files at or below path
	// have now. ErrNotFound when nothing there is flagged.
	AuditAccept(ctx context.Context, path []byte) (AuditAcceptResult, error)
	// AuditHistory returns the passes completed, oldest first: the last
	// 100 the daemon keeps.
	AuditHistory(ctx context.Context) ([]AuditPassSummary, error)
}

// AuditRequest is a run asked for by hand.
type AuditRequest struct {
	// Paths narrow the run to the files at or below them; none: the
	// whole index. The server checks that each is under a root.
	Paths     [][]byte
	TimeLimit time.Duration // 0: none
	FullSpeed bool          // every CPU, no rate cap, no gates
}

// How an audit run ended (AuditRun.StoppedBy).
const (
	AuditDone       = "done"
	AuditTimeLimit  = "time_limit"
	AuditWindow     = "window_closed"
	AuditPaused     = "paused"
	AuditSuperseded = "superseded"
	AuditShutdown   = "shutdown"
	AuditError      = "error"
)

// AuditRun is one run of the audit, ended or not.
type AuditRun struct {
	ID               uint64    `json:"id"`
	Manual           bool      `json:"manual"` // asked for, not scheduled
	FullSpeed        bool      `json:"full_speed,omitempty"`
	TimeLimitSeconds float64   `json:"time_limit_seconds,omitempty"`
	Began            time.Time `json:"began,omitzero"` // zero until it begins
	Ended            time.Time `json:"ended,omitzero"` // zero while it goes on
	// StoppedBy is an Audit* value once it ended: AuditDone when it read
	// everything it was to read.
	StoppedBy string `json:"stopped_by,omitempty"`
	Error     string `json:"error,omitempty"`
	// Counts are the files decided, by class: ok, corrupt, untraced,
	// lost_write, modified, missing, unreadable.
	Counts    map[string]int64 `json:"counts"`
	Bytes     int64            `json:"bytes"`     // bytes verified
	Transient int64            `json:"transient"` // files a second read proved ok
	// CacheOnly counts the ok files whose bytes came from the page cache
	// only: no device could be read for them.
	CacheOnly AuditCacheOnly `json:"cache_only,omitzero"`
	// Left counts the files the run gave up on; they stay due.
	Left AuditLeft `json:"left,omitzero"`
}

// AuditLeft counts the files an audit gave up on: busy (written to) every
// time it tried, or their file system not mounted (Away of Files). They
// are read in a later run.
type AuditLeft struct {
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	Away  int64 `json:"away,omitempty"`
}

// Why a verified file's bytes came from the page cache only (the keys of
// AuditCacheOnly.Files).
const (
	// AuditNoDevice: the file system keeps its files in memory (tmpfs,
	// ramfs): there is no device to verify.
	AuditNoDevice = "no_device"
	// AuditNoDirect: the file system or its device refuses direct reads
	// (some FUSE and network file systems), or answers them from a cache
	// of its own (ZFS).
	AuditNoDirect = "no_direct"
	// AuditCached: the file system reads the file through the page cache
	// even when asked for a direct read (compressed or inline on btrfs),
	// and the page cache held some of it.
	AuditCached = "cached"
)

// AuditCacheOnly counts files verified from the page cache only, not
// from a device. They are counted as ok as well.
type AuditCacheOnly struct {
	Files map[string]int64 `json:"files,omitempty"` // by why: AuditNoDevice, AuditNoDirect, AuditCached
	Bytes int64            `json:"bytes,omitempty"`
}

// IsZero reports whether no file was verified from the page cache only.
func (c AuditCacheOnly) IsZero() bool { return len(c.Files) == 0 && c.Bytes == 0 }

// Done reports whether the run is over.
func (r AuditRun) Done() bool { return !r.Ended.IsZero() }

// AuditStatus is what the audit does, and how far the index is covered.
type AuditStatus struct {
	// State is "running", "waiting" (a gate is closed: load, battery, the
	// indexer), "paused" (by the user) or "idle" (until the next run).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Run is the run in progress; Rate its reading rate in bytes a second.
	Run  *AuditRun `json:"run,omitempty"`
	Rate float64   `json:"rate"`
	// Pass is the pass in progress, LastPass the last completed one.
	Pass     *AuditPass        `json:"pass,omitempty"`
	LastPass *AuditPassSummary `json:"last_pass,omitempty"`
	NextRun  time.Time         `json:"next_run,omitzero"`
	Coverage AuditCoverage     `json:"coverage"`
	// Problems counts the files flagged corrupt, unreadable or with a
	// lost write.
	Problems   int64  `json:"problems"`
	IOPriority string `json:"io_priority,omitempty"`
	// Totals count files by class since the daemon started.
	Totals        map[string]int64 `json:"totals,omitempty"`
	BytesVerified int64            `json:"bytes_verified"`
	Transient     int64            `json:"transient"`
	// CacheOnly counts the files verified since the daemon started whose
	// bytes came from the page cache only.
	CacheOnly AuditCacheOnly `json:"cache_only,omitzero"`
}

// AuditPass is the progress of the pass in progress: it verifies every
// file last checked before Cutoff.
type AuditPass struct {
	ID        uint64           `json:"id"`
	Began     time.Time        `json:"began"`
	Cutoff    time.Time        `json:"cutoff"`
	Files     int64            `json:"files"` // in the pass when it began
	Bytes     int64            `json:"bytes"`
	Done      int64            `json:"done"` // files decided
	DoneBytes int64            `json:"done_bytes"`
	Counts    map[string]int64 `json:"counts"`
	// ETASeconds is the time left at the run's rate; 0 when unknown.
	ETASeconds float64 `json:"eta_seconds"`
}

// AuditPassSummary is a completed pass.
type AuditPassSummary struct {
	ID     uint64           `json:"id"`
	Began  time.Time        `json:"began"`
	Ended  time.Time        `json:"ended"`
	Files  int64            `json:"files"` // in the pass when it began
	Bytes  int64            `json:"bytes"`
	Counts map[string]int64 `json:"counts"` // files decided, by class
	// BytesOK are the bytes verified ok (0 in a pass completed before
	// the daemon kept them); Problems the files the pass found corrupt,
	// untraced, unreadable or with a lost write.
	BytesOK  int64 `json:"bytes_ok,omitempty"`
	Problems int64 `json:"problems"`
	// Coverage is the schedule's coverage when the pass ended; nil for a
	// pass completed before the daemon kept it.
	Coverage *AuditCoverage `json:"coverage,omitempty"`
	// Left counts the files the pass gave up on: they are due in the next.
	Left AuditLeft `json:"left,omitzero"`
	// Unread counts the files of the pass it did not read because the
	// indexer hashed them again after it began (an edit, the
	// re-verification after an unclean stop) or they were removed.
	Unread int64 `json:"unread,omitempty"`
}

// AuditHistory is the answer of /v1/audit/history.
type AuditHistory struct {
	Passes []AuditPassSummary `json:"passes"` // oldest first
}

// AuditCoverage says how much of the index was verified recently.
type AuditCoverage struct {
	EverySeconds float64   `json:"every_seconds"` // the schedule's interval
	Files        int64     `json:"files"`         // verified within it
	Bytes        int64     `json:"bytes"`
	Total        int64     `json:"total"` // files an audit reads
	TotalBytes   int64     `json:"total_bytes"`
	Oldest       time.Time `json:"oldest,omitzero"` // the least recent check
	At           time.Time `json:"at,omitzero"`     // when this was counted
}

// AuditProblem is a file the audit found not ok. Recorded and Observed
// are digests: the record's, and what was read (nil when nothing was).
type AuditProblem struct {
	Path        []byte
	State       string // "corrupt", "untraced", "unreadable" or "lost_write"
	Backend     string
	Recorded    []byte
	Observed    []byte
	RecordedKey string
	ObservedKey string
	Size        int64
	Seen        time.Time
	Why         string
}

type problemWire struct {
	Path        string    `json:"path"`
	State       string    `json:"state"`
	Backend     string    `json:"backend,omitempty"`
	Recorded    string    `json:"recorded,omitempty"`
	Observed    string    `json:"observed,omitempty"`
	RecordedKey string    `json:"recorded_key,omitempty"`
	ObservedKey string    `json:"observed_key,omitempty"`
	Size        int64     `json:"size"`
	Seen        time.Time `json:"seen"`
	Why         string    `json:"why,omitempty"`
}

// MarshalJSON writes the digests in hex, and path_b64 for a path that is
// not valid UTF-8.
func (p AuditProblem) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(problemWire{Path: string(p.Path), State: p.State, Backend: p.Backend,
		Recorded: hex.EncodeToString(p.Recorded), Observed: hex.EncodeToString(p.Observed),
		RecordedKey: p.RecordedKey, ObservedKey: p.ObservedKey, Size: p.Size, Seen: p.Seen.UTC().Truncate(time.Second), Why: p.Why})
	if err != nil {
		return nil, err
	}
	return withPathB64(b, string(p.Path)), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *AuditProblem) UnmarshalJSON(b []byte) error {
	var w struct {
		problemWire
		PathB64 *string `json:"path_b64"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	path := w.Path
	if err := pathFromB64(w.PathB64, &path); err != nil {
		return err
	}
	rec, err1 := hex.DecodeString(w.Recorded)
	obs, err2 := hex.DecodeString(w.Observed)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("%w: digest: %v", ErrBadResponse, err)
	}
	*p = AuditProblem{Path: []byte(path), State: w.State, Backend: w.Backend, Recorded: rec, Observed: obs,
		RecordedKey: w.RecordedKey, ObservedKey: w.ObservedKey, Size: w.Size, Seen: w.Seen, Why: w.Why}
	if len(rec) == 0 {
		p.Recorded = nil
	}
	if len(obs) == 0 {
		p.Observed = nil
	}
	return nil
}

// AuditAcceptResult says what an accept did.
type AuditAcceptResult struct {
	// Accepted are the paths whose content is now their record's.
	Accepted [][]byte
	// Failed are the paths that could not be read, with why.
	Failed []AuditAcceptFailure
	// Released are the healed paths whose rotten bytes, kept aside by the
	// heal, were removed.
	Released [][]byte
}

// AuditAcceptFailure is a flagged file that could not be accepted.
type AuditAcceptFailure struct {
	Path  []byte
	Error string
}

type acceptWire struct {
	Accepted []PathIn         `json:"accepted"`
	Failed   []acceptFailWire `json:"failed"`
	Released []PathIn         `json:"released"`
}

type acceptFailWire struct {
	PathIn
	Error string `json:"error"`
}

// MarshalJSON implements json.Marshaler.
func (r AuditAcceptResult) MarshalJSON() ([]byte, error) {
	buf := []byte(`{"accepted":[`)
	for i, p := range r.Accepted {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(appendPath(append(buf, '{'), "path", p), '}')
	}
	buf = append(buf, `],"failed":[`...)
	for i, f := range r.Failed {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendPath(append(buf, '{'), "path", f.Path)
		buf = append(buf, `,"error":`...)
		buf = append(appendString(buf, []byte(f.Error)), '}')
	}
	if len(r.Released) > 0 {
		buf = append(buf, `],"released":[`...)
		for i, p := range r.Released {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(appendPath(append(buf, '{'), "path", p), '}')
		}
	}
	return append(buf, "]}"...), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *AuditAcceptResult) UnmarshalJSON(b []byte) error {
	var w acceptWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var out AuditAcceptResult
	for _, p := range w.Accepted {
		path, err := p.Bytes()
		if err != nil {
			return err
		}
		out.Accepted = append(out.Accepted, path)
	}
	for _, f := range w.Failed {
		path, err := f.PathIn.Bytes()
		if err != nil {
			return err
		}
		out.Failed = append(out.Failed, AuditAcceptFailure{Path: path, Error: f.Error})
	}
	for _, p := range w.Released {
		path, err := p.Bytes()
		if err != nil {
			return err
		}
		out.Released = append(out.Released, path)
	}
	*r = out
	return nil
}
