package api

import (
	"context"
	"encoding/json"
)

// Treer answers one folder level of the indexed tree (GET /v1/tree): the
// part apiserver.Parts.Tree; without it the server answers 404.
type Treer interface {
	// TreeLevel returns the folder at path with its children, the
	// folders directly below it and the files directly in it as one
	// entry. A nil path answers the roots as the children of a level
	// with no path. path is absolute, clean and at or below a root.
	TreeLevel(ctx context.Context, path []byte) (TreeLevel, error)
}

// TreeLevel is one folder of the indexed tree and what is directly
// below it, biggest first. Bytes and Files count the whole subtree.
type TreeLevel struct {
	TreeNode
	Children []TreeNode `json:"children"`
	// Complete is false while the index holds files with no key yet
	// (pending, changing, unreadable): their bytes count, their
	// duplicates cannot.
	Complete bool `json:"complete"`
	// ComputedAt is when the figures were counted (they are reused
	// until the index changes).
	ComputedAt int64 `json:"computed_at_unix_ms"`
}

// TreeNode is one folder, or the files directly in a folder (Files
// set, Folder false), with the figures of its subtree.
type TreeNode struct {
	Path   []byte `json:"-"` // "path" (and "path_b64") on the wire
	Name   string `json:"name"`
	Folder bool   `json:"folder"`
	Bytes  int64  `json:"bytes"`
	Files  int64  `json:"files"`
	// Reclaimable is what deduplicating the extra copies of its files
	// would give back: for each duplicate content, every inode but the
	// one kept (the first in path order), by the blocks it holds alone
	// as the content's survey found them, else by its size.
	Reclaimable int64 `json:"reclaimable"`
}

// MarshalJSON implements json.Marshaler.
func (n TreeNode) MarshalJSON() ([]byte, error) {
	type plain TreeNode
	return marshalWithPath(plain(n), n.Path)
}

// UnmarshalJSON implements json.Unmarshaler.
func (n *TreeNode) UnmarshalJSON(b []byte) error {
	type plain TreeNode
	var w plain
	p, err := unmarshalWithPath(b, &w)
	if err != nil {
		return err
	}
	*n = TreeNode(w)
	n.Path = p
	return nil
}

// MarshalJSON implements json.Marshaler: the node's fields, then the
// level's.
func (l TreeLevel) MarshalJSON() ([]byte, error) {
	head, err := l.TreeNode.MarshalJSON()
	if err != nil {
		return nil, err
	}
	rest, err := json.Marshal(struct {
		Children   []TreeNode `json:"children"`
		Complete   bool       `json:"complete"`
		ComputedAt int64      `json:"computed_at_unix_ms"`
	}{l.Children, l.Complete, l.ComputedAt})
	if err != nil {
		return nil, err
	}
	return append(append(head[:len(head)-1], ','), rest[1:]...), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *TreeLevel) UnmarshalJSON(b []byte) error {
	if err := l.TreeNode.UnmarshalJSON(b); err != nil {
		return err
	}
	var rest struct {
		Children   []TreeNode `json:"children"`
		Complete   bool       `json:"complete"`
		ComputedAt int64      `json:"computed_at_unix_ms"`
	}
	if err := json.Unmarshal(b, &rest); err != nil {
		return err
	}
	l.Children, l.Complete, l.ComputedAt = rest.Children, rest.Complete, rest.ComputedAt
	return nil
}

// Page is the answer of POST /v1/ui: where the daemon's web page is.
type Page struct {
	// URL opens the page: it carries the token of this start of the
	// daemon (?token=...), which the page then keeps in a cookie.
	URL string `json:"url"`
	// Addr is the address the page listens on ("127.0.0.1:41234").
	Addr string `json:"addr"`
	// TLS says the page is served over TLS.
	TLS bool `json:"tls,omitempty"`
}

// UI asks the daemon for its web page (POST /v1/ui): it starts the
// page's listener at the first call and answers where it is.
func (c *Client) UI(ctx context.Context) (Page, error) {
	var p Page
	err := c.postJSON(ctx, "/v1/ui", nil, nil, &p)
	return p, err
}
