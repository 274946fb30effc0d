package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The change feed (GET /v1/changes): every change to the index after a
// cursor, each with the key its path held before and holds after.

// ErrResync: the changes after a cursor are no longer kept, or the
// cursor is of another index (a new index file). The reader must take
// the whole index again and go on from the current cursor.
var ErrResync = errors.New("api: changes no longer kept, resync")

// CodeResync is the error code of a 410 answer: ErrResync.
const CodeResync = "resync"

// The kinds of changes (Change.Kind).
const (
	ChangeAdd        = "add"        // the path holds content it did not hold
	ChangeEdit       = "edit"       // the path holds other content
	ChangeDelete     = "delete"     // the path holds nothing any more
	ChangeMove       = "move"       // the content at From is now at Path
	ChangeRot        = "rot"        // the bytes went bad with no write (Finding)
	ChangeUnreadable = "unreadable" // the file cannot be read any more
	ChangeHealed     = "healed"     // a file flagged before matches its key again
)

// Change is one entry of the feed.
type Change struct {
	Seq     uint64 `json:"seq"`
	Cursor  string `json:"cursor"` // resume after this change
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	PathB64 string `json:"path_b64,omitempty"` // the exact bytes, when Path is not UTF-8
	From    string `json:"from,omitempty"`     // move: the old path
	FromB64 string `json:"from_b64,omitempty"`
	// OldKey is the key the path held (a move: From's); NewKey the key
	// it holds now. Rot keeps the good key as OldKey; a lost write has the
	// key of the bytes now on disk as NewKey.
	OldKey  string    `json:"old_key,omitempty"`
	NewKey  string    `json:"new_key,omitempty"`
	Finding string    `json:"finding,omitempty"` // rot: corrupt, lost_write, untraced
	Time    time.Time `json:"time"`
}

// SetPaths sets Path and From, and their b64 forms when not UTF-8.
func (c *Change) SetPaths(path, from []byte) {
	c.Path, c.PathB64 = string(path), b64IfNotUTF8(path)
	c.From, c.FromB64 = string(from), b64IfNotUTF8(from)
}

func b64IfNotUTF8(p []byte) string {
	if utf8.Valid(p) {
		return ""
	}
	return base64.StdEncoding.EncodeToString(p)
}

// RawPath returns the exact bytes of Path.
func (c *Change) RawPath() []byte { return rawOf(c.Path, c.PathB64) }

// RawFrom returns the exact bytes of From.
func (c *Change) RawFrom() []byte { return rawOf(c.From, c.FromB64) }

func rawOf(s, b64 string) []byte {
	if b64 != "" {
		if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return b
		}
	}
	return []byte(s)
}

// ChangesPage is one answer of the feed.
type ChangesPage struct {
	// Cursor is where the next request goes on: after the last change
	// here, or the cursor asked for when there is none.
	Cursor  string   `json:"cursor"`
	Changes []Change `json:"changes"`
	More    bool     `json:"more,omitempty"` // more changes are kept after these
}

// ChangesQuery asks the feed. A zero Since asks only for the current
// cursor.
type ChangesQuery struct {
	Since Cursor
	Limit int           // most changes in one page; 0: the server's default
	Wait  time.Duration // wait this long for a change when there is none
}

// Cursor names a place in the feed: the index's id and a sequence
// number. Its text is "ID:SEQ"; a bare "SEQ" leaves the id unchecked.
type Cursor struct {
	IndexID string // 32 hex digits, or "" (unchecked)
	Seq     uint64
	Set     bool // false: no cursor
}

// String returns the cursor's text.
func (c Cursor) String() string {
	if c.IndexID == "" {
		return strconv.FormatUint(c.Seq, 10)
	}
	return c.IndexID + ":" + strconv.FormatUint(c.Seq, 10)
}

// ParseCursor parses "ID:SEQ" or "SEQ".
func ParseCursor(s string) (Cursor, error) {
	id, seq, ok := strings.Cut(s, ":")
	if !ok {
		id, seq = "", s
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || (ok && !isHexID(id)) {
		return Cursor{}, fmt.Errorf("%w: cursor %q: want ID:SEQ as changes --now prints it, or a number", ErrBadRequest, s)
	}
	return Cursor{IndexID: id, Seq: n, Set: true}, nil
}

func isHexID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// ChangeFeed answers the feed (GET /v1/changes). Implemented by the
// daemon; the server answers 404 without one.
type ChangeFeed interface {
	// Changes returns the changes after q.Since, waiting up to q.Wait
	// (or until ctx ends) when there are none yet. ErrResync when they
	// are no longer kept or q.Since is of another index.
	Changes(ctx context.Context, q ChangesQuery) (ChangesPage, error)
}
