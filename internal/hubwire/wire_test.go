package hubwire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/annexd/annexd/key"
)

func sample() Batch {
	d := bytes.Repeat([]byte{0xab}, 32)
	return Batch{Kind: Log, HostID: [16]byte{1}, IndexID: [16]byte{2}, Epoch: 7, First: 10, Last: 13,
		Entries: []Entry{
			{Path: []byte("/home/u/a.jpg"), Backend: key.SHA256, Digest: d, Size: 123},
			{Path: []byte("/home/u/a\xff.jpg"), Backend: key.SHA256, Digest: d, Size: 1 << 40},
			{Path: []byte("/x")},
		}}
}

func TestBatchRoundTrip(t *testing.T) {
	b := sample()
	got, err := Unmarshal(b.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != b.Kind || got.HostID != b.HostID || got.IndexID != b.IndexID || got.Epoch != 7 || got.First != 10 || got.Last != 13 || len(got.Entries) != 3 {
		t.Fatalf("got %+v", got)
	}
	for i, e := range b.Entries {
		g := got.Entries[i]
		if !bytes.Equal(g.Path, e.Path) || g.Backend != e.Backend || !bytes.Equal(g.Digest, e.Digest) || g.Size != e.Size {
			t.Fatalf("entry %d: %+v, want %+v", i, g, e)
		}
	}
	if other := (Batch{Kind: Log, First: 10, Last: 14}); b.MsgID() == other.MsgID() {
		t.Fatal("two batches share a message id")
	}
}

func TestBatchRejects(t *testing.T) {
	good := sample()
	for name, data := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{9}, good.Marshal()[1:]...),
		"truncated": good.Marshal()[:40],
		"trailing":  append(good.Marshal(), 0),
		"count": func() []byte {
			b := sample()
			b.Last = 20
			return b.Marshal()
		}(),
		"relative path": func() []byte {
			b := sample()
			b.Entries[0].Path = []byte("rel")
			return b.Marshal()
		}(),
		"variant backend": func() []byte {
			b := sample()
			b.Entries[0].Backend = key.SHA256E
			return b.Marshal()
		}(),
	} {
		if _, err := Unmarshal(data); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want ErrDecode", name, err)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"nas", "laptop-2", "a_b"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", "ä"} {
		if err := CheckName(bad); !errors.Is(err, ErrName) {
			t.Errorf("%q: %v, want ErrName", bad, err)
		}
	}
}

func FuzzBatchUnmarshal(f *testing.F) {
	b := sample()
	f.Add(b.Marshal())
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Unmarshal(data)
		if err != nil {
			return
		}
		again, err := Unmarshal(got.Marshal())
		if err != nil || len(again.Entries) != len(got.Entries) || again.MsgID() != got.MsgID() {
			t.Fatalf("re-encoding a decoded batch: %v", err)
		}
	})
}
