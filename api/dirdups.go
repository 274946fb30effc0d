package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

// Kinds of a DirDup.
const (
	// DirIdentical: the folders hold the same contents; the first is
	// kept, the others are extra copies.
	DirIdentical = "identical"
	// DirContained: every content of the second folder is in the first,
	// which holds more.
	DirContained = "contained"
	// DirUnknown: the folder holds files with no key yet (pending,
	// unreadable, changing, corrupt); it and the folders above it were
	// not compared.
	DirUnknown = "unknown"
)

// DirDupQuery selects duplicate folders.
type DirDupQuery struct {
	MinSize int64 // only folders of at least this many bytes (0: 1, never empty ones)
	Limit   int   // at most this many identical or contained reports; 0: all
	// Paths, absolute and clean: only reports with a folder at or below
	// one of them, and unknown folders at or below one (none: all).
	Paths [][]byte
}

// DirDup is one line of GET /v1/dups/dirs: a report, or a folder whose
// content is unknown.
type DirDup struct {
	Kind string `json:"kind"` // DirIdentical, DirContained or DirUnknown
	// Folders: the folder kept first, then the extra copies (all folders
	// but the first are extra, of either kind); DirUnknown: the folder.
	Folders []DirFolder `json:"folders"`
	// Reclaimable is what removing the extra copies would give back:
	// each inode whose every name is in them, by the blocks it holds
	// alone.
	Reclaimable int64 `json:"reclaimable"`
	// Unsurveyed counts the inodes of those copies whose blocks are not
	// known: with no survey they count their size, with a survey that
	// could not look at them nothing.
	Unsurveyed int `json:"unsurveyed,omitempty"`
	// UnknownFiles counts, for DirUnknown, the folder's own files with no
	// key.
	UnknownFiles int64 `json:"unknown_files,omitempty"`
}

// DirFolder is one folder of a DirDup.
type DirFolder struct {
	Path  []byte `json:"-"` // "path" (and "path_b64") on the wire
	Files int64  `json:"files"`
	Bytes int64  `json:"bytes"`
}

// MarshalJSON implements json.Marshaler.
func (f DirFolder) MarshalJSON() ([]byte, error) {
	type plain DirFolder
	return marshalWithPath(plain(f), f.Path)
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *DirFolder) UnmarshalJSON(b []byte) error {
	type plain DirFolder
	var w plain
	p, err := unmarshalWithPath(b, &w)
	if err != nil {
		return err
	}
	*f = DirFolder(w)
	f.Path = p
	return nil
}

// AppendJSON appends d as one JSON line's object.
func (d DirDup) AppendJSON(buf []byte) []byte {
	b, err := json.Marshal(d)
	if err != nil { // only plain fields: cannot fail
		panic(err)
	}
	return append(buf, b...)
}

// DirDups lists duplicate folders, most reclaimable bytes first, then
// the folders whose content is unknown, in path order.
func (c *Client) DirDups(ctx context.Context, q DirDupQuery, fn func(DirDup) error) error {
	v := url.Values{}
	if q.MinSize > 0 {
		v.Set("min_size", strconv.FormatInt(q.MinSize, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	method, body := "GET", []byte(nil)
	if len(q.Paths) > 0 {
		method, body = "POST", dedupBody(q.Paths)
	}
	resp, err := c.do(ctx, method, "/v1/dups/dirs", v, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readStream(resp.Body, func(line []byte) error {
		var d DirDup
		if err := json.Unmarshal(line, &d); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(d)
	}, nil)
}
