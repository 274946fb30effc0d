package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestGroupLinksRoundTrip: copies, the physical figures and the marks of
// hard links and shared blocks survive the wire, names that are not UTF-8
// included, by both decoders.
func TestGroupLinksRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	g := DupGroup{Digest: []byte{0xab}, Size: 5, Duplicate: 10, Reclaimable: 4, Physical: 2, Unsurveyed: 1, SurveyedAt: at,
		Copies: 3, Files: []Location{
			{Path: []byte("/r/a\xff"), Size: 5},
			{Path: []byte("/r/b"), Size: 5, SharesWith: []byte("/r/a\xff")},
			{Path: []byte("/r/c"), Size: 5, LinkOf: []byte("/r/a\xff")},
			{Path: []byte("/r/d"), Size: 5},
		}}
	b := g.AppendJSON(nil)
	for _, want := range []string{`"copies":3`, `"link_of_b64":"L3IvYf8="`, `"shares_with_b64":"L3IvYf8="`, `"physical":2`,
		`"duplicate_bytes":10`, `"reclaimable":4`, `"wasted":4`, `"unsurveyed":1`, `"surveyed_at":"2026-01-02T03:04:05.000000006Z"`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("encoded %s, want %s in it", b, want)
		}
	}
	var fast, slow DupGroup
	if err := fast.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	var w dupWire // encoding/json, without the fast path
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	slow = DupGroup{Copies: w.Copies, Files: w.Files, Physical: w.Physical, Duplicate: w.Duplicate, Reclaimable: w.Reclaimable,
		Unsurveyed: w.Unsurveyed}
	slow.SurveyedAt, _ = time.Parse(time.RFC3339Nano, w.SurveyedAt)
	for _, got := range []DupGroup{fast, slow} {
		if got.Copies != 3 || len(got.Files) != 4 || got.Files[0].LinkOf != nil || got.Files[0].SharesWith != nil ||
			!bytes.Equal(got.Files[2].LinkOf, []byte("/r/a\xff")) || !bytes.Equal(got.Files[1].SharesWith, []byte("/r/a\xff")) ||
			got.Physical != 2 || got.Duplicate != 10 || got.Reclaimable != 4 || got.Unsurveyed != 1 || !got.SurveyedAt.Equal(at) {
			t.Errorf("decoded %+v", got)
		}
	}
}
