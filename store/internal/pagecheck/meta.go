package pagecheck

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"os"
)

// bbolt's meta page: the magic, the version and a checksum.
const (
	magic   = 0xED0CDAED
	version = 2
	metaSum = 56 // offset of the checksum within the meta page body
	// MetaLen is the bytes of a meta page that ReadMeta reads.
	MetaLen = pageHeader + metaSum + 8
)

// Meta is what a meta page says of the file.
type Meta struct {
	PageSize uint32
	Root     uint64 // the root bucket's page
	Freelist uint64 // NoFreelist when there is none
	PGID     uint64 // the high-water mark
	TxID     uint64
	Valid    bool // the version and checksum match
}

// ReadMeta decodes the meta page at the start of b. magic is false when b
// does not start with bbolt's magic number (not a bbolt file).
func ReadMeta(b []byte) (m Meta, isBolt bool) {
	le := binary.LittleEndian
	if len(b) < pageHeader+4 || le.Uint32(b[pageHeader:]) != magic {
		return m, false
	}
	if len(b) < MetaLen {
		return m, true
	}
	body := b[pageHeader:]
	h := fnv.New64a()
	h.Write(body[:metaSum])
	m.PageSize = le.Uint32(body[8:])
	m.Root, m.Freelist = le.Uint64(body[16:]), le.Uint64(body[32:])
	m.PGID = le.Uint64(body[40:])
	m.TxID = le.Uint64(body[48:])
	m.Valid = le.Uint32(body[4:]) == version && h.Sum64() == le.Uint64(body[metaSum:])
	return m, true
}

// ReadMetas returns the meta page bbolt uses and the page size, found as
// bbolt finds them: the size from the first valid meta page, page 0 or a
// page 1 at 1 KiB × 2^i; then the valid meta with the higher transaction.
func ReadMetas(f *os.File) (Meta, int, error) {
	read := func(off int64) Meta {
		b := make([]byte, MetaLen)
		if _, err := f.ReadAt(b, off); err != nil {
			return Meta{}
		}
		m, _ := ReadMeta(b)
		return m
	}
	ps := 0
	if m := read(0); m.Valid {
		ps = int(m.PageSize)
	}
	for i := 0; ps == 0 && i <= 14; i++ {
		if m := read(1024 << i); m.Valid {
			ps = int(m.PageSize)
		}
	}
	if ps < 512 || ps > 1<<24 {
		return Meta{}, 0, errors.New("no valid meta page")
	}
	var best Meta
	for _, m := range []Meta{read(0), read(int64(ps))} {
		if m.Valid && int(m.PageSize) == ps && (!best.Valid || m.TxID > best.TxID) {
			best = m
		}
	}
	if !best.Valid {
		return best, 0, errors.New("no valid meta page")
	}
	return best, ps, nil
}
