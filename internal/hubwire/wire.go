// Package hubwire is what hosts and the hub say to each other over NATS:
// subjects, the batch of changes a host publishes, and the query and state
// messages.
//
// Every subject a host publishes to ends in, or holds, NAME, the user its
// credentials name at the hub: annexd.changes.NAME for its batches,
// annexd.hub.state.NAME and annexd.hub.query.NAME.QUERY for its requests.
// The hub's permissions let a host publish there and nowhere else, so the
// subject tells the hub who sent a message. A reply subject proves
// nothing: the hub answers only into the asker's own inbox, _INBOX_NAME.
//
// A batch is either a run of the host's change log (Log: the changes
// First+1 to Last, one entry each, in order) or a part of a whole resend:
// SnapBegin, then SnapChunk 1…K, then SnapEnd, all with the same Epoch.
// Decoding is bounded before it allocates: MaxEntries entries, each path
// at most MaxPath bytes, MaxPathBytes of paths in all.
package hubwire

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/annexd/annexd/key"
)

// Subjects and names.
const (
	// Stream holds the batches until the hub has applied them.
	Stream = "ANNEXD_CHANGES"
	// ChangesPrefix is followed by a host's name.
	ChangesPrefix = "annexd.changes."
	// StatePrefix is followed by a host's name: a request for what the
	// hub has of that host, which also tells the hub the host is alive.
	StatePrefix = "annexd.hub.state."
	// AckPrefix is followed by a host's name: the hub says there what it
	// has applied (a State) after each batch.
	AckPrefix = "annexd.hub.ack."
	// ClaimPrefix is followed by a host's name: a publisher's claim to
	// the host's name, which the hub writes into the stream for each
	// state request (the hub's claim.go). Hosts cannot publish there.
	ClaimPrefix = "annexd.hub.claim."
	// QueryPrefix is followed by the asking host's name and a query
	// name (QuerySubject).
	QueryPrefix = "annexd.hub.query."
	// InboxPrefix is followed by a host's name: its private reply inbox.
	// Answers to a host go to InboxPrefix+NAME+".…" and nowhere else.
	InboxPrefix = "_INBOX_"
)

// QuerySubject is where host name asks query.
func QuerySubject(name, query string) string { return QueryPrefix + name + "." + query }

