package publish

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/durable"
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
	if err := durable.CreateFile(path, []byte(hubwire.UUIDString(id)+"\n")); err != nil {
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
// (hubwire.StateRequest), kept in a file beside the host id. The id stays
// through restarts of the daemon on one machine within one boot, and is
// new after a reboot, on another host name, or with the state directory
// at another path: a copy of the machine (a cloned virtual machine, the
// state directory restored on a second one or copied beside the first, a
// container started from the same image) gets one of its own even though
// it has the host's files, index and credentials. What the hub last held
// of the host is kept in the index itself (heldMeta), so a copy of the
// index never claims more than it holds.
type Instance struct {
	ID   uint64
	path string
	key  string // what the id is tied to: the boot, the host name, the file's place
}

// LoadInstance returns the instance kept in the file at path: its id when
// the file was made in this boot, on this host name, at this path, else a
// new one. A path of "" keeps it in memory only.
func LoadInstance(path string) (*Instance, error) {
	in := &Instance{path: path, key: instanceKey(path)}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("publish: read publisher instance: %w", err)
		}
		in.ID = parseInstance(string(b), in.key)
	}
	if in.ID == 0 {
		in.ID = randomInstance()
	}
	return in, in.save()
}

// parseInstance returns the id of an instance file made under key; 0
// when the file is another's, or not one whole.
func parseInstance(text, key string) uint64 {
	f := strings.Fields(text)
	if len(f) != 2 || f[0] != key {
		return 0
	}
	id, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil {
		return 0
	}
	return id
}

// instanceKey ties an instance to this boot, this host name and the
// file's absolute path; "" when the boot id cannot be read (a new id at
// every start then).
func instanceKey(path string) string {
	boot := fsstat.BootID()
	if boot == "" {
		return ""
	}
	host, _ := os.Hostname()
	abs, _ := filepath.Abs(path)
	sum := sha256.Sum256([]byte(boot + "\x00" + host + "\x00" + abs))
	return hex.EncodeToString(sum[:12])
}

// renew makes id the instance's, kept in its file. Only the publisher
// that owns the instance calls it.
func (in *Instance) renew(id uint64) error {
	in.ID = id
	return in.save()
}

// save writes the file, replacing it whole.
func (in *Instance) save() error {
	if in.path == "" || in.key == "" {
		return nil
	}
	tmp := in.path + ".new"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%s %x\n", in.key, in.ID)), 0o600); err != nil {
		return fmt.Errorf("publish: write publisher instance: %w", err)
	}
	if err := os.Rename(tmp, in.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("publish: write publisher instance: %w", err)
	}
	return nil
}

func randomInstance() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}
