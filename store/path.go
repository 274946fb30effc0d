package store

import (
	"bytes"
	"fmt"

	"github.com/annexd/annexd/store/codec"
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

// joinPath builds a path from a directory key and a base name.
func joinPath(dirKey, base []byte) []byte {
	p := make([]byte, 0, len(dirKey)+len(base))
	return append(append(p, dirKey...), base...)
}

// digestKey is the bydigest and groups prefix: base backend ‖ digest.
func digestKey(buf []byte, r *Record) []byte {
	return codec.DigestKey(buf, r.Backend.Base(), r.Digest)
}

// successor is the smallest key after k.
func successor(k []byte) []byte { return append(bytes.Clone(k), 0) }
