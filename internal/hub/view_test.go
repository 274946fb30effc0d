package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testHosts are the hosts a test view knows.
var testHosts = map[string]bool{"a": true, "b": true, "c": true, "nas": true, "laptop": true}

func openTestView(t *testing.T) (*view, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	v, err := openView(filepath.Join(t.TempDir(), "view.db"), viewConfig{stale: time.Hour, now: c.now, known: testHosts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.close() })
	return v, c
}

func dig(content string) []byte {
	d := sha256.Sum256([]byte(content))
	return d[:]
}

func hexd(content string) string { return hex.EncodeToString(dig(content)) }

func put(path, content string) hubwire.Entry {
	return hubwire.Entry{Path: []byte(path), Backend: key.SHA256, Digest: dig(content), Size: int64(len(content))}
}

// resend applies a whole resend of files (path → content) from host name.
func resend(t *testing.T, v *view, name string, epoch, seq uint64, files map[string]string) {
	t.Helper()
	idx := [16]byte{byte(epoch)}
	apply := func(b hubwire.Batch) {
		b.IndexID, b.Epoch = idx, epoch
		if _, err := v.apply(name, &b); err != nil {
			t.Fatal(err)
		}
	}
	apply(hubwire.Batch{Kind: hubwire.SnapBegin})
	var es []hubwire.Entry
	for p, c := range files {
		es = append(es, put(p, c))
	}
	apply(hubwire.Batch{Kind: hubwire.SnapChunk, First: 1, Entries: es})
	apply(hubwire.Batch{Kind: hubwire.SnapEnd, First: 1, Last: seq})
	if st := v.state(name); !st.Complete || st.Seq != seq {
		t.Fatalf("after a resend: %+v", st)
	}
}

func logBatch(t *testing.T, v *view, name string, epoch, first uint64, es ...hubwire.Entry) string {
	t.Helper()
	b := hubwire.Batch{Kind: hubwire.Log, IndexID: [16]byte{byte(epoch)}, First: first, Last: first + uint64(len(es)), Entries: es}
	res, err := v.apply(name, &b)
	if err != nil {
		t.Fatal(err)
	}
	return res.note
}

func hostsOf(c hubwire.Content) []string {
	var out []string
	for _, h := range c.Holders {
		out = append(out, h.Host)
	}
	sort.Strings(out)
	return out
}

func TestViewLogRules(t *testing.T) {
	v, _ := openTestView(t)
	resend(t, v, "a", 1, 10, map[string]string{"/x": "X"})
	if note := logBatch(t, v, "a", 1, 12, put("/y", "Y")); note != "gap" || !v.state("a").Gap {
		t.Fatalf("a batch after a gap: %q %+v", note, v.state("a"))
	}
	if note := logBatch(t, v, "a", 1, 10, put("/y", "Y"), hubwire.Entry{Path: []byte("/x")}); note != "" {
		t.Fatalf("the batch filling the gap: %q", note)
	}
	if st := v.state("a"); st.Gap || st.Seq != 12 || st.Records != 1 {
		t.Fatalf("after it: %+v", st)
	}
	// A repeat, and a batch overlapping what the view has: only the new
	// change counts.
	if note := logBatch(t, v, "a", 1, 10, put("/y", "Y"), hubwire.Entry{Path: []byte("/x")}); note != "duplicate" {
		t.Fatalf("a repeated batch: %q", note)
	}
	logBatch(t, v, "a", 1, 11, hubwire.Entry{Path: []byte("/x")}, put("/z", "Z"))
	if st := v.state("a"); st.Seq != 13 || st.Records != 2 {
		t.Fatalf("after an overlapping batch: %+v", st)
	}
	if note := logBatch(t, v, "a", 2, 13, put("/w", "W")); note == "" {
		t.Fatal("a log of another index was applied")
	}
}

