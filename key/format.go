package key

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxExtInName is the longest extension (from the first dot of the name)
// git-annex's parser accepts in the key of a backend whose name ends in "E".
const maxExtInName = 64

// String formats k as git-annex writes it: the backend, the fields present
// in the order -s, -m, -S, -C, then "--" and the name. The zero Key formats
// as "".
func (k Key) String() string {
	if k.IsZero() {
		return ""
	}
	b, _ := k.AppendText(make([]byte, 0, len(k.backend)+len(k.name)+32))
	return string(b)
}

// AppendText appends k as String formats it (encoding.TextAppender); it
// never fails.
func (k Key) AppendText(b []byte) ([]byte, error) {
	if k.IsZero() {
		return b, nil
	}
	b = append(b, k.backend...)
	b = appendField(b, k.fields&hasSize != 0, 's', k.size)
	b = appendField(b, k.fields&hasMtime != 0, 'm', k.mtime)
	b = appendField(b, k.fields&hasChunkSize != 0, 'S', k.chunkSize)
	b = appendField(b, k.fields&hasChunkNum != 0, 'C', k.chunkNum)
	b = append(b, "--"...)
	return append(b, k.name...), nil
}

func appendField(b []byte, present bool, letter byte, n int64) []byte {
	if !present {
		return b
	}
	return strconv.AppendInt(append(b, '-', letter), n, 10)
}

// keyFields lists the optional numeric fields in the only order git-annex
// accepts them.
var keyFields = [...]struct {
	letter byte
	bit    uint8
}{
	{'s', hasSize},
	{'m', hasMtime},
	{'S', hasChunkSize},
	{'C', hasChunkNum},
}

// Parse parses a key as git-annex 10's key parser does. The backend is one
// or more bytes other than '-'; each optional field is '-', its letter and
// one or more decimal digits, in the order s, m, S, C, each at most once;
// then "--" and the name, which is every remaining byte (it may be empty and
// may contain "--"). When the backend name ends in "E", the name's extension
// (from its first dot) may be at most 64 bytes long.
//
// One difference from git-annex, a refusal: a number that does not fit in an
// int64 is an error here, while git-annex keeps sizes of any length and
// wraps large mtimes. Leading zeros are accepted and dropped, as git-annex
// does, so String gives the canonical form.
//
// Errors wrap ErrSyntax, quote the key and say what is wrong.
func Parse(s string) (Key, error) {
	i := strings.IndexByte(s, '-')
	if i < 0 {
		return Key{}, syntaxError(s, `no "--" before the name`)
	}
	if i == 0 {
		return Key{}, syntaxError(s, "empty backend name")
	}
	k := Key{backend: s[:i]}
	tooBig := "" // the first field that overflows, reported if all else parses
	for _, f := range keyFields {
		n, next, ok := scanField(s, i, f.letter)
		if !ok {
			continue
		}
		if n < 0 && tooBig == "" {
			tooBig = s[i+1 : next]
		}
		i = next
		k.fields |= f.bit
		k.setField(f.letter, n)
	}
	if !strings.HasPrefix(s[i:], "--") {
		return Key{}, syntaxError(s, badFieldReason(s[i:]))
	}
	k.name = s[i+2:]
	if strings.HasSuffix(k.backend, "E") {
		if dot := strings.IndexByte(k.name, '.'); dot >= 0 && len(k.name)-dot > maxExtInName {
			return Key{}, syntaxError(s, fmt.Sprintf("extension longer than %d bytes", maxExtInName))
		}
	}
	if tooBig != "" {
		return Key{}, syntaxError(s, fmt.Sprintf("-%s does not fit in 64 bits", tooBig))
	}
	return k, nil
}

// scanField reads "-<letter><digits>" at s[i:]. ok is false when that is
// not there; n is -1 when the digits overflow an int64.
func scanField(s string, i int, letter byte) (n int64, next int, ok bool) {
	if len(s) < i+3 || s[i] != '-' || s[i+1] != letter || !isDigit(s[i+2]) {
		return 0, i, false
	}
	j := i + 2
	for j < len(s) && isDigit(s[j]) {
		if n > (math.MaxInt64-int64(s[j]-'0'))/10 {
			n = -1
			break
		}
		n = n*10 + int64(s[j]-'0')
		j++
	}
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	return n, j, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (k *Key) setField(letter byte, n int64) {
	switch letter {
	case 's':
		k.size = n
	case 'm':
		k.mtime = n
	case 'S':
		k.chunkSize = n
	case 'C':
		k.chunkNum = n
	}
}

// badFieldReason explains why rest, the text after the fields that parsed,
// does not start with "--".
func badFieldReason(rest string) string {
	switch {
	case rest == "":
		return `no "--" before the name`
	case rest[0] != '-':
		return fmt.Sprintf("unexpected %q after a field's digits", rest[:1])
	case len(rest) < 2:
		return `no "--" before the name`
	}
	f := rest[1:]
	if end := strings.IndexByte(f, '-'); end >= 0 {
		f = f[:end]
	}
	switch {
	case strings.IndexByte("smSC", rest[1]) < 0:
		return fmt.Sprintf("unknown field %q (want -s, -m, -S, -C)", "-"+f)
	case len(rest) < 3 || !isDigit(rest[2]):
		return fmt.Sprintf("field %q has no decimal digits", "-"+f)
	default:
		return fmt.Sprintf("field %q repeated or out of order (want -s, -m, -S, -C)", "-"+f)
	}
}

// syntaxError builds a Parse error quoting s (cut short when very long).
func syntaxError(s, why string) error {
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Errorf("%w %q: %s", ErrSyntax, s, why)
}

// MarshalText implements encoding.TextMarshaler. The zero Key marshals as
// empty text, so an unset Key field survives a JSON round trip.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse; empty text
// gives the zero Key.
func (k *Key) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*k = Key{}
		return nil
	}
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}
