package store

import (
	"bytes"
	"fmt"
	"math/bits"
)

// maxPath is PATH_MAX on Linux.
const maxPath = 4095

// checkPath accepts absolute, clean paths: they start with '/', do not end
// with '/', and have no empty, "." or ".." components and no NUL byte. The
// root "/" itself is accepted only where dirOK is set.
func checkPath(p []byte, dirOK bool) error {
	if len(p) == 1 && p[0] == '/' && dirOK {
		return nil
	}
	switch {
	case len(p) < 2 || p[0] != '/':
		return fmt.Errorf("%w: %q is not absolute", ErrPath, p)
	case len(p) > maxPath:
		return fmt.Errorf("%w: %d bytes is longer than PATH_MAX", ErrPath, len(p))
	case bytes.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: %q contains NUL", ErrPath, p)
	}
	for rest := p[1:]; ; {
		i := bytes.IndexByte(rest, '/')
		c := rest
		if i >= 0 {
			c = rest[:i]
		}
		if len(c) == 0 || (len(c) == 1 && c[0] == '.') || (len(c) == 2 && c[0] == '.' && c[1] == '.') {
			return fmt.Errorf("%w: %q is not clean", ErrPath, p)
		}
		if i < 0 {
			return nil
		}
		rest = rest[i+1:]
	}
}

// splitPath returns the directory key ("/" or "/a/b/") and the base name of a
// checked file path.
func splitPath(p []byte) (dirKey, base []byte) {
	i := bytes.LastIndexByte(p, '/')
	return p[:i+1], p[i+1:]
}

// subtreePrefix is the directory-key prefix of every directory at or below
// dir: "/a/b" → "/a/b/", "/" → "/".
func subtreePrefix(dir []byte) []byte {
	if len(dir) == 1 {
		return []byte{'/'}
	}
	return append(bytes.Clone(dir), '/')
}

// appendID appends an id (a directory id, a device or an inode number) in
// an order-preserving form: one byte counting its significant bytes (0–8),
// then those bytes big-endian. Encoded ids compare as bytes as the numbers
// do, and none is a prefix of another, so keys that start with one sort by
// it and a prefix scan of one id never meets another.
func appendID(b []byte, v uint64) []byte {
	n := (bits.Len64(v) + 7) / 8
	b = append(b, byte(n))
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

// readID decodes the id at the start of b and returns its length in
// bytes, or 0 when b does not start with a canonical encoded id.
func readID(b []byte) (uint64, int) {
	if len(b) == 0 || b[0] > 8 || len(b) < 1+int(b[0]) {
		return 0, 0
	}
	n := int(b[0])
	if n > 0 && b[1] == 0 {
		return 0, 0 // not minimal: would sort apart from its number
	}
	var v uint64
	for _, c := range b[1 : 1+n] {
		v = v<<8 | uint64(c)
	}
	return v, 1 + n
}

// idKey is an id alone: the dirnames key and the dirs value.
func idKey(id uint64) []byte { return appendID(make([]byte, 0, 9), id) }

// parseIDKey decodes an id that must fill b.
func parseIDKey(b []byte) (uint64, bool) {
	id, n := readID(b)
	return id, n > 0 && n == len(b)
}

// fileKey is the files-bucket key: id(dirID) ‖ base.
func fileKey(buf []byte, id uint64, base []byte) []byte {
	return append(appendID(buf[:0], id), base...)
}

// splitFileKey returns the directory id and base name of a files key.
func splitFileKey(fk []byte) (id uint64, base []byte, ok bool) {
	id, n := readID(fk)
	if n == 0 {
		return 0, nil, false
	}
	return id, fk[n:], true
}

// joinPath builds a path from a directory key and a base name.
func joinPath(dirKey, base []byte) []byte {
	p := make([]byte, 0, len(dirKey)+len(base))
	return append(append(p, dirKey...), base...)
}

// inodeKey is the inodes-bucket prefix id(dev) ‖ id(ino).
func inodeKey(buf []byte, dev, ino uint64) []byte {
	return appendID(appendID(buf[:0], dev), ino)
}

// digestKey is the bydigest and groups prefix: base backend ‖ digest.
func digestKey(buf []byte, r *Record) []byte {
	buf = append(buf[:0], byte(r.Backend.Base()))
	return append(buf, r.Digest...)
}

// successor is the smallest key after k.
func successor(k []byte) []byte { return append(bytes.Clone(k), 0) }
