package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
)

// Deduper makes duplicate files share their storage (POST /v1/dedup). A
// server without one answers 404.
type Deduper interface {
	// Dedup plans a run from the index and, unless req.DryRun, carries it
	// out. It sends the plan first, then the groups asked for, then
	// progress and skips, one event at a time. It returns what the run
	// did, with an error wrapping ErrUnsupported when a file system could
	// not share extents, or ctx.Err() when ctx ended first. An error
	// before the plan was sent means that nothing was done.
	Dedup(ctx context.Context, req DedupRequest, send func(DedupEvent) error) (DedupResult, error)
}

// Error codes of a deduplication stream's end line.
const (
	// CodeUnsupported: a file system could not share extents; nothing on
	// it was changed. The plan's Unsupported names it.
	CodeUnsupported = "unsupported"
	// CodeInterrupted: the run was stopped before its end; the result
	// counts what was done.
	CodeInterrupted = "interrupted"
)

// Errors of a deduplication run, as Client.Dedup returns them.
var (
	// ErrUnsupported: a file system could not share extents.
	ErrUnsupported = errors.New("api: file system cannot share extents")
	// ErrInterrupted: the run stopped before its end.
	ErrInterrupted = errors.New("api: deduplication interrupted")
)

// DedupError is the error a deduplication stream ended with.
type DedupError struct {
	Code    string // CodeUnsupported, CodeInterrupted or CodeInternal
	Message string
}

func (e *DedupError) Error() string { return e.Message }

// Is maps the codes to ErrUnsupported, ErrInterrupted and ErrServer.
func (e *DedupError) Is(target error) bool {
	switch target {
	case ErrUnsupported:
		return e.Code == CodeUnsupported
	case ErrInterrupted:
		return e.Code == CodeInterrupted
	case ErrServer:
		return e.Code == CodeInternal
	}
	return false
}

// DedupRequest is one deduplication run as asked for.
type DedupRequest struct {
	// Paths are files and directories, absolute and clean; none means
	// every root. The server checks that each is under a root.
	Paths    [][]byte
	Hardlink bool  // link duplicates instead of sharing their extents
	Trash    bool  // move duplicates to the trash of their file system
	DryRun   bool  // plan only
	MinSize  int64 // leave smaller files out
	// Keep is which copy of each group stays: "", "newest", "oldest",
	// "shortest-path" or "under=DIR" with DIR absolute.
	Keep string
	// DataHome is the caller's $XDG_DATA_HOME, absolute, or empty: its
	// Trash is used for copies on its file system when the caller owns it.
	DataHome []byte
	// Groups is how many group events to send, the groups freeing the
	// most first; -1 sends every group.
	Groups int
	// Progress asks for progress events, at most five a second.
	Progress bool
	// UID and GIDs are who asks: the server sets them from the peer's
	// credentials, never from the request. The client sends neither.
	UID  uint32
	GIDs []uint32
}

// DedupEvent is one line of a deduplication stream; one field is set.
type DedupEvent struct {
	Plan     *DedupPlan
	Group    *DedupGroup
	Progress *DedupProgress
	Skip     *DedupSkip
}

// DedupPlan is what a run will do, sent before it starts.
type DedupPlan struct {
	Mode    string `json:"mode"` // "reflink" or "hardlink"
	DryRun  bool   `json:"dry_run"`
	Groups  int    `json:"groups"`  // groups of duplicates to act on
	Actions int    `json:"actions"` // files to make share their keeper's storage
	Frees   int64  `json:"frees"`   // bytes the run is expected to free
	// AlreadyShared counts files that share all their keeper's blocks
	// already, and NoBlocks files with no blocks of their own. Neither is
	// in Actions.
	AlreadyShared int                `json:"already_shared"`
	NoBlocks      int                `json:"no_blocks"`
	Unsupported   []DedupUnsupported `json:"unsupported,omitempty"`
}

// DedupUnsupported is a file system that cannot share extents. Its
// groups are left out of the plan and left as they are.
type DedupUnsupported struct {
	FS      string `json:"fs"`    // its type, such as "ext4"
	Path    []byte `json:"-"`     // a file on it; "path" on the wire
	Error   string `json:"error"` // what the kernel answered
	Groups  int    `json:"groups"`
	Actions int    `json:"actions"`
	Frees   int64  `json:"frees"` // what they would have freed
}

// DedupGroup is one group of a plan.
type DedupGroup struct {
	Keeper  []byte   // the file the others come to share
	Size    int64    // the size of each file
	Frees   int64    // bytes the group is expected to free
	Targets [][]byte // the names made to share the keeper's storage
	Trash   []byte   // trash mode: the trash folder the targets go to
}

// DedupProgress is how far a run got.
type DedupProgress struct {
	Done  int   `json:"done"`  // actions finished, done or skipped
	Total int   `json:"total"` // actions planned
	Freed int64 `json:"freed"` // bytes freed so far
}

