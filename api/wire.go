package api

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/annexd/annexd/key"
)

// APIVersion is the version of the wire protocol under /v1.
const APIVersion = 1

// Error codes in error bodies ({"error": "...", "code": "..."}).
const (
	CodeBadRequest   = "bad_request"
	CodeOutsideRoots = "outside_roots"
	CodeUnderRoot    = "under_root"
	CodeForbidden    = "forbidden"
	CodeUnauthorized = "unauthorized"
	CodeNotFound     = "not_found"
	CodeNotSupported = "not_supported"
	CodeTooLarge     = "too_large"
	// CodeOtherBackend: a whereis of a key whose hash the index does not
	// hold (400).
	CodeOtherBackend = "other_backend"
	CodeInternal     = "internal"
	// CodeBusy: the daemon holds too many connections (503); retry.
	CodeBusy = "busy"
	// CodeStarting: the daemon is still starting and does not serve the
	// index yet (503); retry.
	CodeStarting = "starting"
)

// ErrorBody is the JSON body of every non-2xx response.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// StreamEnd is the last line of every NDJSON stream.
type StreamEnd struct {
	End   bool   `json:"end"`
	Count int64  `json:"count"`
	Next  string `json:"next,omitempty"` // dups: cursor for the next page
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// EndPrefix starts a stream's end line (StreamEnd marshals End first);
// item lines never start with it.
var EndPrefix = []byte(`{"end":`)

// Ping is the answer to /v1/ping.
type Ping struct {
	OK         bool   `json:"ok"`
	Version    string `json:"version"`
	APIVersion int    `json:"api_version"`
}

// PathIn is a path as it arrives on the wire: either field may be set.
type PathIn struct {
	Path    *string `json:"path"`
	PathB64 *string `json:"path_b64"`
}

// Bytes returns the exact path bytes: path_b64 when present, else path.
func (p PathIn) Bytes() ([]byte, error) {
	if p.PathB64 != nil {
		b, err := base64.StdEncoding.DecodeString(*p.PathB64)
		if err != nil {
			return nil, fmt.Errorf("%w: path_b64: %v", ErrBadRequest, err)
		}
		return b, nil
	}
	if p.Path != nil {
		return []byte(*p.Path), nil
	}
	return nil, fmt.Errorf("%w: neither path nor path_b64 given", ErrBadRequest)
}

// DecodeLookupLine parses one line of a batch lookup request body: a JSON
// object with "path" or "path_b64".
func DecodeLookupLine(line []byte) ([]byte, error) {
	if p, ok := fastPathIn(line); ok {
		return p.Bytes()
	}
	return decodeLookupLineJSON(line)
}

// decodeLookupLineJSON is DecodeLookupLine with encoding/json only.
func decodeLookupLineJSON(line []byte) ([]byte, error) {
	var p PathIn
	if err := json.Unmarshal(line, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return p.Bytes()
}

// fastPathIn reads {"path":…} and {"path_b64":…} lines without
// encoding/json; ok is false when it cannot be sure.
func fastPathIn(line []byte) (p PathIn, ok bool) {
	ok = scanFlat(line, func(m flatMember) bool {
		isPath, good := p.member(m)
		return isPath && good // other names: encoding/json matches them case-insensitively
	})
	return p, ok
}

// member reads m into p when it is "path" or "path_b64" (isPath); good is
// false when its value is not a string.
func (p *PathIn) member(m flatMember) (isPath, good bool) {
	// s is declared in each case: one declared for all would be put on
	// the heap for every member, path or not.
	switch string(m.name) {
	case "path":
		s, ok := m.str()
		p.Path, good = &s, ok
	case "path_b64":
		s, ok := m.str()
		p.PathB64, good = &s, ok
	default:
		return false, false
	}
	return true, good
}

// pathAndKey decodes the path and the optional key of an answer line.
func pathAndKey(p PathIn, k string) ([]byte, key.Key, error) {
	b, err := p.Bytes()
	if err != nil {
		return nil, key.Key{}, err
	}
	if k == "" {
		return b, key.Key{}, nil
	}
	kk, err := key.Parse(k)
	return b, kk, err
}

// appendPath appends "name":display and, when needed, "name_b64":exact.
func appendPath(buf []byte, name string, path []byte) []byte {
	buf = append(buf, '"')
	buf = append(buf, name...)
	buf = append(buf, `":`...)
	buf = appendString(buf, path)
	if !utf8.Valid(path) {
		buf = append(buf, `,"`...)
		buf = append(buf, name...)
		buf = append(buf, `_b64":"`...)
		buf = base64.StdEncoding.AppendEncode(buf, path)
		buf = append(buf, '"')
	}
	return buf
}

// appendString appends s as a JSON string, replacing invalid UTF-8 with
// U+FFFD as encoding/json does.
func appendString(buf []byte, s []byte) []byte {
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		// Copy the run of bytes that need no escaping in one go.
		j := i
		for j < len(s) && safeASCII[s[j]] {
			j++
		}
		buf = append(buf, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c < 0x20 || c == 0x7f:
				buf = append(buf, `\u00`...)
				buf = append(buf, hex.EncodeToString([]byte{c})...)
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, `\u202`...)
			buf = append(buf, "89"[r-'\u2028'])
		default:
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}

// safeASCII marks the bytes appendString copies as they are.
var safeASCII = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func appendKey(buf []byte, k key.Key) []byte {
	if k.IsZero() {
		return buf
	}
	buf = append(buf, `,"key":`...)
	var tmp [160]byte // most keys: no allocation
	kb, _ := k.AppendText(tmp[:0])
	return appendString(buf, kb)
}

// AppendJSON appends r as one JSON object (no newline).
func (r LookupResult) AppendJSON(buf []byte) []byte {
	buf = append(buf, '{')
	buf = appendPath(buf, "path", r.Path)
	buf = append(buf, `,"state":`...)
	buf = appendString(buf, []byte(r.State))
	buf = appendKey(buf, r.Key)
	if r.Size != 0 {
		buf = append(buf, `,"size":`...)
		buf = strconv.AppendInt(buf, r.Size, 10)
	}
	if r.Message != "" {
		buf = append(buf, `,"message":`...)
		buf = appendString(buf, []byte(r.Message))
	}
	if !r.VerifiedAt.IsZero() {
		buf = append(buf, `,"verified_at":"`...)
		buf = r.VerifiedAt.AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	if r.Finding != "" {
		buf = append(buf, `,"finding":`...)
		buf = appendString(buf, []byte(r.Finding))
	}
	return append(buf, '}')
}

// MarshalJSON implements json.Marshaler.
func (r LookupResult) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil), nil }

type lookupWire struct {
	PathIn
	State      LookupState `json:"state"`
	Key        string      `json:"key"`
	Size       int64       `json:"size"`
	Message    string      `json:"message"`
	VerifiedAt string      `json:"verified_at"`
	Finding    LookupState `json:"finding"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *LookupResult) UnmarshalJSON(b []byte) error {
	if w, ok := fastLookupWire(b); ok {
		return r.fromWire(w)
	}
	var w lookupWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return r.fromWire(w)
}

func (r *LookupResult) fromWire(w lookupWire) error {
	p, k, err := pathAndKey(w.PathIn, w.Key)
	if err != nil {
		return err
	}
	*r = LookupResult{Path: p, State: w.State, Key: k, Size: w.Size, Message: w.Message, Finding: w.Finding}
	if w.VerifiedAt != "" {
		if r.VerifiedAt, err = time.Parse(time.RFC3339Nano, w.VerifiedAt); err != nil {
			return fmt.Errorf("%w: verified_at: %v", ErrBadResponse, err)
		}
	}
	return nil
}

// fastLookupWire reads an answer line as the server writes it without
// encoding/json; ok is false when it cannot be sure. Unknown members are
// skipped, as encoding/json does.
func fastLookupWire(b []byte) (w lookupWire, ok bool) {
	ok = scanFlat(b, func(m flatMember) bool {
		if isPath, good := w.member(m); isPath {
			return good
		}
		var good bool
		switch string(m.name) {
		case "state":
			var s string
			s, good = m.str()
			w.State = LookupState(s)
		case "key":
			w.Key, good = m.str()
		case "message":
			w.Message, good = m.str()
		case "verified_at":
			w.VerifiedAt, good = m.str()
		case "finding":
			var s string
			s, good = m.str()
			w.Finding = LookupState(s)
		case "size":
			var err error
			w.Size, err = strconv.ParseInt(string(m.val), 10, 64)
			good = err == nil && !m.quoted
		default:
			good = !foldsToAny(m.name, "path", "path_b64", "state", "key", "message", "size", "verified_at", "finding")
		}
		return good
	})
	return w, ok
}

// AppendJSON appends l as one JSON object.
func (l Location) AppendJSON(buf []byte) []byte {
	buf = append(buf, '{')
	buf = appendPath(buf, "path", l.Path)
	buf = appendKey(buf, l.Key)
	buf = append(buf, `,"size":`...)
	buf = strconv.AppendInt(buf, l.Size, 10)
	if l.State != "" {
		buf = append(buf, `,"state":`...)
		buf = appendString(buf, []byte(l.State))
	}
	if l.Stale {
		buf = append(buf, `,"stale":true`...)
	}
	if l.OutsideRoots {
		buf = append(buf, `,"outside_roots":true`...)
	}
	if l.LinkOf != nil {
		buf = append(buf, ',')
		buf = appendPath(buf, "link_of", l.LinkOf)
	}
	if l.SharesWith != nil {
		buf = append(buf, ',')
		buf = appendPath(buf, "shares_with", l.SharesWith)
	}
	return append(buf, '}')
}

// AppendPathJSON appends the member "name" with path for display and,
// when path is not valid UTF-8, "name_b64" with its exact bytes.
func AppendPathJSON(buf []byte, name string, path []byte) []byte {
	return appendPath(buf, name, path)
}

// MarshalJSON implements json.Marshaler.
func (l Location) MarshalJSON() ([]byte, error) { return l.AppendJSON(nil), nil }

type locationWire struct {
	PathIn
	Key   string `json:"key"`
	Size  int64  `json:"size"`
	State string `json:"state"`
	Stale bool   `json:"stale"`
	// OutsideRoots: the path is outside the daemon's roots.
	OutsideRoots bool    `json:"outside_roots"`
	LinkOf       *string `json:"link_of"`
	LinkOfB64    *string `json:"link_of_b64"`
	SharesWith   *string `json:"shares_with"`
	SharesB64    *string `json:"shares_with_b64"`
}

// optPath decodes an optional path member and its _b64 twin (nil when
// neither is present).
func optPath(p, b64 *string) ([]byte, error) {
	if p == nil && b64 == nil {
		return nil, nil
	}
	return PathIn{Path: p, PathB64: b64}.Bytes()
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *Location) UnmarshalJSON(b []byte) error {
	w, ok := fastLocationWire(b)
	if !ok {
		w = locationWire{}
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
	}
	p, k, err := pathAndKey(w.PathIn, w.Key)
	if err != nil {
		return err
	}
	link, err := optPath(w.LinkOf, w.LinkOfB64)
	if err != nil {
		return err
	}
	shares, err := optPath(w.SharesWith, w.SharesB64)
	if err != nil {
		return err
	}
	*l = Location{Path: p, Key: k, Size: w.Size, State: w.State, Stale: w.Stale, OutsideRoots: w.OutsideRoots,
		LinkOf: link, SharesWith: shares}
	return nil
}

// fastLocationWire reads a location as the server writes it without
// encoding/json; ok is false when it cannot be sure.
func fastLocationWire(b []byte) (w locationWire, ok bool) {
	ok = scanFlat(b, func(m flatMember) bool {
		if isPath, good := w.member(m); isPath {
			return good
		}
		var good bool
		switch string(m.name) {
		case "key":
			w.Key, good = m.str()
		case "state":
			w.State, good = m.state()
		case "size":
			var err error
			w.Size, err = strconv.ParseInt(string(m.val), 10, 64)
			good = err == nil && !m.quoted
		case "stale":
			w.Stale, good = jsonBool(m)
		case "outside_roots":
			w.OutsideRoots, good = jsonBool(m)
		case "link_of":
			var s string
			s, good = m.str()
			w.LinkOf = &s
		case "link_of_b64":
			var s string
			s, good = m.str()
			w.LinkOfB64 = &s
		case "shares_with":
			var s string
			s, good = m.str()
			w.SharesWith = &s
		case "shares_with_b64":
			var s string
			s, good = m.str()
			w.SharesB64 = &s
		default:
			good = !foldsToAny(m.name, "path", "path_b64", "key", "state", "size", "stale", "outside_roots",
				"link_of", "link_of_b64", "shares_with", "shares_with_b64")
		}
		return good
	})
	return w, ok
}

// jsonBool reads a JSON true or false; ok is false for anything else.
func jsonBool(m flatMember) (v, ok bool) {
	return string(m.val) == "true", !m.quoted && (string(m.val) == "true" || string(m.val) == "false")
}

// AppendJSON appends g as one JSON object.
func (g DupGroup) AppendJSON(buf []byte) []byte {
	buf = append(buf, `{"backend":`...)
	buf = appendString(buf, []byte(backendName(g.Backend)))
	buf = append(buf, `,"digest":"`...)
	buf = hex.AppendEncode(buf, g.Digest)
	buf = append(buf, `","size":`...)
	buf = strconv.AppendInt(buf, g.Size, 10)
	buf = append(buf, `,"count":`...)
	buf = strconv.AppendInt(buf, int64(len(g.Files)), 10)
	buf = append(buf, `,"copies":`...)
	buf = strconv.AppendInt(buf, int64(g.Copies), 10)
	buf = append(buf, `,"physical":`...)
	buf = strconv.AppendInt(buf, int64(g.Physical), 10)
	buf = append(buf, `,"duplicate_bytes":`...)
	buf = strconv.AppendInt(buf, g.Duplicate, 10)
	buf = append(buf, `,"reclaimable":`...)
	buf = strconv.AppendInt(buf, g.Reclaimable, 10)
	buf = append(buf, `,"wasted":`...) // reclaimable's older name
	buf = strconv.AppendInt(buf, g.Reclaimable, 10)
	if g.Unsurveyed > 0 {
		buf = append(buf, `,"unsurveyed":`...)
		buf = strconv.AppendInt(buf, int64(g.Unsurveyed), 10)
	}
	if !g.SurveyedAt.IsZero() {
		buf = append(buf, `,"surveyed_at":"`...)
		buf = g.SurveyedAt.UTC().AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	if g.Cursor != nil {
		buf = append(buf, `,"cursor":"`...)
		buf = base64.RawURLEncoding.AppendEncode(buf, g.Cursor)
		buf = append(buf, '"')
	}
	buf = append(buf, `,"files":[`...)
	for i, f := range g.Files {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = f.AppendJSON(buf)
	}
	return append(buf, "]}"...)
}

func backendName(b key.Backend) string {
	if !b.Valid() {
		return ""
	}
	return b.String()
}

// MarshalJSON implements json.Marshaler.
func (g DupGroup) MarshalJSON() ([]byte, error) { return g.AppendJSON(nil), nil }

type dupWire struct {
	Backend     string     `json:"backend"`
	Digest      string     `json:"digest"`
	Size        int64      `json:"size"`
	Copies      int        `json:"copies"`
	Physical    int        `json:"physical"`
	Duplicate   int64      `json:"duplicate_bytes"`
	Reclaimable int64      `json:"reclaimable"`
	Unsurveyed  int        `json:"unsurveyed"`
	SurveyedAt  string     `json:"surveyed_at"`
	Cursor      string     `json:"cursor"`
	Files       []Location `json:"files"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (g *DupGroup) UnmarshalJSON(b []byte) error {
	w, ok := fastDupWire(b)
	if !ok {
		w = dupWire{}
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
	}
	var out DupGroup
	var err error
	if w.Backend != "" {
		if out.Backend, err = key.ParseBackend(w.Backend); err != nil {
			return err
		}
	}
	if out.Digest, err = hex.DecodeString(w.Digest); err != nil {
		return fmt.Errorf("%w: digest: %v", ErrBadResponse, err)
	}
	if w.Cursor != "" {
		if out.Cursor, err = base64.RawURLEncoding.DecodeString(w.Cursor); err != nil {
			return fmt.Errorf("%w: cursor: %v", ErrBadResponse, err)
		}
	}
	if w.SurveyedAt != "" {
		if out.SurveyedAt, err = time.Parse(time.RFC3339Nano, w.SurveyedAt); err != nil {
			return fmt.Errorf("%w: surveyed_at: %v", ErrBadResponse, err)
		}
	}
	out.Size, out.Copies, out.Files = w.Size, w.Copies, w.Files
	out.Physical, out.Duplicate, out.Reclaimable, out.Unsurveyed = w.Physical, w.Duplicate, w.Reclaimable, w.Unsurveyed
	*g = out
	return nil
}

// maxCountHint bounds the room a group's "count" makes for its files.
const maxCountHint = 4096

// fastDupWire reads a group as the server writes it without
// encoding/json; ok is false when it cannot be sure.
func fastDupWire(b []byte) (w dupWire, ok bool) {
	count := 0 // "count", when it comes before "files": room to keep
	ok = scanFlat(b, func(m flatMember) bool {
		var good bool
		switch string(m.name) {
		case "count": // not decoded, as by encoding/json; a hint only
			good = m.quoted || m.val[0] != '['
			if n, err := strconv.Atoi(string(m.val)); err == nil && !m.quoted {
				count = min(max(n, 0), maxCountHint)
			}
		case "backend":
			w.Backend, good = m.str()
		case "digest":
			w.Digest, good = m.str()
		case "cursor":
			w.Cursor, good = m.str()
		case "surveyed_at":
			w.SurveyedAt, good = m.str()
		case "size", "copies", "physical", "duplicate_bytes", "reclaimable", "unsurveyed":
			n, err := strconv.ParseInt(string(m.val), 10, 64)
			good = err == nil && !m.quoted
			switch string(m.name) {
			case "size":
				w.Size = n
			case "copies":
				w.Copies = int(n)
			case "physical":
				w.Physical = int(n)
			case "duplicate_bytes":
				w.Duplicate = n
			case "reclaimable":
				w.Reclaimable = n
			default:
				w.Unsurveyed = int(n)
			}
		case "files":
			w.Files = make([]Location, 0, count)
			good = !m.quoted && m.val[0] == '[' && eachObject(m.val, func(obj []byte) bool {
				var l Location
				if l.UnmarshalJSON(obj) != nil {
					return false
				}
				w.Files = append(w.Files, l)
				return true
			})
		default:
			good = (m.quoted || m.val[0] != '[') && // unknown arrays: let encoding/json judge
				!foldsToAny(m.name, "backend", "digest", "cursor", "surveyed_at", "size", "copies", "physical",
					"duplicate_bytes", "reclaimable", "unsurveyed", "files")
		}
		return good
	})
	return w, ok
}

// MarshalJSON implements json.Marshaler; it adds path_b64 for a root whose
// path is not valid UTF-8.
func (r RootStatus) MarshalJSON() ([]byte, error) {
	type plain RootStatus
	b, err := json.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	return withPathB64(b, r.Path), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *RootStatus) UnmarshalJSON(b []byte) error {
	type plain RootStatus
	var w struct {
		plain
		PathB64 *string `json:"path_b64"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = RootStatus(w.plain)
	return pathFromB64(w.PathB64, &r.Path)
}

// withPathB64 adds "path_b64" to the JSON object b when path is not valid
// UTF-8 (encoding/json then wrote U+FFFD into "path").
func withPathB64(b []byte, path string) []byte {
	if utf8.ValidString(path) {
		return b
	}
	b = append(b[:len(b)-1], `,"path_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, []byte(path))
	return append(b, `"}`...)
}

// pathFromB64 sets *path to the decoded b64, when the answer had one.
func pathFromB64(b64 *string, path *string) error {
	if b64 == nil {
		return nil
	}
	p, err := base64.StdEncoding.DecodeString(*b64)
	if err != nil {
		return fmt.Errorf("%w: path_b64: %v", ErrBadResponse, err)
	}
	*path = string(p)
	return nil
}
