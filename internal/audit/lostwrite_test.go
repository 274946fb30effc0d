package audit

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// A lost write the indexer found is filed like the audit's own findings:
// listed with both digests until accepted, counted once however often it
// is reported, and in the totals.
func TestLostWriteFromTheIndexer(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("doc.odt", "the bytes on disk")
	e.ix.Rescan(e.root)
	e.settle()
	p := e.path("doc.odt")
	now := e.record(p)
	was := now
	was.Digest = digestOf("the bytes in memory")
	for range 2 {
		e.a.Found(Report{Path: p, From: p, Class: LostWrite, Was: was, Now: now, Observed: now.Digest})
	}
	waitFor(t, "the lost write to be listed", func() bool {
		return e.a.Status().Problems == 1 && len(e.problems()) == 1
	})
	pr := e.problems()[p]
	if pr.Class != LostWrite || !bytes.Equal(pr.Recorded, was.Digest) || !bytes.Equal(pr.Observed, now.Digest) ||
		pr.ObservedKey != keyOf(t, p, []byte("the bytes on disk")) || pr.Why == "" || pr.Seen.IsZero() {
		t.Fatalf("problem %+v", pr)
	}
	waitFor(t, "both reports to be counted", func() bool { return e.a.Status().Totals["lost_write"] == 2 })
	if s := e.a.Status(); s.Problems != 1 {
		t.Fatalf("problems %d after the same report twice", s.Problems)
	}
	if _, err := e.a.Accept(context.Background(), []byte(p)); err != nil {
		t.Fatal(err)
	}
	if n := len(e.problems()); n != 0 || e.a.Status().Problems != 0 {
		t.Fatalf("%d problems listed, %d counted after accept", n, e.a.Status().Problems)
	}
	if r := e.record(p); !bytes.Equal(r.Digest, now.Digest) {
		t.Fatalf("accept changed the record: %+v", r)
	}
}

// A finding filed right after a status counted the coverage is counted by
// the next status, however long the last count took (a loaded machine
// makes a count stand for ten times what it took): the list and the
// count never disagree.
func TestStatusCountsAFindingAtOnce(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("doc.odt", "the bytes on disk")
	e.ix.Rescan(e.root)
	e.settle()
	if n := e.a.Status().Problems; n != 0 {
		t.Fatalf("%d problems before any finding", n)
	}
	e.a.mu.Lock()
	e.a.coverTook = time.Hour // the last count stands, as a slow one does
	e.a.mu.Unlock()
	p := e.path("doc.odt")
	now := e.record(p)
	was := now
	was.Digest = digestOf("the bytes in memory")
	e.a.Found(Report{Path: p, From: p, Class: LostWrite, Was: was, Now: now, Observed: now.Digest})
	waitFor(t, "the lost write to be listed", func() bool { return len(e.problems()) == 1 })
	if s := e.a.Status(); s.Problems != 1 {
		t.Fatalf("status counts %d problems while 1 is listed", s.Problems)
	}
}