func TestViewResendReplaces(t *testing.T) {
	v, _ := openTestView(t)
	resend(t, v, "a", 1, 3, map[string]string{"/old": "O", "/kept": "K"})
	resend(t, v, "b", 1, 1, map[string]string{"/b/old": "O"})
	// A resend cut short leaves the old records answering.
	b := hubwire.Batch{Kind: hubwire.SnapBegin, IndexID: [16]byte{2}, Epoch: 2}
	v.apply("a", &b)
	b = hubwire.Batch{Kind: hubwire.SnapChunk, IndexID: [16]byte{2}, Epoch: 2, First: 1, Entries: []hubwire.Entry{put("/new", "N")}}
	v.apply("a", &b)
	if got := hostsOf(mustWhereis(t, v, "O")); len(got) != 2 {
		t.Fatalf("during a resend the old records answer: %v", got)
	}
	resend(t, v, "a", 3, 5, map[string]string{"/kept": "K", "/new": "N"})
	if got := hostsOf(mustWhereis(t, v, "O")); len(got) != 1 || got[0] != "b" {
		t.Fatalf("after the resend, O is on %v, want only b", got)
	}
	if st := v.state("a"); st.Records != 2 || st.Bytes != 2 {
		t.Fatalf("a after its resend: %+v", st)
	}
}

