package api

import (
	"encoding/json"
	"fmt"
)

// The deduplication events on the wire. Each line is an object with one
// member, "plan", "group", "progress" or "skip". Paths follow the
// package's rule: "keeper" and, when not UTF-8, "keeper_b64"; the same for
// "target" and "path"; group targets are objects {"path", "path_b64"}.

// AppendJSON appends ev as one JSON object; an empty event as {}.
func (ev DedupEvent) AppendJSON(buf []byte) []byte {
	b, err := ev.MarshalJSON()
	if err != nil {
		return append(buf, "{}"...)
	}
	return append(buf, b...)
}

// MarshalJSON implements json.Marshaler.
func (ev DedupEvent) MarshalJSON() ([]byte, error) {
	var name string
	var v any
	switch {
	case ev.Plan != nil:
		name, v = "plan", ev.Plan
	case ev.Group != nil:
		name, v = "group", ev.Group
	case ev.Progress != nil:
		name, v = "progress", ev.Progress
	case ev.Skip != nil:
		name, v = "skip", ev.Skip
	default:
		return nil, fmt.Errorf("%w: empty deduplication event", ErrBadRequest)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"`), name...)
	out = append(append(out, `":`...), b...)
	return append(out, '}'), nil
}

// UnmarshalJSON implements json.Unmarshaler. An event of a kind this
// client does not know is left empty; one of two kinds is an error.
func (ev *DedupEvent) UnmarshalJSON(b []byte) error {
	var w struct {
		Plan     *DedupPlan     `json:"plan"`
		Group    *DedupGroup    `json:"group"`
		Progress *DedupProgress `json:"progress"`
		Skip     *DedupSkip     `json:"skip"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*ev = DedupEvent{Plan: w.Plan, Group: w.Group, Progress: w.Progress, Skip: w.Skip}
	n := 0
	for _, set := range []bool{w.Plan != nil, w.Group != nil, w.Progress != nil, w.Skip != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w: an event of %d kinds", ErrBadResponse, n)
	}
	return nil
}

// withNamedPath puts "name" (and "name_b64") first in the JSON object b.
func withNamedPath(b []byte, name string, path []byte) []byte {
	head := appendPath([]byte{'{'}, name, path)
	if string(b) == "{}" {
		return append(head, '}')
	}
	return append(append(head, ','), b[1:]...)
}

// marshalWithPath encodes plain (a type's fields without its own
// MarshalJSON) with path first as "path" (and "path_b64").
func marshalWithPath(plain any, path []byte) ([]byte, error) {
	b, err := json.Marshal(plain)
	if err != nil {
		return nil, err
	}
	return withNamedPath(b, "path", path), nil
}

// unmarshalWithPath decodes b into plain and returns its "path".
func unmarshalWithPath(b []byte, plain any) ([]byte, error) {
	if err := json.Unmarshal(b, plain); err != nil {
		return nil, err
	}
	return namedPath(b, "path")
}

// namedPath reads "name" or "name_b64" of the JSON object b.
func namedPath(b []byte, name string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	var in PathIn
	for _, f := range []struct {
		key string
		dst **string
	}{{name, &in.Path}, {name + "_b64", &in.PathB64}} {
		raw, ok := m[f.key]
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadResponse, f.key, err)
		}
		*f.dst = &s
	}
	p, err := in.Bytes()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadResponse, name, err)
	}
	return p, nil
}

// MarshalJSON implements json.Marshaler.
func (u DedupUnsupported) MarshalJSON() ([]byte, error) {
	type plain DedupUnsupported
	return marshalWithPath(plain(u), u.Path)
}

// UnmarshalJSON implements json.Unmarshaler.
func (u *DedupUnsupported) UnmarshalJSON(b []byte) error {
	type plain DedupUnsupported
	var w plain
	p, err := unmarshalWithPath(b, &w)
	if err != nil {
		return err
	}
	*u = DedupUnsupported(w)
	u.Path = p
	return nil
}

// wirePath is a path as an object of its own: {"path", "path_b64"}.
type wirePath []byte

func (p wirePath) MarshalJSON() ([]byte, error) { return withNamedPath([]byte("{}"), "path", p), nil }

func (p *wirePath) UnmarshalJSON(b []byte) error {
	v, err := namedPath(b, "path")
	*p = v
	return err
}

type groupWire struct {
	Size    int64      `json:"size"`
	Frees   int64      `json:"frees"`
	Targets []wirePath `json:"targets"`
	Trash   wirePath   `json:"trash,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (g DedupGroup) MarshalJSON() ([]byte, error) {
	w := groupWire{Size: g.Size, Frees: g.Frees, Targets: make([]wirePath, len(g.Targets)), Trash: g.Trash}
	for i, t := range g.Targets {
		w.Targets[i] = t
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	return withNamedPath(b, "keeper", g.Keeper), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (g *DedupGroup) UnmarshalJSON(b []byte) error {
	var w groupWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	k, err := namedPath(b, "keeper")
	if err != nil {
		return err
	}
	*g = DedupGroup{Keeper: k, Size: w.Size, Frees: w.Frees, Trash: w.Trash}
	for _, t := range w.Targets {
		g.Targets = append(g.Targets, t)
	}
	return nil
}

type skipWire struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (s DedupSkip) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(skipWire{Reason: s.Reason, Detail: s.Detail})
	if err != nil {
		return nil, err
	}
	return withNamedPath(withNamedPath(b, "target", s.Target), "keeper", s.Keeper), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *DedupSkip) UnmarshalJSON(b []byte) error {
	var w skipWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	k, err := namedPath(b, "keeper")
	if err != nil {
		return err
	}
	t, err := namedPath(b, "target")
	if err != nil {
		return err
	}
	*s = DedupSkip{Keeper: k, Target: t, Reason: w.Reason, Detail: w.Detail}
	return nil
}
