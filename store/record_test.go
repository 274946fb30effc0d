package store

import (
	"errors"
	"math"
	"testing"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

func TestRecordRoundTrip(t *testing.T) {
	cases := []Record{
		rec("a", 12345, 2049, 1234567),
		{State: StateUnreadable, Size: 0},
		{Backend: key.SHA512, Digest: make([]byte, 64), Size: math.MaxInt64 >> 2, MtimeNs: math.MinInt64,
			CtimeNs: math.MaxInt64, Dev: math.MaxUint64, Ino: math.MaxUint64, HashedAt: math.MinInt64,
			VerifiedAt: math.MaxInt64, State: StatePending, Generation: math.MaxUint64},
		{Backend: key.MD5E, Digest: make([]byte, 16), State: StateCorrupt},
	}
	for _, r := range cases {
		if err := r.Validate(); err != nil {
			t.Fatalf("validate %+v: %v", r, err)
		}
		b := codec.AppendRecord(nil, &r)
		got, err := codec.DecodeRecord(b)
		if err != nil || !got.Equal(&r) {
			t.Fatalf("round trip of %+v = %+v, %v", r, got, err)
		}
	}
}

// A typical record (SHA256, timestamps close together) stays small.
func TestRecordIsCompact(t *testing.T) {
	r := rec("a", 7903, 2049, 1234567)
	r.Generation = 3
	if n := len(codec.AppendRecord(nil, &r)); n > 64 {
		t.Fatalf("typical record takes %d bytes, want ≤ 64", n)
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	r := rec("a", 1, 1, 1)
	good := codec.AppendRecord(nil, &r)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{9}, good[1:]...),
		"backend":   append([]byte{1, 200}, good[2:]...),
		"state":     append([]byte{1, 1, 200}, good[3:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"short":     good[:10],
	} {
		if _, err := codec.DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecodeRecord: decoding never panics, and whatever decodes encodes
// back to bytes that decode to the same record.
func FuzzDecodeRecord(f *testing.F) {
	r := rec("seed", 42, 3, 4)
	f.Add(codec.AppendRecord(nil, &r))
	f.Add(codec.AppendRecord(nil, &Record{State: StateUnreadable}))
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{1, 1, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := codec.DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := codec.DecodeRecord(codec.AppendRecord(nil, &got))
		if err != nil || !again.Equal(&got) {
			t.Fatalf("re-encode of %+v = %+v, %v", got, again, err)
		}
	})
}