func mustWhereis(t *testing.T, v *view, content string) hubwire.Content {
	t.Helper()
	c, err := v.whereis("", hubwire.WhereisRequest{Backend: "SHA256", Digest: hexd(content)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestViewStaleHostsAreNotTrusted(t *testing.T) {
	v, clk := openTestView(t)
	resend(t, v, "nas", 1, 1, map[string]string{"/n/a": "A", "/n/b": "B"})
	resend(t, v, "laptop", 1, 1, map[string]string{"/l/a": "A"})
	copies := func(host string) []string {
		r, err := v.copies(hubwire.CopiesRequest{FewerThan: 2, Host: host})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range r.Items {
			out = append(out, it.Digest)
		}
		sort.Strings(out)
		return out
	}
	if got := copies("nas"); len(got) != 1 || got[0] != hexd("B") {
		t.Fatalf("fewer than 2 copies, all fresh: %v, want B", got)
	}
	clk.add(2 * time.Hour)
	v.heard("nas")
	c := mustWhereis(t, v, "A")
	if len(c.Holders) != 2 || c.Holders[0].Host != "nas" || c.Holders[0].Stale || !c.Holders[1].Stale {
		t.Fatalf("whereis A with the laptop silent for 2 h: %+v", c.Holders)
	}
	if got := copies("nas"); len(got) != 2 {
		t.Fatalf("with the laptop stale, A is on one fresh host: %v", got)
	}
	if got, _ := v.copies(hubwire.CopiesRequest{FewerThan: 2}); len(got.Items) != 2 {
		t.Fatalf("copies across all hosts: %+v", got.Items)
	}
	// Heard from again (flushed to disk): trusted again.
	v.heard("laptop")
	if err := v.flushSeen(); err != nil {
		t.Fatal(err)
	}
	if got := copies("nas"); len(got) != 1 {
		t.Fatalf("laptop back: %v", got)
	}
}

func TestViewDupsAndCopiesPages(t *testing.T) {
	v, _ := openTestView(t)
	files := map[string]string{}
	for i := range 50 {
		files["/d/f"+string(rune('a'+i%26))+string(rune('a'+i/26))] = string(make([]byte, i+1))
	}
	resend(t, v, "a", 1, 1, files)
	resend(t, v, "b", 1, 1, map[string]string{"/copy1": string(make([]byte, 5)), "/copy2": string(make([]byte, 9))})
	r, err := v.dups(hubwire.DupsRequest{})
	if err != nil || len(r.Items) != 2 || r.Items[0].Size != 9 || r.Items[1].Size != 5 {
		t.Fatalf("dups across hosts: %+v %v", r.Items, err)
	}
	// Pages of 7 under /d: every content of a, once, none of b's two.
	seen := map[string]bool{}
	var after []byte
	for {
		r, err := v.copies(hubwire.CopiesRequest{FewerThan: 2, Host: "a", Prefix: []byte("/d"), After: after, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range r.Items {
			if seen[it.Digest] {
				t.Fatalf("%s listed twice", it.Digest)
			}
			seen[it.Digest] = true
		}
		if r.Next == nil {
			break
		}
		after = r.Next
	}
	if len(seen) != 48 {
		t.Fatalf("copies under /d held by one host: %d, want 48", len(seen))
	}
	if r, _ := v.copies(hubwire.CopiesRequest{FewerThan: 2, Host: "a", Prefix: []byte("/e")}); len(r.Items) != 0 {
		t.Fatalf("under /e: %+v", r.Items)
	}
	if _, err := v.copies(hubwire.CopiesRequest{FewerThan: 2, Host: "nobody"}); err == nil {
		t.Fatal("copies of an unknown host answered")
	}
}

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/a/b", "/a/", true}, {"/x", "/", true}, {"/x", "", true}} {
		if got := under([]byte(c.path), []byte(c.dir)); got != c.want {
			t.Errorf("under(%q, %q) = %v", c.path, c.dir, got)
		}
	}
}

// TestViewCommonContentListsAFewPaths: content held by many paths (the
// empty file) lists MaxPaths of them and counts all.
func TestViewCommonContentListsAFewPaths(t *testing.T) {
	v, _ := openTestView(t)
	files := map[string]string{}
	for i := range 3 * hubwire.MaxPaths {
		files["/e/"+strings.Repeat("x", i+1)] = ""
	}
	resend(t, v, "a", 1, 1, files)
	c := mustWhereis(t, v, "")
	if len(c.Holders) != 1 || len(c.Holders[0].Paths) != hubwire.MaxPaths || c.Holders[0].Count != 3*hubwire.MaxPaths {
		t.Fatalf("whereis of the empty file: %d holders, %d paths listed, count %d", len(c.Holders), len(c.Holders[0].Paths), c.Holders[0].Count)
	}
}

// During a whole resend, a host's records from before it that the resend
// has not sent again may be gone: whereis marks them unconfirmed, and a
// holder with none confirmed counts as no copy, until the resend ends
// and removes what it did not send.
func TestViewResendMarksUnconfirmed(t *testing.T) {
	v, _ := openTestView(t)
	resend(t, v, "a", 1, 3, map[string]string{"/a": "A", "/b": "B", "/c": "C"})
	idx := [16]byte{2}
	for _, b := range []hubwire.Batch{
		{Kind: hubwire.SnapBegin, IndexID: idx, Epoch: 2},
		{Kind: hubwire.SnapChunk, IndexID: idx, Epoch: 2, First: 1, Entries: []hubwire.Entry{put("/a", "A"), put("/c", "C2")}},
	} {
		if _, err := v.apply("a", &b); err != nil {
			t.Fatal(err)
		}
	}
	holder := func(content string) (hubwire.Holder, bool) {
		c := mustWhereis(t, v, content)
		if len(c.Holders) == 0 {
			return hubwire.Holder{}, false
		}
		return c.Holders[0], true
	}
	if h, ok := holder("A"); !ok || h.Count != 1 || h.Unconfirmed != 0 {
		t.Errorf("A, sent again: %+v %v", h, ok)
	}
	if h, ok := holder("B"); !ok || h.Count != 1 || h.Unconfirmed != 1 || fresh([]hubwire.Holder{h}) != 0 {
		t.Errorf("B, not sent again yet: %+v %v; want 1 path, unconfirmed, no copy", h, ok)
	}
	if h, ok := holder("C2"); !ok || h.Unconfirmed != 0 {
		t.Errorf("C2, sent by the resend: %+v %v", h, ok)
	}
	r, err := v.copies(hubwire.CopiesRequest{FewerThan: 1})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, c := range r.Items {
		listed = append(listed, c.Digest)
	}
	if len(listed) != 1 || listed[0] != hexd("B") {
		t.Errorf("held in fewer than one copy during the resend: %v, want B's only", listed)
	}
	end := hubwire.Batch{Kind: hubwire.SnapEnd, IndexID: idx, Epoch: 2, First: 1, Last: 5}
	if _, err := v.apply("a", &end); err != nil {
		t.Fatal(err)
	}
	if _, ok := holder("B"); ok {
		t.Error("B still held after the resend ended without it")
	}
	if h, ok := holder("A"); !ok || h.Unconfirmed != 0 {
		t.Errorf("A after the resend: %+v %v", h, ok)
	}
}
