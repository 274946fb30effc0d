package codec

import (
	"encoding/binary"
	"math/bits"

	"github.com/annexd/annexd/key"
)

// AppendID appends an id (a directory id, a device or an inode number) in
// an order-preserving form: one byte counting its significant bytes (0–8),
// then those bytes big-endian. Encoded ids compare as bytes as the numbers
// do, and none is a prefix of another, so keys that start with one sort by
// it and a prefix scan of one id never meets another.
func AppendID(b []byte, v uint64) []byte {
	n := (bits.Len64(v) + 7) / 8
	b = append(b, byte(n))
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

// ReadID decodes the id at the start of b and returns its length in
// bytes, or 0 when b does not start with a canonical encoded id.
func ReadID(b []byte) (uint64, int) {
	if len(b) == 0 || b[0] > 8 || len(b) < 1+int(b[0]) {
		return 0, 0
	}
	n := int(b[0])
	if n > 0 && b[1] == 0 {
		return 0, 0 // not minimal: would sort apart from its number
	}
	var v uint64
	for _, c := range b[1 : 1+n] {
		v = v<<8 | uint64(c)
	}
	return v, 1 + n
}

// IDKey is an id alone: the dirnames key and the dirs value.
func IDKey(id uint64) []byte { return AppendID(make([]byte, 0, 9), id) }

// ParseIDKey decodes an id that must fill b.
func ParseIDKey(b []byte) (uint64, bool) {
	id, n := ReadID(b)
	return id, n > 0 && n == len(b)
}

// FileKey is the files-bucket key: id(dirID) ‖ base.
func FileKey(buf []byte, id uint64, base []byte) []byte {
	return append(AppendID(buf[:0], id), base...)
}

// SplitFileKey returns the directory id and base name of a files key.
func SplitFileKey(fk []byte) (id uint64, base []byte, ok bool) {
	id, n := ReadID(fk)
	if n == 0 {
		return 0, nil, false
	}
	return id, fk[n:], true
}

// InodeKey is the inodes-bucket prefix id(dev) ‖ id(ino).
func InodeKey(buf []byte, dev, ino uint64) []byte {
	return AppendID(AppendID(buf[:0], dev), ino)
}

// DigestKey appends to buf[:0] what groups records by content: backend ‖
// digest. The store's bydigest and groups keys start with it (with the
// base backend); the hub's content keys too.
func DigestKey(buf []byte, b key.Backend, digest []byte) []byte {
	buf = append(buf[:0], byte(b))
	return append(buf, digest...)
}

// DescKey is be64(^n) ‖ dk: keys that list the largest n first. The
// store's dups bucket orders groups by duplicate bytes with it, the hub's
// xdups bucket content by size.
func DescKey(dup int64, dk []byte) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(dk)), ^uint64(dup))
	return append(b, dk...)
}

// VerifiedKey appends the verified-index key of the record fk with time t.
func VerifiedKey(buf []byte, t int64, fk []byte) []byte {
	buf = binary.BigEndian.AppendUint64(buf[:0], TimeKey(t))
	return append(buf, fk...)
}

// TimeKey orders unix nanoseconds; times before 1970 count as 0.
func TimeKey(t int64) uint64 {
	if t < 0 {
		return 0
	}
	return uint64(t)
}

// AppendUvarints appends each of vs as a uvarint.
func AppendUvarints(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}
