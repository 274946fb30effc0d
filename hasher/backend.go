package hasher

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"

	"golang.org/x/crypto/blake2b"

	"github.com/annexd/annexd/key"
)

// SHA256Impl names an in-process SHA-256 implementation.
type SHA256Impl string

// The in-process SHA-256 implementations calibration chooses between.
const (
	SHA256Std SHA256Impl = "crypto/sha256"
	// SHA256SIMD is github.com/minio/sha256-simd. It is a candidate only
	// in programs that import package hasher/simd: annexd does, annexctl
	// does not, so that a lookup's start makes no CPU probes of its own.
	SHA256SIMD SHA256Impl = "sha256-simd"
)

// newSIMD is sha256-simd's constructor, once package hasher/simd is linked.
var newSIMD func() hash.Hash

// RegisterSIMD makes f, sha256-simd's constructor, the SHA256SIMD
// implementation. Package hasher/simd calls it from its init.
func RegisterSIMD(f func() hash.Hash) { newSIMD = f }

// HasSIMD reports whether package hasher/simd is linked, so that a Policy
// may name SHA256SIMD.
func HasSIMD() bool { return newSIMD != nil }

// newHash returns a fresh hash.Hash for backend b. impl names the SHA-256
// implementation; "" is crypto/sha256. Policy.Validate checks impl.
func newHash(b key.Backend, impl SHA256Impl) (hash.Hash, error) {
	switch b.Base() {
	case key.SHA256:
		if impl == SHA256SIMD && newSIMD != nil {
			return newSIMD(), nil
		}
		return sha256.New(), nil
	case key.SHA512:
		return sha512.New(), nil
	case key.SHA384:
		return sha512.New384(), nil
	case key.BLAKE2B256:
		return blake2b.New256(nil)
	case key.BLAKE2B512:
		return blake2b.New512(nil)
	case key.SHA1:
		return sha1.New(), nil
	case key.MD5:
		return md5.New(), nil
	}
	return nil, fmt.Errorf("%w: %s", ErrBackend, b)
}

// Supported reports whether the hasher can compute backend b.
func Supported(b key.Backend) bool {
	_, err := newHash(b, SHA256Std)
	return err == nil
}

func isSHA256(b key.Backend) bool { return b.Base() == key.SHA256 }
