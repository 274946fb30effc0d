package api

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/annexd/annexd/key"
)

// HaveCopy is one file of the index with the content asked for
// (POST /v1/have). Only a copy that is not Stale and not Absent is known
// to hold the content now.
type HaveCopy struct {
	Path []byte
	// Stale: the file changed since it was hashed; it may no longer
	// hold the content.
	Stale bool
	// OutsideRoots: a record left from a run with other roots; nothing
	// watches it (Stale still tells whether it changed).
	OutsideRoots bool
	// Absent is set when the copy's file system is not mounted now (a
	// disk unplugged): the index remembers the copy, and what it knows
	// of that file system.
	Absent *RememberedFS
}

// RememberedFS is what the index remembers of a file system that is not
// mounted now.
type RememberedFS struct {
	Key      string    `json:"key"` // what it is known by, e.g. "uuid:8bfc0409…"
	Type     string    `json:"type,omitempty"`
	Source   string    `json:"source,omitempty"`
	Point    string    `json:"mount_point,omitempty"` // where it was last mounted
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// HaveAnswer lists the copies of one content, in path order.
type HaveAnswer struct {
	Key    key.Key
	Copies []HaveCopy
}

// HaveInfo is the answer to GET /v1/have: the backend to hash with, so
// that a client's keys name the digests the index holds.
type HaveInfo struct {
	Backend string `json:"backend"`
}

// AppendJSON appends c as one JSON object.
func (c HaveCopy) AppendJSON(buf []byte) []byte {
	buf = append(buf, '{')
	buf = appendPath(buf, "path", c.Path)
	if c.Stale {
		buf = append(buf, `,"stale":true`...)
	}
	if c.OutsideRoots {
		buf = append(buf, `,"outside_roots":true`...)
	}
	if c.Absent != nil {
		fs, _ := json.Marshal(c.Absent)
		buf = append(buf, `,"absent":`...)
		buf = append(buf, fs...)
	}
	return append(buf, '}')
}

// AppendJSON appends a as one JSON object.
func (a HaveAnswer) AppendJSON(buf []byte) []byte {
	buf = append(buf, '{')
	buf = appendString(buf, []byte("key"))
	buf = append(buf, ':')
	kb, _ := a.Key.AppendText(nil)
	buf = appendString(buf, kb)
	buf = append(buf, `,"copies":[`...)
	for i, c := range a.Copies {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = c.AppendJSON(buf)
	}
	return append(buf, "]}"...)
}

type haveCopyWire struct {
	PathIn
	Stale        bool          `json:"stale"`
	OutsideRoots bool          `json:"outside_roots"`
	Absent       *RememberedFS `json:"absent"`
}

type haveAnswerWire struct {
	Key    string         `json:"key"`
	Copies []haveCopyWire `json:"copies"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (a *HaveAnswer) UnmarshalJSON(b []byte) error {
	var w haveAnswerWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	k, err := key.Parse(w.Key)
	if err != nil {
		return err
	}
	out := HaveAnswer{Key: k, Copies: make([]HaveCopy, 0, len(w.Copies))}
	for _, c := range w.Copies {
		p, err := c.Bytes()
		if err != nil {
			return err
		}
		out.Copies = append(out.Copies, HaveCopy{Path: p, Stale: c.Stale, OutsideRoots: c.OutsideRoots, Absent: c.Absent})
	}
	*a = out
	return nil
}

// HaveBackend asks the daemon which backend its index hashes with.
func (c *Client) HaveBackend(ctx context.Context) (key.Backend, error) {
	var info HaveInfo
	if err := c.getJSON(ctx, "/v1/have", nil, &info); err != nil {
		return 0, err
	}
	b, err := key.ParseBackend(info.Backend)
	if err != nil {
		return 0, fmt.Errorf("%w: backend %q", ErrBadResponse, info.Backend)
	}
	return b, nil
}

// Have asks for the indexed copies of each key's content in one request
// and calls fn for each answer, in the order of keys. Keys must be of the
// daemon's backend (HaveBackend) and carry their size.
func (c *Client) Have(ctx context.Context, keys []key.Key, fn func(HaveAnswer) error) error {
	body := make([]byte, 0, 96*len(keys))
	for _, k := range keys {
		body = append(body, `{"key":`...)
		kb, _ := k.AppendText(nil)
		body = appendString(body, kb)
		body = append(body, "}\n"...)
	}
	resp, err := c.do(ctx, "POST", "/v1/have", nil, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	i := 0
	err = readStream(resp.Body, func(line []byte) error {
		var a HaveAnswer
		if err := a.UnmarshalJSON(line); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		if i >= len(keys) || a.Key != keys[i] {
			return fmt.Errorf("%w: have answer %d is for %s", ErrBadResponse, i+1, a.Key)
		}
		i++
		return fn(a)
	}, nil)
	if err == nil && i != len(keys) {
		err = fmt.Errorf("%w: %d have answers for %d keys", ErrBadResponse, i, len(keys))
	}
	return err
}
