package audit

import (
	"testing"
	"time"
)

// The bucket's arithmetic on a made-up clock: a burst passes at once,
// then each read waits for its share; an idle stretch refills only the
// burst, so a pause is not made up by a rush afterwards.
func TestPacerReserve(t *testing.T) {
	const rate = 20 << 20
	p := newPacer(rate)
	start := p.last
	burst := int(p.burst)
	if burst != rate/10 {
		t.Fatalf("burst %d, want a tenth of the rate", burst)
	}
	if d := p.reserve(start, burst); d != 0 {
		t.Fatalf("the burst waited %v", d)
	}
	// Ten more reads of 1 MiB at the same instant: the i-th waits i/20 s.
	// (The burst, 2 MiB, is spent.)
	for i := 1; i <= 10; i++ {
		d := p.reserve(start, 1<<20)
		want := time.Duration(i) * time.Second / 20
		if d < want-time.Millisecond || d > want+time.Millisecond {
			t.Fatalf("read %d waits %v, want %v", i, d, want)
		}
	}
	// After the debt is paid and an hour passes, only the burst is there.
	later := start.Add(time.Hour)
	if d := p.reserve(later, burst); d != 0 {
		t.Fatalf("after an hour the burst waited %v", d)
	}
	if d := p.reserve(later, 1<<20); d < 45*time.Millisecond {
		t.Fatalf("after the burst a read waited only %v", d)
	}
	// Steady reads at the rate never wait long.
	now := later.Add(time.Second)
	p.tokens, p.last = 0, now
	for range 100 {
		now = now.Add(time.Second / 20)
		if d := p.reserve(now, 1<<20); d > time.Millisecond {
			t.Fatalf("a read at the rate waited %v", d)
		}
	}
	if newPacer(0) != nil || newPacer(-1) != nil {
		t.Fatal("no rate should give no pacer")
	}
	if err := (*pacer)(nil).wait(t.Context(), 1<<30); err != nil {
		t.Fatal(err)
	}
}
