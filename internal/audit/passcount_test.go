package audit

import "testing"

// A finding about a path the pass counted already replaces the earlier
// one; a verification takes it back.
func TestPassCountsOnce(t *testing.T) {
	a := &Auditor{passes: passes{passCounts: map[Class]int64{}, skip: map[string]Class{}}}
	a.passCount("/a", Corrupt)
	a.passCount("/b", Corrupt)
	a.passCount("/a", Corrupt)
	a.passCount("/b", Unreadable)
	if a.passCounts[Corrupt] != 1 || a.passCounts[Unreadable] != 1 || len(a.skip) != 2 {
		t.Fatalf("counts %v, skip %v; want one corrupt, one unreadable", a.passCounts, a.skip)
	}
	a.passUncount("/a")
	a.passUncount("/nowhere")
	if _, ok := a.passCounts[Corrupt]; ok || a.skip["/b"] != Unreadable || len(a.skip) != 1 {
		t.Fatalf("after /a was verified: counts %v, skip %v", a.passCounts, a.skip)
	}
}
