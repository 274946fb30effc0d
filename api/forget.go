package api

import (
	"encoding/json"
	"fmt"
)

// ForgetResult is the answer of POST /v1/forget.
type ForgetResult struct {
	Path   []byte `json:"-"`       // the directory asked for
	DryRun bool   `json:"dry_run"` // nothing was dropped; Files would be
	Files  int64  `json:"files"`   // records dropped (or that would be)
	// Kept lists the roots at or below Path, whose records were kept.
	Kept []string `json:"kept_roots,omitempty"`
}

// MarshalJSON implements json.Marshaler: path and, when needed, path_b64.
func (r ForgetResult) MarshalJSON() ([]byte, error) {
	type plain ForgetResult
	b, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	head := appendPath([]byte{'{'}, "path", r.Path)
	return append(append(head, ','), b[1:]...), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *ForgetResult) UnmarshalJSON(b []byte) error {
	type plain ForgetResult
	var w struct {
		plain
		PathIn
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	p, err := w.PathIn.Bytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	*r = ForgetResult(w.plain)
	r.Path = p
	return nil
}

// OutsideRoot is one place where the index holds records outside the
// daemon's roots (Status.OutsideRoots).
type OutsideRoot struct {
	Path string `json:"path"` // a directory; path_b64 on the wire when not UTF-8
	// Direct: Path holds a root below it, and only the records directly
	// in Path are outside (forgetting Path keeps the roots' records).
	Direct bool  `json:"direct,omitempty"`
	Dirs   int64 `json:"dirs"`  // directories with records it covers
	Files  int64 `json:"files"` // records it covers; -1 when not counted
}

// MarshalJSON implements json.Marshaler; it adds path_b64 for a path that
// is not valid UTF-8.
func (o OutsideRoot) MarshalJSON() ([]byte, error) {
	type plain OutsideRoot
	b, err := json.Marshal(plain(o))
	if err != nil {
		return nil, err
	}
	return withPathB64(b, o.Path), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (o *OutsideRoot) UnmarshalJSON(b []byte) error {
	type plain OutsideRoot
	var w struct {
		plain
		PathB64 *string `json:"path_b64"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*o = OutsideRoot(w.plain)
	return pathFromB64(w.PathB64, &o.Path)
}
