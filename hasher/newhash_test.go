package hasher

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/key"
)

// NewHash computes the digest Hash computes, for every backend it supports.
func TestNewHashMatchesHash(t *testing.T) {
	h := New(DefaultPolicy(), nil)
	defer h.Close()
	path := filepath.Join(t.TempDir(), "f.txt")
	data := []byte("the same bytes, read two ways\n")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, b := range []key.Backend{key.SHA256E, key.SHA256, key.SHA512, key.SHA384E, key.BLAKE2B256, key.BLAKE2B512E, key.SHA1, key.MD5E} {
		res, err := h.Hash(context.Background(), path, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		nh, err := h.NewHash(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		nh.Write(data)
		if got := nh.Sum(nil); string(got) != string(res.Digest) {
			t.Errorf("%s: NewHash %x, Hash %x", b, got, res.Digest)
		}
	}
	if _, err := h.NewHash(key.Unknown); err == nil {
		t.Error("NewHash of an unknown backend did not fail")
	}
}
