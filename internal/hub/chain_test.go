package hub

import (
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
)

// chainedBatch applies a log batch that carries chain at first.
func chainedBatch(t *testing.T, v *view, name string, epoch, first uint64, chain hubwire.Chain, es ...hubwire.Entry) string {
	t.Helper()
	b := hubwire.Batch{Kind: hubwire.Log, IndexID: [16]byte{byte(epoch)}, First: first, Last: first + uint64(len(es)),
		Entries: es, Chain: chain}
	res, err := v.apply(name, &b)
	if err != nil {
		t.Fatal(err)
	}
	return res.note
}

// chainOf is the chain through es after a resend's start.
func chainOf(start hubwire.Chain, es ...hubwire.Entry) hubwire.Chain {
	for i := range es {
		start = start.Next(&es[i])
	}
	return start
}

// The view keeps each host's chain: a resend starts it, each applied
// change extends it, and the state gives it. A batch whose chain does
// not lead to the view's (another history of the index under the same
// numbers) is not applied, not even the changes past the view's; one
// that does is, whether it starts at the view's change or before it.
func TestViewChecksTheChain(t *testing.T) {
	v, _ := openTestView(t)
	resend(t, v, "a", 1, 10, map[string]string{"/x": "X"})
	start := hubwire.ChainStart([16]byte{1}, 1, 10)
	if st := v.state("a"); st.Chain != start {
		t.Fatalf("after a resend the chain is %s, want %s", st.Chain, start)
	}
	mine := []hubwire.Entry{put("/y", "Y"), put("/z", "Z")}
	if note := chainedBatch(t, v, "a", 1, 10, start, mine...); note != "" {
		t.Fatalf("the host's own batch: %q", note)
	}
	if st := v.state("a"); st.Chain != chainOf(start, mine...) || st.Seq != 12 {
		t.Fatalf("after it: %+v, want chain %s", st, chainOf(start, mine...))
	}

	// A copy numbered its own changes 11-13: the first two are not the
	// host's, so its change 13 is not applied either.
	theirs := []hubwire.Entry{put("/q", "Q"), hubwire.Entry{Path: []byte("/x")}, put("/r", "R")}
	if note := chainedBatch(t, v, "a", 1, 10, start, theirs...); note != NoteForeign {
		t.Fatalf("a batch of another history: %q", note)
	}
	if st := v.state("a"); st.Seq != 12 || st.Records != 3 || st.Chain != chainOf(start, mine...) {
		t.Fatalf("after another history's batch: %+v", st)
	}
	if len(mustWhereis(t, v, "R").Holders) != 0 || len(mustWhereis(t, v, "X").Holders) != 1 {
		t.Fatal("another history's changes were applied")
	}

	// The host's own batch from before the view's change applies its new
	// change only.
	more := append(mine[1:], put("/w", "W"))
	if note := chainedBatch(t, v, "a", 1, 11, chainOf(start, mine[0]), more...); note != "" {
		t.Fatalf("an overlapping batch of the host: %q", note)
	}
	if st := v.state("a"); st.Seq != 13 || st.Records != 4 || st.Chain != chainOf(start, append(mine, put("/w", "W"))...) {
		t.Fatalf("after it: %+v", st)
	}

	// A batch without a chain (an older publisher) is applied, and the
	// view's chain follows it.
	before := v.state("a").Chain
	logBatch(t, v, "a", 1, 13, put("/v", "V"))
	if st := v.state("a"); st.Seq != 14 || st.Chain != chainOf(before, put("/v", "V")) {
		t.Fatalf("after a batch without a chain: %+v", st)
	}
}

// A host the view completed before it kept chains has none: the first
// chained batch gives it the chain at the view's change, computed from
// the batch's own, and the next one is checked against it.
func TestViewTakesTheFirstChain(t *testing.T) {
	v, _ := openTestView(t)
	resend(t, v, "a", 1, 10, map[string]string{"/x": "X"})
	if err := v.update(func(_ *bolt.Tx, get func(string) (*hostRec, error)) error {
		h, err := get("a")
		h.Chain = hubwire.Chain{}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if st := v.state("a"); !st.Chain.IsZero() {
		t.Fatalf("a host completed before chains: %+v", st)
	}
	from := hubwire.ChainStart([16]byte{1}, 0, 9)
	es := []hubwire.Entry{put("/y", "Y"), put("/z", "Z")}
	if note := chainedBatch(t, v, "a", 1, 9, from, es...); note != "" {
		t.Fatalf("the first chained batch: %q", note)
	}
	if st := v.state("a"); st.Seq != 11 || st.Chain != chainOf(from, es...) {
		t.Fatalf("after it: %+v, want chain %s", st, chainOf(from, es...))
	}
	if note := chainedBatch(t, v, "a", 1, 11, from, put("/w", "W")); note != NoteForeign {
		t.Fatalf("a batch with another chain after the first: %q", note)
	}
}

// While a resend of another index is under way, a log of the index it
// replaces is not applied: a host resends another index only once it
// left this one, so the log is another machine's (a twin's), and its
// changes would retag the resend's records for the sweep to remove.
func TestViewSkipsALogOfTheIndexAResendReplaces(t *testing.T) {
	v, _ := openTestView(t)
	resend(t, v, "a", 1, 10, map[string]string{"/s": "S", "/t": "T"})
	start := hubwire.ChainStart([16]byte{1}, 1, 10)
	apply := func(b hubwire.Batch) {
		if _, err := v.apply("a", &b); err != nil {
			t.Fatal(err)
		}
	}
	idx2 := [16]byte{2}
	apply(hubwire.Batch{Kind: hubwire.SnapBegin, IndexID: idx2, Epoch: 2})
	apply(hubwire.Batch{Kind: hubwire.SnapChunk, IndexID: idx2, Epoch: 2, First: 1,
		Entries: []hubwire.Entry{put("/s", "S"), put("/t", "T"), put("/b", "B")}})
	es := []hubwire.Entry{put("/s", "S by A"), {Path: []byte("/t")}}
	if note := chainedBatch(t, v, "a", 1, 10, start, es...); note == "" {
		t.Fatal("a log of the replaced index was applied during the resend")
	}
	apply(hubwire.Batch{Kind: hubwire.SnapEnd, IndexID: idx2, Epoch: 2, First: 1, Last: 5})
	if st := v.state("a"); st.Records != 3 || st.IndexID != "02000000000000000000000000000000" {
		t.Fatalf("after the resend: %+v, want its 3 records", st)
	}
	for _, c := range []string{"S", "T", "B"} {
		if len(mustWhereis(t, v, c).Holders) != 1 {
			t.Errorf("%q of the resend is gone", c)
		}
	}
}
