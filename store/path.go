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
