package codec

import (
	"encoding/binary"
	"fmt"

	"github.com/annexd/annexd/key"
)

// DigestValue is r's value in the digest index (schema 5): its backend,
// then its device and inode numbers as uvarints. With the group's summary
// it is all a listing of duplicates needs, so Dups reads no records.
func DigestValue(r *Record) []byte {
	b := make([]byte, 1, 1+2*binary.MaxVarintLen64)
	b[0] = byte(r.Backend)
	b = binary.AppendUvarint(b, r.Dev)
	return binary.AppendUvarint(b, r.Ino)
}

// DecodeDigestValue reads a digest-index value written by DigestValue.
func DecodeDigestValue(v []byte) (b key.Backend, dev, ino uint64, err error) {
	if len(v) < 3 || !key.Backend(v[0]).Valid() {
		return 0, 0, 0, fmt.Errorf("%w: digest index value %x", ErrCorrupt, v)
	}
	d := &Decoder{B: v[1:]}
	dev, ino = d.Uvarint(), d.Uvarint()
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: trailing bytes in digest index value", ErrCorrupt)
	}
	return key.Backend(v[0]), dev, ino, d.Err
}
