package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/annexd/annexd/key"
)

// State says what the index knows about a file's content. The values are
// written to disk: never renumber them, only append.
type State uint8

// The states of a record.
const (
	// StateOK: the digest is the content's digest as of HashedAt.
	StateOK State = iota
	// StateUnreadable: the file could not be read (permissions, I/O error).
	StateUnreadable
	// StateChanging: the file kept changing while it was hashed; it will be
	// retried. The digest, if any, is not the current content's.
	StateChanging
	// StateCorrupt: a re-hash found different content although size and
	// mtime did not change. The digest is the one recorded before.
	StateCorrupt
	// StatePending: the file is known but not hashed yet.
	StatePending
	// StateUntraced: a re-hash or an audit found different content with
	// only the ctime moved (a chmod, a link, or a write with the mtime set
	// back that no ledger saw). The digest is the one recorded before.
	// Schema 8.
	StateUntraced
	stateEnd
)

var stateNames = [stateEnd]string{"ok", "unreadable", "changing", "corrupt", "pending", "untraced"}

// Valid reports whether st is a known state.
func (st State) Valid() bool { return st < stateEnd }

// Flagged reports whether st keeps the last key known good for bytes it
// does not name: corrupt or untraced. The state says which finding it is.
func (st State) Flagged() bool { return st == StateCorrupt || st == StateUntraced }

// String returns the state's lower-case name.
func (st State) String() string {
	if !st.Valid() {
		return fmt.Sprintf("State(%d)", uint8(st))
	}
	return stateNames[st]
}

// Record is what the index stores for one path.
type Record struct {
	Backend    key.Backend // key.Unknown when there is no digest
	Digest     []byte      // Backend.DigestLen() bytes, or empty
	Size       int64
	MtimeNs    int64
	CtimeNs    int64
	Dev, Ino   uint64
	HashedAt   int64 // unix ns; 0 when never hashed
	VerifiedAt int64 // unix ns of the last re-hash that matched; 0 when never
	State      State
	Generation uint64 // scan generation that last saw the path
}

// HasDigest reports whether r carries a digest.
func (r *Record) HasDigest() bool { return r.Backend != key.Unknown && len(r.Digest) > 0 }

// Indexed reports whether r belongs in the digest index: only records whose
// digest describes the file's content count as duplicates.
func (r *Record) Indexed() bool { return r.State == StateOK && r.HasDigest() }

// Identity is what lstat tells of a file: the fields a record must match for
// its digest to describe the file.
type Identity struct {
	Dev, Ino         uint64
	Size             int64
	MtimeNs, CtimeNs int64
}

// Identity returns the file identity r was recorded with.
func (r *Record) Identity() Identity {
	return Identity{Dev: r.Dev, Ino: r.Ino, Size: r.Size, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs}
}

// SetIdentity gives r the file identity id.
func (r *Record) SetIdentity(id Identity) {
	r.Dev, r.Ino, r.Size, r.MtimeNs, r.CtimeNs = id.Dev, id.Ino, id.Size, id.MtimeNs, id.CtimeNs
}

// SameHash reports whether r and o were made by one hash of one file: the
// same identity and hash time. A conditional change compares with it.
func (r *Record) SameHash(o *Record) bool {
	return r.Identity() == o.Identity() && r.HashedAt == o.HashedAt && r.State == o.State
}

// Equal reports whether r and o are the same record.
func (r *Record) Equal(o *Record) bool {
	return r.Backend == o.Backend && bytes.Equal(r.Digest, o.Digest) && r.Size == o.Size &&
		r.MtimeNs == o.MtimeNs && r.CtimeNs == o.CtimeNs && r.Dev == o.Dev && r.Ino == o.Ino &&
		r.HashedAt == o.HashedAt && r.VerifiedAt == o.VerifiedAt && r.State == o.State &&
		r.Generation == o.Generation
}

// SameContent reports whether r and o say the same about a file: digest,
// identity, hash time and state. Generation and VerifiedAt may differ.
func (r *Record) SameContent(o *Record) bool {
	return r.Backend == o.Backend && bytes.Equal(r.Digest, o.Digest) && r.Size == o.Size &&
		r.MtimeNs == o.MtimeNs && r.CtimeNs == o.CtimeNs && r.Dev == o.Dev && r.Ino == o.Ino &&
		r.HashedAt == o.HashedAt && r.State == o.State
}

// Audited reports whether an audit re-reads r: it has a digest and its
// state is ok, flagged or unreadable (a finding an audit may revise).
func (r *Record) Audited() bool {
	if !r.HasDigest() {
		return false
	}
	return r.State == StateOK || r.State == StateUnreadable || r.State.Flagged()
}

// Checked is when r's content was last confirmed: VerifiedAt, or HashedAt
// for a record never verified.
func (r *Record) Checked() int64 {
	if r.VerifiedAt != 0 {
		return r.VerifiedAt
	}
	return r.HashedAt
}

// Validate checks r before it is written.
func (r *Record) Validate() error {
	switch {
	case !r.State.Valid():
		return fmt.Errorf("%w: unknown state %d", ErrRecord, r.State)
	case r.Size < 0:
		return fmt.Errorf("%w: negative size %d", ErrRecord, r.Size)
	case r.Backend == key.Unknown && len(r.Digest) != 0:
		return fmt.Errorf("%w: digest without backend", ErrRecord)
	case r.Backend != key.Unknown && !r.Backend.Valid():
		return fmt.Errorf("%w: unknown backend %d", ErrRecord, r.Backend)
	case r.Backend != key.Unknown && len(r.Digest) != r.Backend.DigestLen():
		return fmt.Errorf("%w: %s digest of %d bytes, want %d", ErrRecord, r.Backend, len(r.Digest), r.Backend.DigestLen())
	case r.State == StateOK && r.Backend == key.Unknown:
		return fmt.Errorf("%w: state ok without a digest", ErrRecord)
	}
	return nil
}

