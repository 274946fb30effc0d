package hubwire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/annexd/annexd/key"
)

// Every part of a change, and of a resend's start, leads to another
// chain; a tombstone is not the empty file.
func TestChainTellsChangesApart(t *testing.T) {
	start := ChainStart([16]byte{1}, 7, 100)
	for name, other := range map[string]Chain{
		"index": ChainStart([16]byte{2}, 7, 100),
		"epoch": ChainStart([16]byte{1}, 8, 100),
		"seq":   ChainStart([16]byte{1}, 7, 101),
	} {
		if other == start {
			t.Errorf("another %s starts the same chain", name)
		}
	}
	d := make([]byte, 32)
	base := Entry{Path: []byte("/a"), Backend: key.SHA256, Digest: d, Size: 5}
	seen := map[Chain]string{start.Next(&base): "base"}
	d2 := make([]byte, 32)
	d2[31] = 1
	for name, e := range map[string]Entry{
		"path":      {Path: []byte("/b"), Backend: key.SHA256, Digest: d, Size: 5},
		"backend":   {Path: []byte("/a"), Backend: key.SHA1, Digest: d[:20], Size: 5},
		"digest":    {Path: []byte("/a"), Backend: key.SHA256, Digest: d2, Size: 5},
		"size":      {Path: []byte("/a"), Backend: key.SHA256, Digest: d, Size: 6},
		"tombstone": {Path: []byte("/a")},
		"empty":     {Path: []byte("/a"), Backend: key.SHA256, Digest: d, Size: 0},
	} {
		c := start.Next(&e)
		if was, ok := seen[c]; ok {
			t.Errorf("another %s gives the chain of %s", name, was)
		}
		seen[c] = name
	}
	again := base
	again.Path, again.Digest = []byte("/a"), make([]byte, 32)
	if start.Next(&again) != start.Next(&base) {
		t.Error("the chain is not a function of its inputs")
	}
}

// A state carries its chain in hex, and none when it has none.
func TestStateChainJSON(t *testing.T) {
	st := State{Name: "h", Seq: 3, Complete: true, Chain: ChainStart([16]byte{1}, 1, 3)}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"chain":"`+st.Chain.String()+`"`) {
		t.Fatalf("the chain is not in hex: %s", b)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil || back.Chain != st.Chain {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	b, _ = json.Marshal(State{Name: "h"})
	if strings.Contains(string(b), "chain") {
		t.Fatalf("a state without a chain names one: %s", b)
	}
	if err := json.Unmarshal([]byte(`{"name":"h","chain":"zz"}`), &back); err == nil {
		t.Fatal("a bad chain was taken")
	}
}
