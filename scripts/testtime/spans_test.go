package main

import (
	"slices"
	"testing"
	"time"
)

// Three packages: a from 0 to 10 s, b from 2 to 6 s, c from 4 to 12 s:
// one ran alone 2+2+2 s (0–2, 10–12 and none between), two at once
// 2+4 s (2–4, 6–10), three 2 s (4–6).
func TestSpansRunning(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := spans{started: map[string]time.Time{}}
	for _, e := range []event{
		{Time: at(0), Action: "start", Package: "a"},
		{Time: at(2), Action: "start", Package: "b"},
		{Time: at(4), Action: "start", Package: "c"},
		{Time: at(6), Action: "pass", Package: "b"},
		{Time: at(10), Action: "fail", Package: "a"},
		{Time: at(12), Action: "skip", Package: "c"},
		{Time: at(13), Action: "pass", Package: "never started"},
	} {
		s.take(e)
	}
	want := []time.Duration{4 * time.Second, 6 * time.Second, 2 * time.Second}
	if got := s.running(); !slices.Equal(got, want) {
		t.Errorf("running %v, want %v", got, want)
	}
	if got, want := s.profile(), "1 for 4s, 2 for 6s, 3 for 2s"; got != want {
		t.Errorf("profile %q, want %q", got, want)
	}
}

func TestParseCPU(t *testing.T) {
	c := parseCPU("cpu  5905518 771004 4676484 1996030 86082 10 97953 0 0 0", 2)
	if !c.ok || c.user != 6676522*time.Second/100 || c.system != 4774447*time.Second/100 {
		t.Errorf("parseCPU: %+v", c)
	}
	if parseCPU("intr 1 2 3", 2).ok || parseCPU("cpu 1 2 x 4 5 6 7", 2).ok {
		t.Error("parseCPU took a line that is not the cpu line")
	}
	d := c.since(parseCPU("cpu  5905418 771004 4676384 1996030 86082 10 97953 0 0 0", 2))
	if d.user != time.Second || d.system != time.Second {
		t.Errorf("since: %+v, want 1 s each", d)
	}
}
