package hasher

import (
	"hash"

	"github.com/annexd/annexd/key"
)

// NewHash returns a new hash of backend b, with the SHA-256 code the
// Hasher's policy chose. A caller that reads files itself (an audit with
// its own pacing and cache rules) gets the digests Hash would compute.
func (h *Hasher) NewHash(b key.Backend) (hash.Hash, error) { return h.p.NewHash(b) }

// NewHash returns a new hash of backend b, with the SHA-256 code p names.
func (p Policy) NewHash(b key.Backend) (hash.Hash, error) { return newHash(b, p.SHA256) }