// DedupSkip is one action a run did not do, and why.
type DedupSkip struct {
	Keeper, Target []byte
	Reason         string // such as "changed"; docs/cli.md lists them
	Detail         string // the error, or what would be lost
}

// DedupResult is what a run did, in the stream's end line.
type DedupResult struct {
	Mode    string         `json:"mode"`
	DryRun  bool           `json:"dry_run"`
	Planned int            `json:"planned"` // actions in the plan
	Done    int            `json:"done"`    // actions done
	Freed   int64          `json:"freed"`   // bytes the file systems freed
	Skipped map[string]int `json:"skipped,omitempty"`
	Seconds float64        `json:"seconds"` // from the request to the end
}

// DedupEnd is the end line of a deduplication stream: the StreamEnd
// fields and the result.
type DedupEnd struct {
	End    bool         `json:"end"`
	Count  int64        `json:"count"`
	Result *DedupResult `json:"result,omitempty"`
	Error  string       `json:"error,omitempty"`
	Code   string       `json:"code,omitempty"`
}

// Dedup asks the daemon for a deduplication run and calls fn for each
// event. Closing stop asks the daemon to stop between actions: the end
// line then counts what was done. The end line is returned with an error
// when it carries one: a *DedupError, matching ErrUnsupported,
// ErrInterrupted or ErrServer. A path outside the roots is refused before
// anything is done, with an error wrapping ErrOutsideRoots.
func (c *Client) Dedup(ctx context.Context, req DedupRequest, stop <-chan struct{}, fn func(DedupEvent) error) (DedupEnd, error) {
	resp, err := c.do(ctx, "POST", "/v1/dedup", dedupQuery(req), dedupBody(req.Paths),
		"Connection: close") // a stop half-closes it: never kept for reuse
	if err != nil {
		return DedupEnd{}, err
	}
	defer resp.Body.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			resp.closeWrite()
		case <-done:
		}
	}()
	var end DedupEnd
	err = readDedupStream(resp.Body, func(line []byte) error {
		var ev DedupEvent
		if err := ev.UnmarshalJSON(line); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(ev)
	}, &end)
	if err != nil {
		return end, err
	}
	if end.Code != "" {
		return end, &DedupError{Code: end.Code, Message: end.Error}
	}
	return end, nil
}

func dedupQuery(req DedupRequest) url.Values {
	v := url.Values{}
	set := func(name string, on bool) {
		if on {
			v.Set(name, "1")
		}
	}
	set("dry_run", req.DryRun)
	set("hardlink", req.Hardlink)
	set("trash", req.Trash)
	if req.Keep != "" {
		v.Set("keep", req.Keep)
	}
	if len(req.DataHome) > 0 {
		v.Set("data_home", string(req.DataHome))
	}
	set("progress", req.Progress)
	if req.MinSize > 0 {
		v.Set("min_size", strconv.FormatInt(req.MinSize, 10))
	}
	switch {
	case req.Groups < 0:
		v.Set("groups", "all")
	case req.Groups > 0:
		v.Set("groups", strconv.Itoa(req.Groups))
	}
	return v
}

func dedupBody(paths [][]byte) []byte {
	body := []byte{}
	for _, p := range paths {
		body = AppendLookupLine(body, p)
	}
	return body
}

// closeWrite half-closes the connection of a response still being read:
// the server sees the end of the request and cancels it.
func (r *response) closeWrite() {
	b, ok := r.Body.(*respBody)
	if !ok {
		return
	}
	if cw, ok := b.tc.c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// readDedupStream calls fn for each event line and reads the end line
// into end. A stream without it, or whose count differs from the lines
// read, is an ErrBadResponse.
func readDedupStream(r io.Reader, fn func([]byte) error, end *DedupEnd) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	var n int64
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, EndPrefix) {
			n++
			if err := fn(line); err != nil {
				return err
			}
			continue
		}
		if err := json.Unmarshal(line, end); err != nil {
			return fmt.Errorf("%w: end line: %v", ErrBadResponse, err)
		}
		if !end.End || end.Count != n {
			return fmt.Errorf("%w: end line counts %d events, %d arrived", ErrBadResponse, end.Count, n)
		}
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	return fmt.Errorf("%w: stream ended without its end line", ErrBadResponse)
}

// DedupStatus is deduplication in the daemon's status: counts since it
// started, of the runs asked for and the background mode together.
type DedupStatus struct {
	Continuous bool             `json:"continuous"`        // the background mode is on
	FreedBytes int64            `json:"freed_bytes"`       // bytes freed
	Pairs      int64            `json:"pairs"`             // files made to share a keeper's storage
	Skipped    map[string]int64 `json:"skipped,omitempty"` // actions not done, by reason
	Runs       int64            `json:"runs"`              // runs asked for
	// Pending, Paused and Passes are the background mode's: pairs waiting
	// to be quiet or for their turn, why it waits now, and its passes.
	Pending int    `json:"pending"`
	Paused  string `json:"paused,omitempty"`
	Passes  int64  `json:"passes"`
}
