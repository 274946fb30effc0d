package dedup

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// clock is a settable time for the tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// continuousSetup writes a group of three copies on kind and records them.
func continuousSetup(t *testing.T, kind loopfs.Kind) (*loopfs.FS, *store.Store, []byte) {
	t.Helper()
	fs := loopfs.New(t, kind, loopfs.Options{Size: loopfs.MinSize[kind]})
	st := openStore(t)
	data := content(30, 500_000)
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, fs.Path(n), data)
		record(t, st, fs.Path(n))
	}
	return fs, st, data
}

// TestContinuousQuiet: pairs wait until both files were left alone for
// Quiet, by their records and by the ledger; then they are done, once.
func TestContinuousQuiet(t *testing.T) {
	fs, st, data := continuousSetup(t, loopfs.XFS)
	ledger := &fakeLedger{}
	clk := &clock{t: time.Now()}
	c := New(st, Options{Ledger: ledger}).Continuous(ContinuousOptions{Quiet: 5 * time.Minute, Now: clk.now})
	ctx := context.Background()

	must(t, c.pass(ctx))
	if s := c.Stats(); s.Pending != 2 || s.Done != 0 {
		t.Fatalf("just written: pending %d, done %d; want 2 pending", s.Pending, s.Done)
	}
	later := time.Now().Add(time.Hour)
	clk.set(later)
	ledger.writeAt(fs.Path("b"), later.Add(-time.Minute))
	must(t, c.pass(ctx))
	if s := c.Stats(); s.Pending != 1 || s.Done != 1 {
		t.Fatalf("b written a minute ago by the ledger's account: pending %d, done %d; want b pending, c done", s.Pending, s.Done)
	}
	// The indexer hashes b again after that write.
	rb := record(t, st, fs.Path("b"))
	rb.HashedAt = later.Add(-time.Minute + time.Second).UnixNano()
	must(t, st.Put(ctx, []byte(fs.Path("b")), rb))
	clk.set(later.Add(10 * time.Minute))
	must(t, c.pass(ctx))
	s := c.Stats()
	if s.Pending != 0 || s.Done != 2 || s.Freed < 2*int64(len(data)) {
		t.Fatalf("all quiet: pending %d, done %d, freed %d; want 0, 2, %d", s.Pending, s.Done, s.Freed, 2*len(data))
	}
	for _, n := range []string{"a", "b", "c"} {
		assertContent(t, fs.Path(n), data)
	}
	// Later passes do not look at the pairs done again, nor count them
	// as skipped: they are remembered as shared.
	must(t, c.pass(ctx))
	must(t, c.pass(ctx))
	if s := c.Stats(); s.Done != 2 || len(s.Skipped) != 0 || s.Pending != 0 || s.Passes != 5 {
		t.Errorf("after two more passes: done %d, skipped %v, pending %d, passes %d; want 2, none, 0, 5", s.Done, s.Skipped, s.Pending, s.Passes)
	}
}

// TestContinuousUnsupported: on ext4 each pair is skipped once, and the
// file system is left alone from then on.
func TestContinuousUnsupported(t *testing.T) {
	_, st, _ := continuousSetup(t, loopfs.Ext4)
	clk := &clock{t: time.Now().Add(time.Hour)}
	c := New(st, Options{}).Continuous(ContinuousOptions{Now: clk.now})
	for range 3 {
		must(t, c.pass(context.Background()))
	}
	if s := c.Stats(); s.Done != 0 || s.Skipped[SkipUnsupported] != 2 || s.Pending != 0 {
		t.Errorf("done %d, skipped %v, pending %d; want the two pairs skipped once", s.Done, s.Skipped, s.Pending)
	}
}

// gate is busy until opened, and says on asked when it was asked.
type gate struct {
	mu    sync.Mutex
	open  bool
	asked chan bool
}

func (g *gate) Busy() (string, bool) {
	g.mu.Lock()
	busy := !g.open
	g.mu.Unlock()
	select {
	case g.asked <- busy:
	default:
	}
	if busy {
		return "load average 9.5", true
	}
	return "", false
}

func (g *gate) set(open bool) { g.mu.Lock(); defer g.mu.Unlock(); g.open = open }

// TestContinuousGates: Run waits while a gate says busy, says why in its
// stats, and goes on when the gate opens.
func TestContinuousGates(t *testing.T) {
	fs, st, _ := continuousSetup(t, loopfs.XFS)
	clk := &clock{t: time.Now().Add(time.Hour)}
	g := &gate{asked: make(chan bool, 1)}
	c := New(st, Options{}).Continuous(ContinuousOptions{Now: clk.now, Gates: []Gate{g}, GatePoll: time.Hour, Interval: time.Hour})
	passes := make(chan Stats, 10)
	c.passed = func(s Stats) { passes <- s }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()

	// A kick makes Run ask again; the second question comes after the
	// answer to the first was taken.
	if busy := <-g.asked; !busy {
		t.Fatal("the gate was asked and said not busy")
	}
	c.Kick()
	if busy := <-g.asked; !busy {
		t.Fatal("the gate was asked again and said not busy")
	}
	if s := c.Stats(); s.Paused != "load average 9.5" || s.Done != 0 || s.Pending != 2 {
		t.Errorf("while busy: paused %q, done %d, pending %d", s.Paused, s.Done, s.Pending)
	}
	g.set(true)
	c.Kick()
	s := <-passes
	if s.Paused != "" || s.Done != 2 || s.Pending != 0 {
		t.Errorf("after the gate opened: paused %q, done %d, pending %d; want 2 done", s.Paused, s.Done, s.Pending)
	}
	if !sharesAll(t, fs.Path("b"), fs.Path("a")) && !sharesAll(t, fs.Path("a"), fs.Path("b")) {
		t.Error("a and b share nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}

	reg := prometheus.NewPedanticRegistry()
	must(t, reg.Register(c.Collector()))
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"annexd_dedup_pairs_total 2", "annexd_dedup_pending 0", "annexd_dedup_paused 0", "annexd_dedup_freed_bytes_total 1"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, rec.Body.String())
		}
	}
}

func TestPaceDelay(t *testing.T) {
	for _, c := range []struct {
		size, rate int64
		took, want time.Duration
	}{
		{64 << 20, 64 << 20, 0, time.Second},
		{64 << 20, 64 << 20, 300 * time.Millisecond, 700 * time.Millisecond},
		{1 << 20, 64 << 20, time.Second, -984375 * time.Microsecond},
		{0, 1, 0, 0},
	} {
		if got := paceDelay(c.size, c.rate, c.took); got != c.want {
			t.Errorf("paceDelay(%d, %d, %v) = %v, want %v", c.size, c.rate, c.took, got, c.want)
		}
	}
}
