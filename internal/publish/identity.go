package publish

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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

// Instance is how this host's publisher names itself at the hub
// (hubwire.StateRequest), and what it last heard the hub hold of the host:
// kept in a file beside the host id. The id stays through restarts of the
// daemon within one boot and is new after a reboot, so a copy of the
// machine (a cloned virtual machine, the state directory restored on a
// second one), which boots on its own, publishes under an id of its own
// even though it has the host's files, index and credentials.
type Instance struct {
	ID uint64
	// Held is the publisher the hub last said held this host, and the
	// last change it had applied then. A takeover from another publisher
	// (hubwire.State.Previous) finds the hub with this host's own history
	// only when both still match.
	Held    uint64
	HeldSeq uint64

	path string
	boot string
	mu   sync.Mutex
	kept time.Time // when the file was last written
}

// LoadInstance returns the instance kept in the file at path: its id when
// it was made in this boot, else a new one. A path of "" keeps it in
// memory only.
func LoadInstance(path string) (*Instance, error) {
	in := &Instance{path: path, boot: bootID()}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("publish: read publisher instance: %w", err)
		}
		var boot string
		if _, err := fmt.Sscanf(string(b), "%s %x %x %d", &boot, &in.ID, &in.Held, &in.HeldSeq); err == nil && boot != in.boot {
			in.ID = 0
		}
	}
	if in.ID == 0 || in.boot == "" {
		in.ID = randomInstance()
	}
	return in, in.save()
}

// heldBy notes that the hub holds this host for publisher id, through
// change seq; the file is written at most every few seconds, and by Close.
func (in *Instance) heldBy(id, seq uint64) {
	in.mu.Lock()
	changed := in.Held != id || in.HeldSeq != seq
	in.Held, in.HeldSeq = id, seq
	due := changed && time.Since(in.kept) >= instanceSaveEvery
	in.mu.Unlock()
	if due {
		_ = in.save()
	}
}

// held returns what the hub last held.
func (in *Instance) held() (uint64, uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.Held, in.HeldSeq
}

// instanceSaveEvery spaces the writes of the instance file while acks
// come in.
const instanceSaveEvery = 2 * time.Second

// save writes the file, replacing it whole.
func (in *Instance) save() error {
	if in.path == "" {
		return nil
	}
	in.mu.Lock()
	data := fmt.Sprintf("%s %x %x %d\n", cmp.Or(in.boot, "-"), in.ID, in.Held, in.HeldSeq)
	in.kept = time.Now()
	in.mu.Unlock()
	tmp := in.path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return fmt.Errorf("publish: write publisher instance: %w", err)
	}
	if err := os.Rename(tmp, in.path); err != nil {
		return fmt.Errorf("publish: write publisher instance: %w", err)
	}
	return nil
}

func randomInstance() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}

// bootID is the kernel's id of this boot, "" when it cannot be read.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
