package store

import (
	"encoding/binary"
	"fmt"

	"github.com/annexd/annexd/key"
)

// digestValue is r's value in the digest index (schema 5): its backend,
// then its device and inode numbers as uvarints. With the group's summary
// it is all a listing of duplicates needs, so Dups reads no records.
func digestValue(r *Record) []byte {
	b := make([]byte, 1, 1+2*binary.MaxVarintLen64)
	b[0] = byte(r.Backend)
	b = binary.AppendUvarint(b, r.Dev)
	return binary.AppendUvarint(b, r.Ino)
}

// decodeDigestValue reads a digest-index value written by digestValue.
func decodeDigestValue(v []byte) (b key.Backend, dev, ino uint64, err error) {
	if len(v) < 3 || !key.Backend(v[0]).Valid() {
		return 0, 0, 0, fmt.Errorf("%w: digest index value %x", ErrCorrupt, v)
	}
	d := &decoder{b: v[1:]}
	dev, ino = d.uvarint(), d.uvarint()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: trailing bytes in digest index value", ErrCorrupt)
	}
	return key.Backend(v[0]), dev, ino, d.err
}
