package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// AuditHealer heals the files the audit found corrupt from a verified
// copy (POST /v1/audit/heal). A server without one answers 404.
type AuditHealer interface {
	// AuditHeal heals, or with DryRun plans, the flagged files at or
	// below each of req.Paths (none: every finding). Each file's outcome
	// is in the result; an error means nothing could be listed.
	AuditHeal(ctx context.Context, req AuditHealRequest) (AuditHealResult, error)
}

// AuditHealRequest is the body of POST /v1/audit/heal:
// {"paths": ["/abs/path", ...], "dry_run": true}. A path that is not
// valid UTF-8 goes in "paths_b64" (standard base64) instead.
type AuditHealRequest struct {
	Paths  [][]byte
	DryRun bool
}

// The outcomes of a file (AuditHealFile.Outcome).
const (
	HealHealed    = "healed"     // restored from a verified copy
	HealWouldHeal = "would_heal" // a dry run found a verified copy
	HealNoCopy    = "no_copy"    // no copy verified; Reason counts them
	HealChanged   = "changed"    // the file changed since it was flagged: not touched
	HealBusy      = "busy"       // another process holds the file open: not touched
	HealAway      = "away"       // its file system is not mounted: not touched
	HealRefused   = "refused"    // not a corrupt finding, several names, or the heal failed
)

// AuditHealFile is what a heal did, or would do, for one flagged file.
type AuditHealFile struct {
	Path    []byte
	Key     string // the recorded key: the content restored
	Outcome string // a Heal* value
	Source  []byte // the copy used (or to be used) on this host
	Host    string // the host a remote copy came from
	Aside   string // where the rotten bytes are kept
	Reason  string
}

// AuditHealResult lists the files a heal looked at, in path order.
type AuditHealResult struct {
	Files []AuditHealFile
}

type healRequestWire struct {
	Paths    []string `json:"paths"`
	PathsB64 []string `json:"paths_b64,omitempty"`
	DryRun   bool     `json:"dry_run"`
}

// MarshalJSON implements json.Marshaler.
func (r AuditHealRequest) MarshalJSON() ([]byte, error) {
	w := healRequestWire{Paths: []string{}, DryRun: r.DryRun}
	for _, p := range r.Paths {
		if utf8.Valid(p) {
			w.Paths = append(w.Paths, string(p))
			continue
		}
		w.PathsB64 = append(w.PathsB64, base64.StdEncoding.EncodeToString(p))
	}
	return json.Marshal(w)
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *AuditHealRequest) UnmarshalJSON(b []byte) error {
	var w healRequestWire
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	out := AuditHealRequest{DryRun: w.DryRun}
	for _, p := range w.Paths {
		out.Paths = append(out.Paths, []byte(p))
	}
	for _, s := range w.PathsB64 {
		p, err := PathIn{PathB64: &s}.Bytes()
		if err != nil {
			return err
		}
		out.Paths = append(out.Paths, p)
	}
	*r = out
	return nil
}

type healFileWire struct {
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
	Host    string `json:"host,omitempty"`
	Aside   string `json:"aside,omitempty"`
	Reason  string `json:"reason"`
}

// MarshalJSON writes {"files":[...]}: each file's path (path_b64 too
// when it is not UTF-8), key, outcome, source (source_b64), host, aside
// and reason.
func (r AuditHealResult) MarshalJSON() ([]byte, error) {
	buf := []byte(`{"files":[`)
	for i, f := range r.Files {
		if i > 0 {
			buf = append(buf, ',')
		}
		b, err := json.Marshal(healFileWire{Key: f.Key, Outcome: f.Outcome, Host: f.Host, Aside: f.Aside, Reason: f.Reason})
		if err != nil {
			return nil, err
		}
		buf = appendPath(append(buf, '{'), "path", f.Path)
		if f.Source != nil {
			buf = appendPath(append(buf, ','), "source", f.Source)
		}
		buf = append(append(buf, ','), b[1:]...)
	}
	return append(buf, "]}"...), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *AuditHealResult) UnmarshalJSON(b []byte) error {
	var w struct {
		Files []json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out := AuditHealResult{Files: make([]AuditHealFile, 0, len(w.Files))}
	for _, raw := range w.Files {
		var fw healFileWire
		path, err := unmarshalWithPath(raw, &fw)
		if err != nil {
			return err
		}
		f := AuditHealFile{Path: path, Key: fw.Key, Outcome: fw.Outcome, Host: fw.Host, Aside: fw.Aside, Reason: fw.Reason}
		if src, err := namedPath(raw, "source"); err == nil {
			f.Source = src
		}
		out.Files = append(out.Files, f)
	}
	*r = out
	return nil
}

// AuditHeal heals, or with req.DryRun plans, the flagged files at or
// below req.Paths (none: every finding).
func (c *Client) AuditHeal(ctx context.Context, req AuditHealRequest) (AuditHealResult, error) {
	var r AuditHealResult
	body, err := json.Marshal(req)
	if err != nil {
		return r, err
	}
	err = c.postJSON(ctx, "/v1/audit/heal", nil, body, &r)
	return r, err
}
