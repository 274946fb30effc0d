package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// verified_at goes out in RFC 3339 with nanoseconds, is left out when
// zero, and reads back by the fast path and by encoding/json alike.
func TestLookupVerifiedAt(t *testing.T) {
	at := time.Date(2026, 3, 1, 2, 3, 4, 567890123, time.UTC)
	r := LookupResult{Path: []byte("/a"), State: StateCurrent, Size: 1, VerifiedAt: at}
	b := r.AppendJSON(nil)
	if !bytes.Contains(b, []byte(`"verified_at":"2026-03-01T02:03:04.567890123Z"`)) {
		t.Fatalf("json %s", b)
	}
	var back LookupResult
	if err := back.UnmarshalJSON(b); err != nil || !back.VerifiedAt.Equal(at) {
		t.Errorf("read back %+v, %v", back, err)
	}
	spaced := bytes.ReplaceAll(b, []byte(`":`), []byte(`": `)) // not the server's form: encoding/json reads it
	if err := back.UnmarshalJSON(spaced); err != nil || !back.VerifiedAt.Equal(at) {
		t.Errorf("read back %+v, %v", back, err)
	}
	r.VerifiedAt = time.Time{}
	if b := r.AppendJSON(nil); bytes.Contains(b, []byte("verified_at")) {
		t.Errorf("zero time written: %s", b)
	}
}

// A problem's digests are hex, its time RFC 3339, and a path that is not
// UTF-8 travels in path_b64 as well.
func TestAuditProblemJSON(t *testing.T) {
	p := AuditProblem{Path: []byte("/r/caf\xe9"), State: "corrupt", Backend: "SHA256E", Recorded: []byte{0xab}, Observed: []byte{0xcd},
		Size: 5, Seen: time.Date(2026, 3, 1, 2, 3, 4, 0, time.UTC), Why: "w"}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"recorded":"ab"`, `"observed":"cd"`, `"seen":"2026-03-01T02:03:04Z"`, `"path_b64":"L3IvY2Fm6Q=="`, `"state":"corrupt"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json %s lacks %s", b, want)
		}
	}
	var back AuditProblem
	if err := json.Unmarshal(b, &back); err != nil || !bytes.Equal(back.Path, p.Path) || !bytes.Equal(back.Recorded, p.Recorded) {
		t.Errorf("read back %+v, %v", back, err)
	}
	p.Observed = nil
	if b, _ := json.Marshal(p); strings.Contains(string(b), "observed") {
		t.Errorf("no observed digest written as %s", b)
	}
}
