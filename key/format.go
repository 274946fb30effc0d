package key

import (
	"fmt"
	"strconv"
	"strings"
)

// String formats k as git-annex writes it.
func (k Key) String() string {
	if k.IsZero() {
		return ""
	}
	var sb strings.Builder
	sb.Grow(len(k.backend) + len(k.name) + 32)
	sb.WriteString(k.backend)
	if k.fields&hasSize != 0 {
		sb.WriteString("-s")
		sb.WriteString(strconv.FormatInt(k.size, 10))
	}
	if k.fields&hasMtime != 0 {
		sb.WriteString("-m")
		sb.WriteString(strconv.FormatInt(k.mtime, 10))
	}
	if k.fields&hasChunk != 0 {
		sb.WriteString("-S")
		sb.WriteString(strconv.FormatInt(k.chunkSize, 10))
		sb.WriteString("-C")
		sb.WriteString(strconv.FormatInt(k.chunkNum, 10))
	}
	sb.WriteString("--")
	sb.WriteString(k.name)
	return sb.String()
}

// Parse parses a key in git-annex's format. Errors wrap ErrSyntax.
func Parse(s string) (Key, error) {
	head, name, ok := strings.Cut(s, "--")
	if !ok {
		return Key{}, fmt.Errorf("%w: %q has no \"--\" before the name", ErrSyntax, s)
	}
	if name == "" {
		return Key{}, fmt.Errorf("%w: %q has an empty name", ErrSyntax, s)
	}
	parts := strings.Split(head, "-")
	k := Key{backend: parts[0], name: name}
	if k.backend == "" {
		return Key{}, fmt.Errorf("%w: %q has an empty backend", ErrSyntax, s)
	}
	for _, p := range parts[1:] {
		if err := k.setField(p); err != nil {
			return Key{}, fmt.Errorf("%w: %q: %v", ErrSyntax, s, err)
		}
	}
	if (k.fields&hasChunk != 0) != (k.chunkNum > 0) {
		return Key{}, fmt.Errorf("%w: %q: -S and -C must come together", ErrSyntax, s)
	}
	return k, nil
}

func (k *Key) setField(p string) error {
	if len(p) < 2 {
		return fmt.Errorf("field %q too short", p)
	}
	n, err := strconv.ParseInt(p[1:], 10, 64)
	if err != nil || n < 0 || p[1] == '+' {
		return fmt.Errorf("field %q: not a non-negative decimal number", p)
	}
	switch p[0] {
	case 's':
		k.size, k.fields = n, k.fields|hasSize
	case 'm':
		k.mtime, k.fields = n, k.fields|hasMtime
	case 'S':
		k.chunkSize, k.fields = n, k.fields|hasChunk
	case 'C':
		k.chunkNum = n
	default:
		return fmt.Errorf("unknown field %q", p)
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Key) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}
