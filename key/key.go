package key

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors returned by Parse, FromDigest and the Key methods.
var (
	// ErrSyntax is wrapped by every Parse error, and by Digest for a name
	// that does not start with its backend's lower-case hex digest.
	ErrSyntax = errors.New("key: malformed key")
	// ErrBackend is returned for a backend name this package does not know.
	ErrBackend = errors.New("key: unknown backend")
	// ErrDigestLength is returned when a digest does not fit its backend.
	ErrDigestLength = errors.New("key: digest length does not match backend")
	// ErrSize is returned by FromDigest for a negative size.
	ErrSize = errors.New("key: negative size")
)

// field bits of Key.fields.
const (
	hasSize uint8 = 1 << iota
	hasMtime
	hasChunkSize
	hasChunkNum
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
//
// As with git-annex, a rule that allows long extensions can give a key whose
// extension exceeds the 64 bytes git-annex's parser (and Parse) accepts.
func FromDigest(b Backend, digest []byte, size int64, filename string, r ExtRule) (Key, error) {
	if !b.Valid() {
		return Key{}, fmt.Errorf("%w: %v", ErrBackend, b)
	}
	if size < 0 {
		return Key{}, fmt.Errorf("%w: %d", ErrSize, size)
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

// Chunk returns the -S and -C fields; ok is true when both are present, as
// they are in every key git-annex writes for a chunk.
func (k Key) Chunk() (size, num int64, ok bool) {
	const both = hasChunkSize | hasChunkNum
	return k.chunkSize, k.chunkNum, k.fields&both == both
}

// ChunkSize returns the -S field. git-annex's parser accepts it without -C.
func (k Key) ChunkSize() (int64, bool) { return k.chunkSize, k.fields&hasChunkSize != 0 }

// ChunkNum returns the -C field. git-annex's parser accepts it without -S.
func (k Key) ChunkNum() (int64, bool) { return k.chunkNum, k.fields&hasChunkNum != 0 }

// Digest returns the digest bytes of a hash-backend key. The name must be
// the lower-case hex digest, followed for E backends by nothing or by an
// extension starting with a dot.
func (k Key) Digest() ([]byte, error) {
	b := k.Backend()
	if b == Unknown {
		return nil, fmt.Errorf("%w: %q has no digest", ErrBackend, k.backend)
	}
	hexDigest, _, err := k.splitName(b)
	if err != nil {
		return nil, err
	}
	d, err := hex.DecodeString(hexDigest)
	if err != nil {
		return nil, fmt.Errorf("%w %q: digest is not hex: %v", ErrSyntax, k.String(), err)
	}
	return d, nil
}

// Extension returns the extension part of an E-backend key's name ("" when
// none, or when k is not a well-formed hash-backend key), e.g. ".tar.gz".
func (k Key) Extension() string {
	b := k.Backend()
	if b == Unknown {
		return ""
	}
	_, ext, err := k.splitName(b)
	if err != nil {
		return ""
	}
	return ext
}

// splitName splits the name of a key of backend b into its hex digest and
// its extension.
func (k Key) splitName(b Backend) (hexDigest, ext string, err error) {
	n := 2 * b.DigestLen()
	if len(k.name) < n {
		return "", "", fmt.Errorf("%w %q: name shorter than a %s digest", ErrSyntax, k.String(), b)
	}
	hexDigest, ext = k.name[:n], k.name[n:]
	for i := 0; i < n; i++ {
		if c := hexDigest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", "", fmt.Errorf("%w %q: digest is not lower-case hex", ErrSyntax, k.String())
		}
	}
	switch {
	case ext == "":
	case !b.HasExtension():
		return "", "", fmt.Errorf("%w %q: %s name is longer than its digest", ErrSyntax, k.String(), b)
	case ext[0] != '.':
		return "", "", fmt.Errorf("%w %q: extension does not start with a dot", ErrSyntax, k.String())
	}
	return hexDigest, ext, nil
}