// recordV1 is the first on-disk record format:
//
//	version(1) backend(1) state|flags(1) digest(backend.DigestLen())
//	uvarint(size) varint(mtime) varint(ctime-mtime) uvarint(dev) uvarint(ino)
//	[varint(hashedAt-mtime)] [varint(verifiedAt-hashedAt)] uvarint(generation)
//
// The third byte holds the state in its low six bits; bit 6 says hashedAt
// follows, bit 7 that verifiedAt follows (they are omitted when zero).
// Timestamps are stored as deltas because they are usually close together.
const recordV1 = 1

const (
	flagHashed   = 1 << 6
	flagVerified = 1 << 7
	stateMask    = flagHashed - 1
)

// MaxRecordLen bounds an encoded record: 3 + 64 + 8 varints.
const MaxRecordLen = 3 + 64 + 8*binary.MaxVarintLen64

// stateEnd must leave the flag bits free.
var _ = [stateMask - int(stateEnd)]struct{}{}

// AppendRecord appends the encoding of r to b.
func AppendRecord(b []byte, r *Record) []byte {
	head := byte(r.State)
	if r.HashedAt != 0 {
		head |= flagHashed
	}
	if r.VerifiedAt != 0 {
		head |= flagVerified
	}
	b = append(b, recordV1, byte(r.Backend), head)
	b = append(b, r.Digest...)
	b = binary.AppendUvarint(b, uint64(r.Size))
	b = binary.AppendVarint(b, r.MtimeNs)
	b = binary.AppendVarint(b, r.CtimeNs-r.MtimeNs)
	b = binary.AppendUvarint(b, r.Dev)
	b = binary.AppendUvarint(b, r.Ino)
	if r.HashedAt != 0 {
		b = binary.AppendVarint(b, r.HashedAt-r.MtimeNs)
	}
	if r.VerifiedAt != 0 {
		b = binary.AppendVarint(b, r.VerifiedAt-r.HashedAt)
	}
	return binary.AppendUvarint(b, r.Generation)
}

// DecodeRecord decodes b into a Record whose Digest is a fresh copy, so the
// result outlives the transaction b came from.
func DecodeRecord(b []byte) (Record, error) {
	r, _, err := DecodeRecordIn(b, nil)
	return r, err
}

// DecodeRecordIn is DecodeRecord with the digest appended to digests, which
// it returns: records decoded together share one allocation.
func DecodeRecordIn(b, digests []byte) (Record, []byte, error) {
	var r Record
	if len(b) < 3 {
		return r, digests, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, len(b))
	}
	if b[0] != recordV1 {
		return r, digests, fmt.Errorf("%w: record version %d", ErrCorrupt, b[0])
	}
	r.Backend, r.State = key.Backend(b[1]), State(b[2]&stateMask)
	if r.Backend != key.Unknown && !r.Backend.Valid() {
		return r, digests, fmt.Errorf("%w: record backend %d", ErrCorrupt, b[1])
	}
	if !r.State.Valid() {
		return r, digests, fmt.Errorf("%w: record state %d", ErrCorrupt, b[2])
	}
	d := &Decoder{B: b[3:]}
	if n := r.Backend.DigestLen(); n > 0 {
		if len(d.B) < n {
			return r, digests, fmt.Errorf("%w: record digest truncated", ErrCorrupt)
		}
		at := len(digests)
		digests = append(digests, d.B[:n]...)
		r.Digest = digests[at:len(digests):len(digests)]
		d.B = d.B[n:]
	}
	size := d.Uvarint()
	r.MtimeNs = d.Varint()
	r.CtimeNs = r.MtimeNs + d.Varint()
	r.Dev = d.Uvarint()
	r.Ino = d.Uvarint()
	if b[2]&flagHashed != 0 {
		r.HashedAt = r.MtimeNs + d.Varint()
	}
	if b[2]&flagVerified != 0 {
		r.VerifiedAt = r.HashedAt + d.Varint()
	}
	r.Generation = d.Uvarint()
	if d.Err != nil {
		return r, digests, d.Err
	}
	if len(d.B) != 0 {
		return r, digests, fmt.Errorf("%w: %d trailing bytes in record", ErrCorrupt, len(d.B))
	}
	if size > 1<<62 {
		return r, digests, fmt.Errorf("%w: record size %d", ErrCorrupt, size)
	}
	r.Size = int64(size)
	if r.State == StateOK && r.Backend == key.Unknown {
		return r, digests, fmt.Errorf("%w: state ok without a digest", ErrCorrupt)
	}
	return r, digests, nil
}

// Decoder reads varints from B and keeps the first error in Err; after
// an error it reads zeros.
type Decoder struct {
	B   []byte
	Err error
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Err = fmt.Errorf("%w: bad varint in record", ErrCorrupt)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Err = fmt.Errorf("%w: bad varint in record", ErrCorrupt)
		return 0
	}
	d.B = d.B[n:]
	return v
}