// InboxOf reports whether reply is a subject in host name's own inbox: a
// literal subject below InboxPrefix+name.
func InboxOf(name, reply string) bool {
	rest, ok := strings.CutPrefix(reply, InboxPrefix+name+".")
	if !ok || rest == "" {
		return false
	}
	for _, tok := range strings.Split(rest, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// Queries, after QueryPrefix.
const (
	QueryWhereis = "whereis"
	QueryDups    = "dups"
	QueryCopies  = "copies"
	QueryHosts   = "hosts"
	// QueryCopyRead reads a copy from the asker's incoming bucket
	// (CopyReadRequest): the hub answers with several messages.
	QueryCopyRead = "copyread"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrName: a host name that cannot be a NATS subject token.
var ErrName = errors.New("hubwire: bad host name")

// CheckName reports whether name can name a host: 1–64 letters, digits,
// '-' or '_'.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w %q: use 1-64 letters, digits, '-' or '_'", ErrName, name)
	}
	return nil
}

// Kind is what a batch carries.
type Kind uint8

// The kinds of batch.
const (
	Log Kind = iota + 1
	SnapBegin
	SnapChunk
	SnapEnd
)

var kindNames = [...]string{Log: "log", SnapBegin: "snap-begin", SnapChunk: "snap-chunk", SnapEnd: "snap-end"}

func (k Kind) String() string {
	if k >= Log && k <= SnapEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Batch is one message on a host's subject.
//
// For Log, First is the last change before the batch and Last its last
// change: Entries[i] is change First+1+i. SnapBegin says a whole resend
// of index IndexID starts; SnapChunk number First carries records of it;
// SnapEnd says it is complete with First chunks and reflects every change
// up to Last. Epoch names the resend, and log batches after it carry it.
type Batch struct {
	Kind    Kind
	HostID  [16]byte // the host's UUID
	IndexID [16]byte
	Epoch   uint64
	First   uint64
	Last    uint64
	Entries []Entry
	// Chain is the sender's chain at First (a log batch's), carried in
	// ChainHeader rather than in Marshal's bytes, which older hubs
	// decode; zero when none.
	Chain Chain
}

// Entry is what one path holds: a tombstone when Backend is key.Unknown.
type Entry struct {
	Path    []byte
	Backend key.Backend
	Digest  []byte
	Size    int64
}

// Tombstone reports whether the path holds no known content.
func (e *Entry) Tombstone() bool { return e.Backend == key.Unknown }

// MsgID is the NATS message id of b under secret, a key only the
// publishing host holds. Retries of one batch share it, so the stream
// keeps one copy within its duplicate window. The stream's window spans
// every host's subject; an id no other host can compute is what keeps
// one host from having another's batches dropped as duplicates.
func (b *Batch) MsgID(secret []byte) string {
	mac := hmac.New(sha256.New, secret)
	var buf [64]byte
	head := append(buf[:0], byte(b.Kind))
	head = append(head, b.HostID[:]...)
	head = append(head, b.IndexID[:]...)
	for _, v := range []uint64{b.Epoch, b.First, b.Last} {
		head = binary.BigEndian.AppendUint64(head, v)
	}
	mac.Write(head)
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// Bounds of a batch, checked while decoding before anything is allocated.
// A host's publisher stays well within them (Batch entries of at most
// 512 KiB, paths at most the store's 4095 bytes).
const (
	// MaxPath is PATH_MAX: the longest path an entry may name.
	MaxPath = 4096
	// MaxEntries is the most entries one batch carries.
	MaxEntries = 16384
	// MaxPathBytes bounds the paths of one batch together, once each
	// shares its prefix with the one before expanded.
	MaxPathBytes = 1 << 20
)

const batchV1 = 1

// ErrDecode: a batch that does not decode.
var ErrDecode = errors.New("hubwire: bad batch")

// Marshal encodes b. Paths share prefixes with the entry before, which
// keeps the files of one directory cheap.
func (b *Batch) Marshal() []byte {
	out := make([]byte, 0, 64+len(b.Entries)*64)
	out = append(out, batchV1, byte(b.Kind))
	out = append(out, b.HostID[:]...)
	out = append(out, b.IndexID[:]...)
	for _, v := range []uint64{b.Epoch, b.First, b.Last, uint64(len(b.Entries))} {
		out = binary.AppendUvarint(out, v)
	}
	var prev []byte
	for i := range b.Entries {
		e := &b.Entries[i]
		n := commonPrefix(prev, e.Path)
		out = binary.AppendUvarint(out, uint64(n))
		out = binary.AppendUvarint(out, uint64(len(e.Path)-n))
		out = append(out, e.Path[n:]...)
		out = append(out, byte(e.Backend))
		if !e.Tombstone() {
			out = append(out, e.Digest...)
			out = binary.AppendUvarint(out, uint64(e.Size))
		}
		prev = e.Path
	}
	return out
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b), 1<<16)
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Unmarshal decodes a batch Marshal made. It refuses, before allocating
// them, more than MaxEntries entries, a path longer than MaxPath or paths
// longer than MaxPathBytes in all.
func Unmarshal(data []byte) (Batch, error) {
	var b Batch
	r := reader{b: data}
	if v := r.byte(); v != batchV1 {
		return b, fmt.Errorf("%w: version %d", ErrDecode, v)
	}
	b.Kind = Kind(r.byte())
	copy(b.HostID[:], r.bytes(16))
	copy(b.IndexID[:], r.bytes(16))
	b.Epoch, b.First, b.Last = r.uvarint(), r.uvarint(), r.uvarint()
	n := r.uvarint()
	switch {
	case r.err != nil:
	case b.Kind < Log || b.Kind > SnapEnd:
		r.err = fmt.Errorf("%w: kind %d", ErrDecode, b.Kind)
	case n > MaxEntries:
		r.err = fmt.Errorf("%w: %d entries, more than %d", ErrDecode, n, MaxEntries)
	case n > uint64(len(r.b))/minEntry:
		r.err = fmt.Errorf("%w: %d entries in %d bytes", ErrDecode, n, len(r.b))
	}
	if r.err == nil && n > 0 {
		b.Entries = make([]Entry, 0, n)
	}
	var prev []byte
	total := 0
	for i := uint64(0); i < n && r.err == nil; i++ {
		e, err := r.entry(prev, &total)
		if err != nil {
			r.err = err
			break
		}
		b.Entries = append(b.Entries, e)
		prev = e.Path
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrDecode, len(r.b))
	}
	if r.err == nil && b.Kind == Log && b.Last-b.First != uint64(len(b.Entries)) {
		r.err = fmt.Errorf("%w: log %d-%d with %d entries", ErrDecode, b.First, b.Last, len(b.Entries))
	}
	if r.err != nil {
		return Batch{}, r.err
	}
	return b, nil
}

// minEntry is the fewest bytes an entry takes: two lengths and a backend.
const minEntry = 3

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrDecode, what)
	}
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || len(r.b) < n {
		r.fail("truncated")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// entry decodes one entry after the one with path prev; total counts
// the paths' bytes so far.
func (r *reader) entry(prev []byte, total *int) (Entry, error) {
	var e Entry
	shared, rest := r.uvarint(), r.uvarint()
	if r.err != nil {
		return e, r.err
	}
	switch {
	case shared > uint64(len(prev)) || rest > uint64(len(r.b)):
		return e, fmt.Errorf("%w: bad path", ErrDecode)
	case shared+rest > MaxPath:
		return e, fmt.Errorf("%w: a path of %d bytes, longer than PATH_MAX (%d)", ErrDecode, shared+rest, MaxPath)
	case *total+int(shared+rest) > MaxPathBytes:
		return e, fmt.Errorf("%w: paths of more than %d bytes in one batch", ErrDecode, MaxPathBytes)
	}
	*total += int(shared + rest)
	suffix := r.bytes(int(rest))
	e.Path = make([]byte, 0, shared+rest)
	e.Path = append(append(e.Path, prev[:shared]...), suffix...)
	if len(e.Path) == 0 || e.Path[0] != '/' || bytes.IndexByte(e.Path, 0) >= 0 {
		return e, fmt.Errorf("%w: path %q", ErrDecode, e.Path)
	}
	e.Backend = key.Backend(r.byte())
	if r.err != nil || e.Tombstone() {
		return e, r.err
	}
	if !e.Backend.Valid() || e.Backend.Base() != e.Backend {
		return e, fmt.Errorf("%w: backend %d", ErrDecode, e.Backend)
	}
	e.Digest = bytes.Clone(r.bytes(e.Backend.DigestLen()))
	size := r.uvarint()
	if size > 1<<62 {
		r.fail("size")
	}
	e.Size = int64(size)
	return e, r.err
}

// UUIDString formats a host id as a UUID: 8-4-4-4-12 hex digits.
func UUIDString(id [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
}
