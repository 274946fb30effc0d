package api

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// The hot paths (batch lookup request lines on the server, lookup answers
// on the client) are flat JSON objects with string and number members.
// scanFlat reads those directly, several times faster than encoding/json;
// anything it is not sure about makes it report false, and the caller then
// decodes with encoding/json, so the result is always what encoding/json
// would give. The BenchmarkWire pairs measure both sides (BENCHMARKS.md).

// flatMember is one member of a flat object.
type flatMember struct {
	name    []byte
	val     []byte // string contents without quotes, or the raw literal
	quoted  bool   // val was a JSON string
	escaped bool   // the string holds backslash escapes: use unquote
	raw     []byte // the whole value as written, quotes included
}

// scanFlat calls fn for each member of the flat JSON object b. It returns
// false when b is not a flat object of the simple kind (nested values,
// escapes in names, invalid UTF-8, malformed syntax) or fn returns false.
func scanFlat(b []byte, fn func(m flatMember) bool) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipWS(b, i+1) == len(b)
	}
	for {
		var m flatMember
		var ok bool
		if m.name, i, ok = scanName(b, i); !ok {
			return false
		}
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i, ok = scanValue(b, skipWS(b, i+1), &m); !ok || !fn(m) {
			return false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return skipWS(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanName reads a member name without escapes.
func scanName(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, j, false
		}
	}
	return nil, len(b), false
}

// scanValue reads a string or a scalar literal into m.
func scanValue(b []byte, i int, m *flatMember) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	if b[i] == '[' {
		return scanArray(b, i, m)
	}
	if b[i] == '"' {
		for j := i + 1; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				m.val, m.raw, m.quoted = b[i+1:j], b[i:j+1], true
				return j + 1, utf8.Valid(m.val)
			case c == '\\':
				m.escaped = true
				j++
			case c < 0x20:
				return j, false
			}
		}
		return len(b), false
	}
	j := i
	for j < len(b) && (b[j] == '-' || b[j] == '+' || b[j] == '.' || (b[j] >= '0' && b[j] <= '9') ||
		(b[j] >= 'a' && b[j] <= 'z') || (b[j] >= 'A' && b[j] <= 'Z')) {
		j++
	}
	if j == i {
		return j, false
	}
	m.val, m.raw = b[i:j], b[i:j]
	return j, true
}

// scanArray takes an array value whole (its elements are read later with
// eachObject); strings inside may hold brackets.
func scanArray(b []byte, i int, m *flatMember) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			k, ok := skipString(b, j)
			if !ok {
				return k, false
			}
			j = k - 1
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				m.val, m.raw = b[i:j+1], b[i:j+1]
				return j + 1, b[j] == ']'
			}
		}
	}
	return len(b), false
}

// skipString returns the index just after the string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, true
		case '\\':
			j++
		}
	}
	return len(b), false
}

// eachObject calls fn with each element of the array arr, which must hold
// flat objects only.
func eachObject(arr []byte, fn func(obj []byte) bool) bool {
	i := skipWS(arr, 1)
	if i < len(arr) && arr[i] == ']' {
		return skipWS(arr, i+1) == len(arr)
	}
	for i < len(arr) {
		if arr[i] != '{' {
			return false
		}
		j := i + 1
		for j < len(arr) && arr[j] != '}' {
			if arr[j] == '"' {
				k, ok := skipString(arr, j)
				if !ok {
					return false
				}
				j = k
				continue
			}
			if arr[j] == '{' || arr[j] == '[' {
				return false
			}
			j++
		}
		if j >= len(arr) || !fn(arr[i:j+1]) {
			return false
		}
		i = skipWS(arr, j+1)
		if i < len(arr) && arr[i] == ',' {
			i = skipWS(arr, i+1)
			continue
		}
		return i < len(arr) && arr[i] == ']' && skipWS(arr, i+1) == len(arr)
	}
	return false
}

// str returns a string member's value, decoding escapes when present.
func (m flatMember) str() (string, bool) {
	if !m.quoted {
		return "", false
	}
	if !m.escaped {
		return string(m.val), true
	}
	var s string
	if json.Unmarshal(m.raw, &s) != nil {
		return "", false
	}
	return s, true
}

// state is str for a location's state: the usual one is not copied.
func (m flatMember) state() (string, bool) {
	if m.quoted && !m.escaped && string(m.val) == "ok" {
		return "ok", true
	}
	return m.str()
}

// foldsToAny reports whether name matches one of names only when case is
// ignored, as encoding/json would match it; the fast decoders then leave
// the object to encoding/json.
func foldsToAny(name []byte, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(string(name), n) {
			return true
		}
	}
	return false
}
