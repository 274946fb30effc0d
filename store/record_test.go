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

// A record is racily clean only while a write could still hide behind its
// identity: its ctime within a tick of its hashing or later, whatever the
// mtime (user space sets it: in the future, or back after a copy).
func TestRacilyClean(t *testing.T) {
	const hashed, gran = int64(1_000_000_000_000), int64(10_000_000) // 10 ms ticks
	for _, c := range []struct {
		name         string
		mtime, ctime int64
		want         bool
	}{
		{"both old", hashed - 5*gran, hashed - 5*gran, false},
		{"both within the tick", hashed - gran/2, hashed - gran/2, true},
		{"both at the hashing's start", hashed, hashed, true},
		{"at the tick's edge", hashed - gran, hashed - gran, true},
		{"just past the tick", hashed - gran - 1, hashed - gran - 1, false},
		{"old mtime, fresh ctime (cp -p, rsync -t, a chmod)", hashed - 5*gran, hashed, true},
		{"future mtime, old ctime (touch -d, a tar)", hashed + 5*365*24*3600*1e9, hashed - 5*gran, false},
		{"future mtime, fresh ctime", hashed + 5*365*24*3600*1e9, hashed - gran/2, true},
		{"ctime long after the hashing (a rename taken over as a move)", hashed - 5*gran, hashed + 5*gran, false},
		{"ctime after the hashing began (stated before it: taken over since)", hashed - 5*gran, hashed + 1, false},
		{"both after the hashing (the clock went back between the write and the hashing)", hashed + 5*gran, hashed + 5*gran, true},
		{"future mtime, ctime after the hashing (renamed since)", hashed + 5*365*24*3600*1e9, hashed + 5*gran, false},
		{"no ctime: by the mtime", hashed - gran/2, 0, true},
		{"no ctime, mtime in the future: by the mtime alone, racy", hashed + 5*365*24*3600*1e9, 0, true},
		{"no ctime, old mtime", hashed - 5*gran, 0, false},
	} {
		r := Record{MtimeNs: c.mtime, CtimeNs: c.ctime, HashedAt: hashed}
		if got := RacilyClean(&r, gran); got != c.want {
			t.Errorf("%s: RacilyClean = %v, want %v", c.name, got, c.want)
		}
	}
}
