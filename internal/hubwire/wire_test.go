package hubwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
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
	key := []byte("a host's secret")
	if other := (Batch{Kind: Log, First: 10, Last: 14}); b.MsgID(key) == other.MsgID(key) {
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
		if err != nil || len(again.Entries) != len(got.Entries) || again.MsgID(nil) != got.MsgID(nil) {
			t.Fatalf("re-encoding a decoded batch: %v", err)
		}
	})
}

// expanding is a batch of about n bytes whose entries each repeat the
// path before and add one byte: small on the wire, paths without bound
// once decoded.
func expanding(n int) []byte {
	var entries []byte
	count := 0
	for prev := 0; len(entries) < n; count++ {
		add := []byte("x")
		if count == 0 {
			add = []byte("/")
		}
		entries = binary.AppendUvarint(entries, uint64(prev))
		entries = binary.AppendUvarint(entries, uint64(len(add)))
		entries = append(append(entries, add...), byte(key.Unknown))
		prev += len(add)
	}
	out := append([]byte{batchV1, byte(SnapChunk)}, make([]byte, 32)...)
	for _, v := range []uint64{1, 1, 0, uint64(count)} {
		out = binary.AppendUvarint(out, v)
	}
	return append(out, entries...)
}

// TestExpandingBatchIsRefusedSmall: entries that reuse the path before
// are refused once the paths pass MaxPath, having allocated little: a
// 116 KB batch of them once took hundreds of megabytes.
func TestExpandingBatchIsRefusedSmall(t *testing.T) {
	for _, n := range []int{40 << 10, 116 << 10, 762 << 10} {
		data := expanding(n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Unmarshal(data)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrDecode) {
			t.Fatalf("%d bytes: %v, want ErrDecode", len(data), err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Fatalf("decoding %d bytes allocated %d MB before refusing them", len(data), alloc>>20)
		} else {
			t.Logf("%d bytes refused after %d KB allocated", len(data), alloc>>10)
		}
	}
}

func TestBatchBounds(t *testing.T) {
	d := bytes.Repeat([]byte{1}, 32)
	entry := func(path string) Entry { return Entry{Path: []byte(path), Backend: key.SHA256, Digest: d, Size: 1} }
	many := func(n, pathLen int) []Entry {
		var es []Entry
		for i := range n {
			p := fmt.Sprintf("/%d/", i)
			es = append(es, entry(p+strings.Repeat("y", pathLen-len(p))))
		}
		return es
	}
	for _, c := range []struct {
		name    string
		entries []Entry
		ok      bool
	}{
		{"a path of PATH_MAX", []Entry{entry("/" + strings.Repeat("x", MaxPath-1))}, true},
		{"a path longer than PATH_MAX", []Entry{entry("/" + strings.Repeat("x", MaxPath))}, false},
		{"a path with NUL", []Entry{entry("/a\x00b")}, false},
		{"MaxEntries entries", many(MaxEntries, 8), true},
		{"more than MaxEntries", many(MaxEntries+1, 8), false},
		{"paths of MaxPathBytes", many(MaxPathBytes/4096, 4096), true},
		{"paths beyond MaxPathBytes", many(MaxPathBytes/4096+1, 4096), false},
	} {
		b := Batch{Kind: SnapChunk, Epoch: 1, First: 1, Entries: c.entries}
		got, err := Unmarshal(b.Marshal())
		switch {
		case c.ok && (err != nil || len(got.Entries) != len(c.entries)):
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && !errors.Is(err, ErrDecode):
			t.Errorf("%s: %v, want ErrDecode", c.name, err)
		}
	}
}

// TestMsgIDNeedsTheSecret: the same batch has another id under another
// secret, so an id cannot be made from what a batch says.
func TestMsgIDNeedsTheSecret(t *testing.T) {
	b, again := sample(), sample()
	if b.MsgID([]byte("one")) != again.MsgID([]byte("one")) {
		t.Fatal("retries of a batch have different ids")
	}
	if b.MsgID([]byte("one")) == b.MsgID([]byte("two")) || b.MsgID(nil) == b.MsgID([]byte("one")) {
		t.Fatal("the id does not depend on the secret")
	}
}
