// Package key is the git-annex key as a value type: parsing and formatting of
// the full key grammar, the hash backends' names, and the E-backend extension
// rule, byte-identical to git-annex 10.
//
// A key looks like BACKEND[-sSIZE][-mMTIME][-SCHUNKSIZE-CCHUNKNUM]--NAME, for
// example
//
//	SHA256E-s1048576--c0ffee…e5.tar.gz
//
// Key is comparable and can be used as a map key. The package imports only the
// standard library; turning bytes into digests is the hasher's job.
package key

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors returned by Parse and FromDigest.
var (
	// ErrSyntax is wrapped by every Parse error.
	ErrSyntax = errors.New("key: malformed key")
	// ErrBackend is returned for a backend name this package does not know.
	ErrBackend = errors.New("key: unknown backend")
	// ErrDigestLength is returned when a digest does not fit its backend.
	ErrDigestLength = errors.New("key: digest length does not match backend")
)

// field bits of Key.fields.
const (
	hasSize uint8 = 1 << iota
	hasMtime
	hasChunk
)

// Key is a git-annex key. The zero Key is invalid; IsZero reports it.
type Key struct {
	backend   string
	name      string
	size      int64
	mtime     int64
	chunkSize int64
	chunkNum  int64
	fields    uint8
}

// FromDigest builds the key that git-annex computes for a file named filename
// (a path or a base name; only the base name matters) of size bytes whose
// content hashes to digest under backend b. For E backends the extension is
// taken from filename under rule r.
func FromDigest(b Backend, digest []byte, size int64, filename string, r ExtRule) (Key, error) {
	if !b.Valid() {
		return Key{}, ErrBackend
	}
	if len(digest) != b.DigestLen() {
		return Key{}, fmt.Errorf("%w: %s wants %d bytes, got %d", ErrDigestLength, b, b.DigestLen(), len(digest))
	}
	name := hex.EncodeToString(digest)
	if b.HasExtension() {
		name += Extension(filename, r)
	}
	return Key{backend: b.String(), name: name, size: size, fields: hasSize}, nil
}

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k == Key{} }

// BackendName returns the backend field as written, e.g. "SHA256E" or "WORM".
func (k Key) BackendName() string { return k.backend }

// Backend returns the hash backend of k, or Unknown for backends that are not
// hash backends this package knows (WORM, URL, …).
func (k Key) Backend() Backend {
	b, err := ParseBackend(k.backend)
	if err != nil {
		return Unknown
	}
	return b
}

// Name returns the part after "--": for hash backends the hex digest followed,
// for E backends, by the extension.
func (k Key) Name() string { return k.name }

// Size returns the -s field.
func (k Key) Size() (int64, bool) { return k.size, k.fields&hasSize != 0 }

// Mtime returns the -m field.
func (k Key) Mtime() (int64, bool) { return k.mtime, k.fields&hasMtime != 0 }

// Chunk returns the -S and -C fields.
func (k Key) Chunk() (size, num int64, ok bool) {
	return k.chunkSize, k.chunkNum, k.fields&hasChunk != 0
}

// Digest returns the digest bytes of a hash-backend key.
func (k Key) Digest() ([]byte, error) {
	b := k.Backend()
	if b == Unknown {
		return nil, fmt.Errorf("%w: %q has no digest", ErrBackend, k.backend)
	}
	n := 2 * b.DigestLen()
	if len(k.name) < n {
		return nil, fmt.Errorf("%w: name %q shorter than a %s digest", ErrSyntax, k.name, b)
	}
	d, err := hex.DecodeString(k.name[:n])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return d, nil
}

// Extension returns the extension part of an E-backend key's name ("" when
// none), e.g. ".tar.gz".
func (k Key) Extension() string {
	b := k.Backend()
	if b == Unknown || !b.HasExtension() || len(k.name) < 2*b.DigestLen() {
		return ""
	}
	return k.name[2*b.DigestLen():]
}
