package publish

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/annexd/annexd/internal/hubwire"
)

// LoadHostID returns the host id kept in the file at path, making one (a
// random UUID) the first time. It lives beside the index, not in it, so a
// rebuilt index keeps its host's id.
func LoadHostID(path string) ([16]byte, error) {
	var id [16]byte
	b, err := os.ReadFile(path)
	if err == nil {
		return ParseHostID(strings.TrimSpace(string(b)))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return id, fmt.Errorf("publish: read host id: %w", err)
	}
	_, _ = rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	if err := writeFileAtomic(path, []byte(hubwire.UUIDString(id)+"\n")); err != nil {
		return id, fmt.Errorf("publish: write host id: %w", err)
	}
	return id, nil
}

// ParseHostID parses a UUID in its 8-4-4-4-12 form.
func ParseHostID(s string) ([16]byte, error) {
	var id [16]byte
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(id) || hubwire.UUIDString([16]byte(b)) != strings.ToLower(s) {
		return id, fmt.Errorf("publish: bad host id %q", s)
	}
	return [16]byte(b), nil
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil {
		return err // another process made it first: the caller retries the read
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// DefaultName is the host's name at the hub when none is configured: the
// short host name, with characters a subject cannot hold replaced by '-'.
func DefaultName() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("publish: host name: %w", err)
	}
	h, _, _ = strings.Cut(h, ".")
	var sb strings.Builder
	for _, r := range h {
		if r < 128 && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
	}
	name := sb.String()
	if len(name) > 64 {
		name = name[:64]
	}
	return name, hubwire.CheckName(name)
}
