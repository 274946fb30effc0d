package key

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The numbers are stored on disk: this pins them.
func TestBackendNumbersAreStable(t *testing.T) {
	want := []struct {
		b    Backend
		n    uint8
		name string
	}{
		{Unknown, 0, ""}, {SHA256E, 1, "SHA256E"}, {SHA256, 2, "SHA256"},
		{SHA512E, 3, "SHA512E"}, {SHA512, 4, "SHA512"}, {SHA384E, 5, "SHA384E"},
		{SHA384, 6, "SHA384"}, {BLAKE2B256E, 7, "BLAKE2B256E"}, {BLAKE2B256, 8, "BLAKE2B256"},
		{BLAKE2B512E, 9, "BLAKE2B512E"}, {BLAKE2B512, 10, "BLAKE2B512"}, {SHA1E, 11, "SHA1E"},
		{SHA1, 12, "SHA1"}, {MD5E, 13, "MD5E"}, {MD5, 14, "MD5"},
	}
	for _, w := range want {
		if uint8(w.b) != w.n {
			t.Errorf("%s = %d, want %d", w.name, uint8(w.b), w.n)
		}
		if w.b != Unknown && w.b.String() != w.name {
			t.Errorf("Backend(%d).String() = %q, want %q", w.n, w.b.String(), w.name)
		}
	}
	if len(Backends()) != len(want)-1 {
		t.Errorf("Backends() = %v: the table above must list every backend", Backends())
	}
}

func TestBackends(t *testing.T) {
	if Default != SHA256E {
		t.Errorf("Default = %v", Default)
	}
	for _, b := range Backends() {
		p, err := ParseBackend(b.String())
		if err != nil || p != b {
			t.Errorf("ParseBackend(%q) = %v, %v", b, p, err)
		}
		e := strings.HasSuffix(b.String(), "E")
		if b.HasExtension() != e {
			t.Errorf("%v.HasExtension() = %v", b, b.HasExtension())
		}
		if b.Base().HasExtension() || b.WithExtension().String() != b.Base().String()+"E" {
			t.Errorf("%v: Base %v, WithExtension %v", b, b.Base(), b.WithExtension())
		}
		insecure := strings.HasPrefix(b.String(), "SHA1") || strings.HasPrefix(b.String(), "MD5")
		if b.Insecure() != insecure {
			t.Errorf("%v.Insecure() = %v", b, b.Insecure())
		}
		if b.DigestLen() != newHash(t, b).Size() {
			t.Errorf("%v.DigestLen() = %d, its hash gives %d", b, b.DigestLen(), newHash(t, b).Size())
		}
	}
	for _, name := range []string{"", "sha256e", "SHA256E ", "WORM", "SHA224", "Backend(1)"} {
		if b, err := ParseBackend(name); !errors.Is(err, ErrBackend) || b != Unknown {
			t.Errorf("ParseBackend(%q) = %v, %v; want ErrBackend", name, b, err)
		}
	}
	if Unknown.Valid() || Backend(99).Valid() || Backend(99).String() != "Backend(99)" || Backend(99).DigestLen() != 0 {
		t.Errorf("invalid backends are not reported as such")
	}
}

func TestFromDigest(t *testing.T) {
	d := bytes.Repeat([]byte{0xab}, 32)
	k, err := FromDigest(SHA256E, d, 7, "/x/y/photo.backup.JPG", DefaultExtRule)
	if err != nil {
		t.Fatal(err)
	}
	// "backup" is 6 bytes, too long: only ".JPG" is kept.
	if want := "SHA256E-s7--" + strings.Repeat("ab", 32) + ".JPG"; k.String() != want {
		t.Fatalf("key = %s, want %s", k, want)
	}
	if k.Backend() != SHA256E || k.Extension() != ".JPG" {
		t.Errorf("Backend %v, Extension %q", k.Backend(), k.Extension())
	}
	if got, err := k.Digest(); err != nil || !bytes.Equal(got, d) {
		t.Errorf("Digest() = %x, %v", got, err)
	}
	k, err = FromDigest(SHA256, d, 7, "photo.JPG", DefaultExtRule)
	if err != nil || k.String() != "SHA256-s7--"+strings.Repeat("ab", 32) || k.Extension() != "" {
		t.Errorf("SHA256 key = %s, %v", k, err)
	}
	if _, err := FromDigest(SHA256E, d[:31], 7, "x", DefaultExtRule); !errors.Is(err, ErrDigestLength) {
		t.Errorf("short digest: %v", err)
	}
	if _, err := FromDigest(Unknown, d, 7, "x", DefaultExtRule); !errors.Is(err, ErrBackend) {
		t.Errorf("unknown backend: %v", err)
	}
	if _, err := FromDigest(SHA256E, d, -1, "x", DefaultExtRule); !errors.Is(err, ErrSize) {
		t.Errorf("negative size: %v", err)
	}
}

func TestDigestOfMalformedNames(t *testing.T) {
	h := strings.Repeat("0f", 32)
	tests := []struct {
		key     string
		wantErr error
		ext     string
	}{
		{"SHA256E-s1--" + h, nil, ""},
		{"SHA256E-s1--" + h + ".a.b", nil, ".a.b"},
		{"SHA256-s1--" + h, nil, ""},
		{"SHA256-s1--" + h + ".txt", ErrSyntax, ""},
		{"SHA256E-s1--" + h + "x", ErrSyntax, ""},
		{"SHA256E-s1--" + h[:62], ErrSyntax, ""},
		{"SHA256E-s1--" + strings.ToUpper(h), ErrSyntax, ""},
		{"SHA256E-s1--" + h[:62] + "zz", ErrSyntax, ""},
		{"WORM-s1-m1--" + h, ErrBackend, ""},
	}
	for _, tt := range tests {
		k, err := Parse(tt.key)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.key, err)
		}
		d, err := k.Digest()
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("Digest of %q: %x, %v; want error %v", tt.key, d, err, tt.wantErr)
		}
		if got := k.Extension(); got != tt.ext {
			t.Errorf("Extension of %q = %q, want %q", tt.key, got, tt.ext)
		}
	}
}

func TestZeroKey(t *testing.T) {
	var k Key
	if !k.IsZero() || k.String() != "" || k.Backend() != Unknown || k.Extension() != "" {
		t.Errorf("zero key: %#v", k)
	}
	if _, err := k.Digest(); err == nil {
		t.Error("zero key has a digest")
	}
	if _, _, ok := k.Chunk(); ok {
		t.Error("zero key has chunk fields")
	}
	c, _ := Parse("SHA256E-S1-C2--x")
	if s, n, ok := c.Chunk(); !ok || s != 1 || n != 2 {
		t.Errorf("Chunk() = %d, %d, %v", s, n, ok)
	}
	c, _ = Parse("SHA256E-C2--x")
	if _, _, ok := c.Chunk(); ok {
		t.Error("Chunk() ok with -C alone")
	}
}
