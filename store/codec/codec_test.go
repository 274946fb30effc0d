package codec

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/annexd/annexd/key"
)

// golden is a record whose bytes were taken from the encoders before
// they moved into this package (schema 7).
func golden() Record {
	d := make([]byte, 32)
	for i := range d {
		d[i] = byte(i * 7)
	}
	return Record{Backend: key.SHA256E, Digest: d, Size: 123456, MtimeNs: 1700000000123456789,
		CtimeNs: 1700000000223456789, Dev: 0x10302, Ino: 987654321, HashedAt: 1700000100000000000,
		VerifiedAt: 1700000200000000000, State: StateOK, Generation: 42}
}

// Every encoding is on disk: each keeps the bytes the index was written
// with, and the golden record decodes back.
func TestEncodingsKeepTheirBytes(t *testing.T) {
	r := golden()
	r2 := Record{State: StatePending, Size: 5, MtimeNs: -3}
	r3 := golden()
	r3.State = StateUntraced // schema 8
	fk := FileKey(nil, 300, []byte("a.jpg"))
	dk := DigestKey(nil, r.Backend.Base(), r.Digest)
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"record", AppendRecord(nil, &r), "0101c000070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9c0c407aab4aed8c7bfce972f8084af5f828604b1d1f9d603d6ebd891e80580a0b787e9052a"},
		{"pending record", AppendRecord(nil, &r2), "010004050506000000"},
		{"untraced record", AppendRecord(nil, &r3), "0101c5" + "00070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9c0c407aab4aed8c7bfce972f8084af5f828604b1d1f9d603d6ebd891e80580a0b787e9052a"},
		{"ids", AppendID(AppendID(AppendID(nil, 0), 255), 1<<40+3), "0001ff06010000000003"},
		{"file key", fk, "02012c612e6a7067"},
		{"inode key", InodeKey(nil, 0x10302, 987654321), "03010302043ade68b1"},
		{"digest key", dk, "0200070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9"},
		{"dups key", DescKey(77777, dk), "fffffffffffed02e" + "0200070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9"},
		{"digest value", DigestValue(&r), "01828604b1d1f9d603"},
		{"verified key", VerifiedKey(nil, r.Checked(), fk), "17979d2cc717d000" + "02012c612e6a7067"},
		{"group", AppendUvarints(nil, 3, 2, 123456), "0302c0c407"},
	} {
		if got := hex.EncodeToString(c.got); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	b, _ := hex.DecodeString("0101c000070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9c0c407aab4aed8c7bfce972f8084af5f828604b1d1f9d603d6ebd891e80580a0b787e9052a")
	if got, err := DecodeRecord(b); err != nil || !got.Equal(&r) {
		t.Errorf("golden record decodes to %+v, %v", got, err)
	}
	if bt, dev, ino, err := DecodeDigestValue(DigestValue(&r)); err != nil || bt != r.Backend || dev != r.Dev || ino != r.Ino {
		t.Errorf("digest value decodes to %v %d %d, %v", bt, dev, ino, err)
	}
	if id, base, ok := SplitFileKey(fk); !ok || id != 300 || !bytes.Equal(base, []byte("a.jpg")) {
		t.Errorf("file key splits into %d %q %v", id, base, ok)
	}
}

// The names of the buckets and meta keys are on disk too: each keeps the
// name the index was written with, and the schema lists keep their order
// (Schema2Buckets is what a schema-1 copy counts).
func TestNamesKeepTheirBytes(t *testing.T) {
	join := func(names [][]byte) string { return string(bytes.Join(names, []byte(" "))) }
	for _, c := range []struct{ got, want string }{
		{join(Schema2Buckets), "meta user files dirs dirnames bydigest inodes groups dups"},
		{join(AllBuckets), "meta user files dirs dirnames bydigest inodes groups dups verified pending pendinodes surveys shelf"},
		{join([][]byte{MetaFormat, MetaSchema, MetaCreated, MetaCounters, MetaGeneration}), "format schema created counters generation"},
	} {
		if c.got != c.want {
			t.Errorf("names %q, want %q", c.got, c.want)
		}
	}
	if RunHeader != 8 {
		t.Errorf("RunHeader %d, want 8", RunHeader)
	}
}
