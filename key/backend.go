package key

import "fmt"

// Backend is a hash backend git-annex knows. The numeric values are written to
// the index on disk: never renumber them, only append.
type Backend uint8

// The hash backends. The E variants add the file's extension to the key name.
const (
	Unknown Backend = iota
	SHA256E
	SHA256
	SHA512E
	SHA512
	SHA384E
	SHA384
	BLAKE2B256E
	BLAKE2B256
	BLAKE2B512E
	BLAKE2B512
	SHA1E
	SHA1
	MD5E
	MD5
	backendEnd
)

type backendInfo struct {
	name      string
	digestLen int
	ext       bool
	insecure  bool
}

var backends = [backendEnd]backendInfo{
	Unknown:     {"", 0, false, false},
	SHA256E:     {"SHA256E", 32, true, false},
	SHA256:      {"SHA256", 32, false, false},
	SHA512E:     {"SHA512E", 64, true, false},
	SHA512:      {"SHA512", 64, false, false},
	SHA384E:     {"SHA384E", 48, true, false},
	SHA384:      {"SHA384", 48, false, false},
	BLAKE2B256E: {"BLAKE2B256E", 32, true, false},
	BLAKE2B256:  {"BLAKE2B256", 32, false, false},
	BLAKE2B512E: {"BLAKE2B512E", 64, true, false},
	BLAKE2B512:  {"BLAKE2B512", 64, false, false},
	SHA1E:       {"SHA1E", 20, true, true},
	SHA1:        {"SHA1", 20, false, true},
	MD5E:        {"MD5E", 16, true, true},
	MD5:         {"MD5", 16, false, true},
}

// Default is the backend used when none is named, as in git-annex.
const Default = SHA256E

// Backends lists every known backend in a fixed order.
func Backends() []Backend {
	out := make([]Backend, 0, backendEnd-1)
	for b := Unknown + 1; b < backendEnd; b++ {
		out = append(out, b)
	}
	return out
}

// ParseBackend returns the backend called name (exact, upper case as
// git-annex writes it).
func ParseBackend(name string) (Backend, error) {
	for b := Unknown + 1; b < backendEnd; b++ {
		if backends[b].name == name {
			return b, nil
		}
	}
	return Unknown, fmt.Errorf("%w: %q", ErrBackend, name)
}

// Valid reports whether b is a known backend.
func (b Backend) Valid() bool { return b > Unknown && b < backendEnd }

// String returns the backend's name as git-annex writes it.
func (b Backend) String() string {
	if !b.Valid() {
		return fmt.Sprintf("Backend(%d)", uint8(b))
	}
	return backends[b].name
}

// DigestLen returns the digest size in bytes.
func (b Backend) DigestLen() int {
	if !b.Valid() {
		return 0
	}
	return backends[b].digestLen
}

// HasExtension reports whether keys of b carry the file's extension.
func (b Backend) HasExtension() bool { return b.Valid() && backends[b].ext }

// Insecure reports whether b's hash is broken for collision resistance
// (SHA1, MD5); git-annex marks such keys as not cryptographically secure.
func (b Backend) Insecure() bool { return b.Valid() && backends[b].insecure }

// Base returns the backend without the extension: SHA256E → SHA256.
func (b Backend) Base() Backend {
	if b.HasExtension() {
		return b + 1
	}
	return b
}

// WithExtension returns the E variant: SHA256 → SHA256E.
func (b Backend) WithExtension() Backend {
	if b.Valid() && !b.HasExtension() {
		return b - 1
	}
	return b
}
