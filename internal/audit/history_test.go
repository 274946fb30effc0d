package audit

import (
	"fmt"
	"testing"
)

// The passes completed are kept in the index, oldest first, with what
// each checked and found and the coverage when it ended, across a
// restart.
func TestHistory(t *testing.T) {
	e := newEnv(t, "", envOptions())
	for i, s := range []string{"some bytes", "other bytes", "a third file"} {
		e.write(fmt.Sprintf("f%d.txt", i), s)
	}
	e.ix.Rescan(e.root)
	e.settle()
	e.run(StartOptions{})
	e.rot(e.path("f1.txt"))
	e.run(StartOptions{})
	e.restart(envOptions())
	h, err := e.a.History()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].ID != 1 || h[1].ID != 2 {
		t.Fatalf("history %+v; want passes 1 and 2", h)
	}
	size := int64(len("some bytes") + len("other bytes") + len("a third file"))
	first, second := h[0], h[1]
	if first.Counts["ok"] != 3 || first.OKBytes != size || first.Problems() != 0 {
		t.Errorf("first pass %+v; want 3 files, %d bytes ok", first, size)
	}
	if second.Counts["ok"] != 2 || second.OKBytes != size-int64(len("other bytes")) || second.Problems() != 1 {
		t.Errorf("second pass %+v; want 2 ok and a corrupt file", second)
	}
	for _, p := range h {
		if p.Cover == nil || p.Cover.Total != 3 || p.Cover.Files != 3 || p.Cover.TotalBytes != size || p.Ended < p.Began {
			t.Errorf("pass %d: coverage %+v, began %d ended %d; want all 3 files checked within the schedule", p.ID, p.Cover, p.Began, p.Ended)
		}
	}
}

// The history keeps the last historyLen passes; a pass completed again
// (a crash before the state was saved) replaces its entry.
func TestHistoryBound(t *testing.T) {
	var h []PassSummary
	for id := uint64(1); id <= historyLen+5; id++ {
		h = withPass(h, &PassSummary{ID: id})
		h = withPass(h, &PassSummary{ID: id, Files: 7})
	}
	if len(h) != historyLen || h[0].ID != 6 || h[len(h)-1].ID != historyLen+5 || h[0].Files != 7 {
		t.Fatalf("%d passes from %+v to %+v; want %d, 6 to %d, each once", len(h), h[0], h[len(h)-1], historyLen, historyLen+5)
	}
	if got := withPass(nil, nil); len(got) != 0 {
		t.Errorf("no pass: %v", got)
	}
}
