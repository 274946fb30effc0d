package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestGroupLinksRoundTrip: copies and the hard-link marks survive the
// wire, names that are not UTF-8 included, by both decoders.
func TestGroupLinksRoundTrip(t *testing.T) {
	g := DupGroup{Digest: []byte{0xab}, Size: 5, Wasted: 5, Copies: 2, Files: []Location{
		{Path: []byte("/r/a\xff"), Size: 5},
		{Path: []byte("/r/b"), Size: 5},
		{Path: []byte("/r/c"), Size: 5, LinkOf: []byte("/r/a\xff")},
	}}
	b := g.AppendJSON(nil)
	if !strings.Contains(string(b), `"copies":2`) || !strings.Contains(string(b), `"link_of_b64":"L3IvYf8="`) {
		t.Fatalf("encoded %s", b)
	}
	var fast, slow DupGroup
	if err := fast.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	var w dupWire // encoding/json, without the fast path
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	slow = DupGroup{Copies: w.Copies, Files: w.Files}
	for _, got := range []DupGroup{fast, slow} {
		if got.Copies != 2 || len(got.Files) != 3 || got.Files[0].LinkOf != nil ||
			!bytes.Equal(got.Files[2].LinkOf, []byte("/r/a\xff")) {
			t.Errorf("decoded %+v", got)
		}
	}
}
