package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
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
	}
	// One pass: start is where the current component began; a NUL, an
	// empty component, "." or ".." is an error.
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			switch p[i] {
			case 0:
				return fmt.Errorf("%w: %q contains NUL", ErrPath, p)
			case '/':
			default:
				continue
			}
		}
		switch n := i - start; {
		case n == 0, n == 1 && p[start] == '.', n == 2 && p[start] == '.' && p[start+1] == '.':
			return fmt.Errorf("%w: %q is not clean", ErrPath, p)
		}
		start = i + 1
	}
	return nil
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

// fileKey is the files-bucket key: uvarint(dirID) ‖ base.
func fileKey(buf []byte, id uint64, base []byte) []byte {
	buf = binary.AppendUvarint(buf[:0], id)
	return append(buf, base...)
}

// splitFileKey returns the directory id and base name of a files key.
func splitFileKey(fk []byte) (id uint64, base []byte, ok bool) {
	id, n := binary.Uvarint(fk)
	if n <= 0 {
		return 0, nil, false
	}
	return id, fk[n:], true
}

// joinPath builds a path from a directory key and a base name.
func joinPath(dirKey, base []byte) []byte {
	p := make([]byte, 0, len(dirKey)+len(base))
	return append(append(p, dirKey...), base...)
}

// inodeKey is the inodes-bucket prefix uvarint(dev) ‖ uvarint(ino).
func inodeKey(buf []byte, dev, ino uint64) []byte {
	buf = binary.AppendUvarint(buf[:0], dev)
	return binary.AppendUvarint(buf, ino)
}

// digestKey is the bydigest and groups prefix: base backend ‖ digest.
func digestKey(buf []byte, r *Record) []byte {
	buf = append(buf[:0], byte(r.Backend.Base()))
	return append(buf, r.Digest...)
}
