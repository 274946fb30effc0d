package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzPathRoundTrip: any path bytes survive the request line encoding and
// the answer encoding exactly.
func FuzzPathRoundTrip(f *testing.F) {
	for _, s := range []string{"/a", "/caf\xe9", "/\x00", "/\"\\\n\r\t", "/\u2028x", "/\xed\xa0\x80", "/\xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		line := AppendLookupLine(nil, p)
		if bytes.Count(line, []byte{'\n'}) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("request line %q is not one line", line)
		}
		got, err := DecodeLookupLine(line[:len(line)-1])
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("request: %q → %q, %v", p, got, err)
		}
		out := LookupResult{Path: p, State: StateCurrent}.AppendJSON(nil)
		if bytes.IndexByte(out, '\n') >= 0 {
			t.Fatalf("answer %q contains a newline", out)
		}
		var r LookupResult
		if err := r.UnmarshalJSON(out); err != nil || !bytes.Equal(r.Path, p) {
			t.Fatalf("answer: %q → %q, %v", p, r.Path, err)
		}
		var w lookupWire
		if err := json.Unmarshal(out, &w); err != nil {
			t.Fatalf("answer %q is not JSON: %v", out, err)
		}
		fw, ok := fastLookupWire(out)
		if !ok || *fw.Path != *w.Path || (fw.PathB64 == nil) != (w.PathB64 == nil) || fw.State != w.State {
			t.Fatalf("answer %q: fast %+v, encoding/json %+v", out, fw, w)
		}
	})
}

// FuzzDecodeLookupLine: arbitrary request lines never panic, and what
// decodes is what the line says.
func FuzzDecodeLookupLine(f *testing.F) {
	for _, s := range []string{`{"path":"/a"}`, `{"path_b64":"L2E="}`, `{"path":1}`, `{`, `null`, `{"path_b64":"*"}`, `[]`,
		`{ "path" : "/a\"b" }`, `{"PATH":"/x"}`, `{"path":"/a","path":"/b"}`, `{"path":"/\u00e9\ud800"}`,
		`{"path":null}`, `{"path":"/x"} x`, `{"path":"/x",}`, "{\"path\":\"/\xff\"}", `{"path":"/x","path_b64":"L3k="}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := DecodeLookupLine(line)
		if err == nil && p == nil {
			t.Fatalf("%q: nil path without error", line)
		}
		q, qerr := decodeLookupLineJSON(line)
		if (err == nil) != (qerr == nil) || !bytes.Equal(p, q) {
			t.Fatalf("%q: fast %q, %v; encoding/json %q, %v", line, p, err, q, qerr)
		}
	})
}

// FuzzDupGroupDecode: the fast group decoder agrees with encoding/json on
// any input it accepts, and never panics.
func FuzzDupGroupDecode(f *testing.F) {
	g := DupGroup{Digest: []byte{1, 2}, Size: 3, Duplicate: 3, Reclaimable: 2, Physical: 1, Unsurveyed: 1,
		SurveyedAt: time.Unix(1e9, 5), Copies: 2, Cursor: []byte("c"), Files: []Location{
			{Path: []byte("/a]}\"{["), Size: 3, State: "ok"}, {Path: []byte("/b\xff"), Size: 3, Stale: true, SharesWith: []byte("/a]}\"{[")},
			{Path: []byte("/c"), Size: 3, LinkOf: []byte("/b\xff")}}}
	f.Add(g.AppendJSON(nil))
	f.Add([]byte(`{"files":"","digest":"","x":""}`))
	f.Add([]byte(`{"files":[{"path":"/a"},{"path":"/b","size":1}],"size":1}`))
	f.Add([]byte(`{"files":[{"path":{"x":1}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fw, ok := fastDupWire(b)
		if !ok {
			return
		}
		var w dupWire
		if err := json.Unmarshal(b, &w); err != nil {
			return // the fast path may accept slightly more; the values are still its own
		}
		if fw.Size != w.Size || fw.Duplicate != w.Duplicate || fw.Reclaimable != w.Reclaimable || fw.Copies != w.Copies ||
			fw.Physical != w.Physical || fw.Unsurveyed != w.Unsurveyed || fw.SurveyedAt != w.SurveyedAt ||
			fw.Digest != w.Digest || fw.Cursor != w.Cursor || len(fw.Files) != len(w.Files) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", b, fw, w)
		}
		for i := range fw.Files {
			if !bytes.Equal(fw.Files[i].Path, w.Files[i].Path) || fw.Files[i].Size != w.Files[i].Size ||
				fw.Files[i].Stale != w.Files[i].Stale || !bytes.Equal(fw.Files[i].LinkOf, w.Files[i].LinkOf) ||
				!bytes.Equal(fw.Files[i].SharesWith, w.Files[i].SharesWith) {
				t.Fatalf("%q: file %d: fast %+v, encoding/json %+v", b, i, fw.Files[i], w.Files[i])
			}
		}
	})
}
