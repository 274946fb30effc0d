package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/annexd/annexd/key"
)

// The hand-written JSON of the wire stays only where it pays. Each
// benchmark below times one job of a hot path twice in one run: the
// package's own code (hand) and encoding/json doing the same job
// (encoding-json). Compare the pairs with benchstat or by eye:
//
//	go test -run '^$' -bench 'Wire' -benchmem -count 5 ./api/

func benchKey(b *testing.B) key.Key {
	k, err := key.Parse("SHA256E-s2456789--9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.jpg")
	if err != nil {
		b.Fatal(err)
	}
	return k
}

const benchPath = "/home/user/Pictures/2024/holiday/IMG_2041.jpg"

// BenchmarkWireLookupLine: a batch lookup's request line, read by the
// server for every path.
func BenchmarkWireLookupLine(b *testing.B) {
	line := AppendLookupLine(nil, []byte(benchPath))
	line = line[:len(line)-1]
	pair(b, func() error { _, err := DecodeLookupLine(line); return err },
		func() error { _, err := decodeLookupLineJSON(line); return err })
}

// BenchmarkWireLookupAnswer: a lookup's answer line, written by the server
// and read by annexctl for every path.
func BenchmarkWireLookupAnswer(b *testing.B) {
	r := LookupResult{Path: []byte(benchPath), State: StateCurrent, Key: benchKey(b), Size: 2456789}
	line := r.AppendJSON(nil)
	type plain struct {
		Path  string      `json:"path"`
		State LookupState `json:"state"`
		Key   string      `json:"key,omitempty"`
		Size  int64       `json:"size,omitempty"`
	}
	var buf []byte
	b.Run("encode", func(b *testing.B) {
		pair(b, func() error { buf = r.AppendJSON(buf[:0]); return nil },
			func() error {
				_, err := json.Marshal(plain{Path: string(r.Path), State: r.State, Key: r.Key.String(), Size: r.Size})
				return err
			})
	})
	b.Run("decode", func(b *testing.B) {
		pair(b, func() error { var got LookupResult; return got.UnmarshalJSON(line) },
			func() error {
				var w lookupWire
				if err := json.Unmarshal(line, &w); err != nil {
					return err
				}
				var got LookupResult
				return got.fromWire(w)
			})
	})
}

// BenchmarkWireDupGroup: one group of `annexctl dups` (three copies), read
// by annexctl; 10^6 files make about 90,000 of them.
func BenchmarkWireDupGroup(b *testing.B) {
	k := benchKey(b)
	g := DupGroup{Backend: k.Backend(), Digest: make([]byte, 32), Size: 2456789, Copies: 3, Duplicate: 2 * 2456789,
		Reclaimable: 2456789, Physical: 2, SurveyedAt: time.Unix(1e9, 5), Files: []Location{
			{Path: []byte(benchPath), Key: k, Size: 2456789},
			{Path: []byte("/home/user/Backup/Pictures/IMG_2041.jpg"), Key: k, Size: 2456789, SharesWith: []byte(benchPath)},
			{Path: []byte("/home/user/Desktop/IMG_2041.jpg"), Key: k, Size: 2456789},
		}}
	line := g.AppendJSON(nil)
	type plain struct { // dupWire without the hand-written Location decoder
		Backend     string         `json:"backend"`
		Digest      string         `json:"digest"`
		Size        int64          `json:"size"`
		Copies      int            `json:"copies"`
		Physical    int            `json:"physical"`
		Duplicate   int64          `json:"duplicate_bytes"`
		Reclaimable int64          `json:"reclaimable"`
		Unsurveyed  int            `json:"unsurveyed"`
		SurveyedAt  string         `json:"surveyed_at"`
		Cursor      string         `json:"cursor"`
		Files       []locationWire `json:"files"`
	}
	pair(b, func() error { var got DupGroup; return got.UnmarshalJSON(line) },
		func() error { var w plain; return json.Unmarshal(line, &w) })
}

// pair runs hand and std as the sub-benchmarks hand and encoding-json.
func pair(b *testing.B, hand, std func() error) {
	for _, c := range []struct {
		name string
		fn   func() error
	}{{"hand", hand}, {"encoding-json", std}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
