package calibrate

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/mbsha256"
)

// testBudget replaces the 1 s budget: under -race, on a machine shared with
// other work, calibration takes several seconds of wall time, and a cut-short
// calibration would test less. It is a cap: an idle machine takes about 4 s.
const testBudget = 30 * time.Second

func testOpts() Options { return Options{Budget: testBudget} }

// checkInvariants fails t for every rule a calibration result must keep.
func checkInvariants(t *testing.T, c Calibration) {
	t.Helper()
	p := c.Policy
	chosenInProcess, chosenBatch := 0, 0
	for _, x := range c.Candidates {
		if x.Chosen == (x.Rejected != "") {
			t.Errorf("%s: chosen=%v with rejection %q: want exactly one of them", x.Name, x.Chosen, x.Rejected)
		}
		if x.Chosen && !x.Verified {
			t.Errorf("%s chosen without passing the known answers", x.Name)
		}
		switch {
		case x.Kind == KindInProcess && x.Chosen:
			chosenInProcess++
			if string(p.SHA256) != x.Name {
				t.Errorf("policy sha256 %q, chosen candidate %q", p.SHA256, x.Name)
			}
		case x.Kind == KindExternal && x.Chosen:
			if p.External != x.Path || p.ExternalMin <= 0 {
				t.Errorf("external %s chosen but policy has external %q from %d", x.Path, p.External, p.ExternalMin)
			}
		case x.Kind == KindBatch && x.Chosen:
			chosenBatch++
			if "mbsha256 "+p.BatchKernel != x.Name {
				t.Errorf("batch kernel %q chosen but policy has %q", x.Name, p.BatchKernel)
			}
		}
	}
	if chosenBatch == 0 && p.BatchKernel != "" || chosenBatch > 1 {
		t.Errorf("%d batch kernels chosen, policy batch_kernel %q", chosenBatch, p.BatchKernel)
	}
	if chosenInProcess != 1 {
		t.Errorf("%d in-process implementations chosen, want 1", chosenInProcess)
	}
	if p.ExternalMin > 0 && p.ExternalMin <= p.InlineMax {
		t.Errorf("external_min %d not above inline_max %d", p.ExternalMin, p.InlineMax)
	}
	if p.ExternalMin == 0 && p.External != "" {
		t.Errorf("external %q set but external_min is never", p.External)
	}
	if p.InlineMax < 16<<10 || p.InlineMax > 8<<20 || p.InlineMax&(p.InlineMax-1) != 0 {
		t.Errorf("inline_max %d: want a power of two in [16 KiB, 8 MiB]", p.InlineMax)
	}
	if p.Workers != c.Fingerprint.NumCPU || p.Workers < 1 {
		t.Errorf("workers %d, CPUs %d", p.Workers, c.Fingerprint.NumCPU)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("chosen policy invalid: %v", err)
	}
	if len(c.Notes) == 0 {
		t.Error("no notes explain the policy")
	}
}

func TestCalibrate(t *testing.T) {
	c, err := Run(context.Background(), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + c.String())
	checkInvariants(t, c)

	for _, name := range []string{NameStd, "sha256sum", "openssl"} {
		x, ok := c.Candidate(name)
		if !ok {
			t.Errorf("candidate %s missing", name)
			continue
		}
		if x.Path == "" && x.Kind == KindExternal {
			t.Errorf("%s: no path", name)
		}
		if !strings.Contains(c.String(), name) {
			t.Errorf("table does not show %s", name)
		}
	}
	for _, k := range mbsha256.Kernels() {
		if x, ok := c.Candidate("mbsha256 " + k); k != mbsha256.Generic && (!ok || !x.Verified || x.MBps <= 0) {
			t.Errorf("multi-buffer kernel %s: %+v", k, x)
		}
	}
	// The in-process candidate passes here; it must have been measured.
	if x, _ := c.Candidate(NameStd); !x.Verified || x.MBps <= 0 {
		t.Errorf("%s: verified %v, %.0f MB/s", NameStd, x.Verified, x.MBps)
	}
	if c.HandoffUs < 0 || len(c.PerFile) != len(perFileSizes) || len(c.Buffers) == 0 {
		t.Errorf("missing figures: handoff %v, per file %v, buffers %v", c.HandoffUs, c.PerFile, c.Buffers)
	}
	if c.Fingerprint.GOARCH == "" || c.Fingerprint.GoVersion == "" || len(c.Fingerprint.Programs) != 2 {
		t.Errorf("fingerprint incomplete: %+v", c.Fingerprint)
	}

	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Calibration
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("JSON round trip differs:\n%+v\n%+v", back, c)
	}
	for _, field := range []string{`"policy"`, `"inline_max"`, `"external_min"`, `"candidates"`, `"fingerprint"`, `"handoff_us"`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("JSON lacks %s", field)
		}
	}
	if !back.StillValid() {
		t.Error("a fresh calibration is not StillValid")
	}
}

// writeScript puts an executable shell script called name in dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// An external program that prints a wrong digest, or anything but the
// expected format, is rejected and never used.
func TestCalibrateRejectsExternalFailingKnownAnswers(t *testing.T) {
	dir := t.TempDir()
	fake := writeScript(t, dir, "sha256sum", "cat >/dev/null\necho '0000000000000000000000000000000000000000000000000000000000000000  -'\n")
	garbled := writeScript(t, dir, "openssl", "cat >/dev/null\necho 'SHA2-256(stdin)= not-a-digest'\n")
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	c, err := Run(context.Background(), Options{Budget: testBudget})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, c)
	for name, path := range map[string]string{"sha256sum": fake, "openssl": garbled} {
		x, _ := c.Candidate(name)
		if x.Path != path || x.Verified || x.Chosen || !strings.Contains(x.Rejected, "known-answer") {
			t.Errorf("%s: %+v; want rejected for failing the known answers", name, x)
		}
	}
	if c.Policy.External != "" || c.Policy.ExternalMin != 0 {
		t.Errorf("policy uses a broken external program: %+v", c.Policy)
	}
}

// derive on made-up figures: an external program much faster than
// in-process hashing wins from where its overhead is paid back.
func TestDeriveExternalWins(t *testing.T) {
	c := Calibration{
		Fingerprint: Fingerprint{NumCPU: 4},
		Candidates: []Candidate{
			{Name: NameStd, Kind: KindInProcess, Verified: true, MBps: 1000, Chosen: true},
			{Name: "fast", Kind: KindExternal, Path: "/x/openssl", Verified: true, MBps: 5000, OverheadUs: 1000},
			{Name: "slow", Kind: KindExternal, Path: "/x/sha256sum", Verified: true, MBps: 300, OverheadUs: 700},
		},
		Buffers:   []BufferCost{{256 << 10, 990}, {1 << 20, 1000}},
		PerFile:   []FileCost{{Size: 1024, InlineUs: 5, PoolUs: 8}},
		HandoffUs: 3,
	}
	derive(&c, hasher.SHA256Std)
	checkInvariants(t, c)
	p := c.Policy
	// (1000 − 5) µs / (1/1000 − 1/5000) µs per byte ≈ 1.24 MB → 2 MiB.
	if p.ExternalMin != 2<<20 || p.External != "/x/openssl" {
		t.Errorf("external from %d with %q, want 2 MiB with /x/openssl", p.ExternalMin, p.External)
	}
	if p.BufferSize != 256<<10 {
		t.Errorf("buffer %d: want the smaller size within 10 %% of the fastest", p.BufferSize)
	}
	// 3 µs / 5 % × 990 MB/s = 59,400 bytes: within 8× of the default.
	if p.InlineMax != hasher.DefaultInlineMax {
		t.Errorf("inline_max %d, want the default %d", p.InlineMax, hasher.DefaultInlineMax)
	}
	if slow, _ := c.Candidate("slow"); !strings.Contains(slow.Rejected, "never wins") {
		t.Errorf("slow external: %q", slow.Rejected)
	}
}

// derive picks the fastest multi-buffer kernel only when it beats
// single-stream hashing by batchWin, and a kernel with more lanes only when
// it is kernelWin faster than one with fewer.
func TestDeriveBatchKernel(t *testing.T) {
	type kern struct {
		name  string
		lanes int
	}
	var kernels []kern // fewest lanes first
	for _, k := range mbsha256.Kernels() {
		if k == mbsha256.Generic {
			continue
		}
		e, err := mbsha256.NewKernel(k)
		if err != nil {
			t.Fatal(err)
		}
		kernels = append(kernels, kern{k, e.Lanes()})
	}
	slices.SortStableFunc(kernels, func(a, b kern) int { return cmp.Compare(a.lanes, b.lanes) })
	if len(kernels) == 0 {
		t.Skip("this CPU runs no multi-buffer kernel (only the generic one)")
	}
	type batchCase struct {
		mbps []float64 // per kernel, fewest lanes first
		want string
	}
	cases := []batchCase{
		{mbps: []float64{2600, 1500, 1100}, want: kernels[0].name},
		{mbps: []float64{1200, 1100, 1000}, want: ""}, // 1.2× < 1.25×
	}
	if len(kernels) >= 2 {
		// A wider kernel must be kernelWin faster to win: the figures of
		// calibrations on the AMD EPYC machine (shanix2, avx512x16), one
		// under the shared overload.
		cases = append(cases,
			batchCase{mbps: []float64{3221, 3253, 1786}, want: kernels[0].name},
			batchCase{mbps: []float64{3221, 3431, 1786}, want: kernels[0].name},
			batchCase{mbps: []float64{2900, 3300, 1786}, want: kernels[0].name},
			batchCase{mbps: []float64{2000, 3000, 1786}, want: kernels[1].name})
	}
	for _, tc := range cases {
		c := Calibration{
			Fingerprint: Fingerprint{NumCPU: 2},
			Candidates:  []Candidate{{Name: NameStd, Kind: KindInProcess, Verified: true, MBps: 1000, Chosen: true}},
			Buffers:     []BufferCost{{1 << 20, 900}},
			PerFile:     []FileCost{{Size: 1024, InlineUs: 5, PoolUs: 8}},
		}
		// Listed widest first, as mbsha256 may list them: the choice must
		// not depend on the order.
		for i := len(kernels) - 1; i >= 0; i-- {
			k := kernels[i]
			c.Candidates = append(c.Candidates, Candidate{Name: "mbsha256 " + k.name, Kind: KindBatch, Verified: true, MBps: tc.mbps[i], Lanes: k.lanes})
		}
		derive(&c, hasher.SHA256Std)
		checkInvariants(t, c)
		if c.Policy.BatchKernel != tc.want {
			t.Errorf("kernels %v at %v MB/s vs 1000: chose %q, want %q", kernels, tc.mbps[:len(kernels)], c.Policy.BatchKernel, tc.want)
		}
	}
}

// epycFigures is a calibration with the benchmark machine's figures:
// crypto/sha256 1,818 MB/s in memory and 1,528 from a file, openssl at
// extMBps with 4.6 ms a run, and the batch candidates given.
func epycFigures(extMBps float64, batch ...Candidate) Calibration {
	cands := []Candidate{{Name: NameStd, Kind: KindInProcess, Verified: true, MBps: 1818, Chosen: true}}
	cands = append(cands, batch...)
	cands = append(cands, Candidate{Name: "openssl", Kind: KindExternal, Path: "/x/openssl", Verified: true, MBps: extMBps, OverheadUs: 4638})
	return Calibration{
		Fingerprint: Fingerprint{NumCPU: 2},
		Candidates:  cands,
		Buffers:     []BufferCost{{256 << 10, 1528}},
		PerFile:     []FileCost{{Size: 1024, InlineUs: 9, PoolUs: 17}},
	}
}

// With a batch kernel chosen, an external program that beats single-stream
// hashing but not the lanes is rejected: the figures of the benchmark
// machine, where openssl's 1,692 MB/s once won from 64 MiB and cost a
// first scan CPU time. One much faster than the lanes still wins, and
// without lanes the same openssl wins, as before.
func TestDeriveExternalMustBeatTheLanes(t *testing.T) {
	c := epycFigures(1692)
	derive(&c, hasher.SHA256Std)
	checkInvariants(t, c)
	if c.Policy.ExternalMin == 0 {
		t.Errorf("without lanes openssl at 1692 MB/s against 1528 should win; notes %q", c.Notes)
	}
	t.Run("lanes", func(t *testing.T) {
		var kernel string
		for _, k := range mbsha256.Kernels() {
			if k != mbsha256.Generic {
				kernel = k
				break
			}
		}
		if kernel == "" {
			// The policy must name a kernel this machine runs.
			t.Skip("this CPU runs no multi-buffer kernel (only the generic one)")
		}
		for _, tc := range []struct {
			extMBps float64
			wins    bool
		}{{1692, false}, {9000, true}} {
			c := epycFigures(tc.extMBps, Candidate{Name: "mbsha256 " + kernel, Kind: KindBatch, Verified: true, MBps: 3221})
			derive(&c, hasher.SHA256Std)
			checkInvariants(t, c)
			if got := c.Policy.ExternalMin != 0; got != tc.wins {
				t.Errorf("openssl at %.0f MB/s against the lanes' %.0f from a file: external_min %d, want a win %v; notes %q",
					tc.extMBps, batchFromFile(3221, 1818, 1528), c.Policy.ExternalMin, tc.wins, c.Notes)
			}
			if c.Policy.BatchKernel != kernel {
				t.Errorf("batch kernel %q, want %q", c.Policy.BatchKernel, kernel)
			}
		}
	})
}

func TestDeriveExternalNeverWins(t *testing.T) {
	c := Calibration{
		Fingerprint: Fingerprint{NumCPU: 2},
		Candidates: []Candidate{
			{Name: NameStd, Kind: KindInProcess, Verified: true, MBps: 1300, Chosen: true},
			{Name: "openssl", Kind: KindExternal, Path: "/x/openssl", Verified: true, MBps: 1200, OverheadUs: 3000},
		},
		Buffers: []BufferCost{{1 << 20, 1250}},
		PerFile: []FileCost{{Size: 1024, InlineUs: 5, PoolUs: 8}},
	}
	derive(&c, hasher.SHA256Std)
	checkInvariants(t, c)
	if c.Policy.ExternalMin != 0 || !strings.Contains(strings.Join(c.Notes, "\n"), "external_min = never") {
		t.Errorf("policy %+v, notes %q", c.Policy, c.Notes)
	}
}

func TestStillValidNoticesChanges(t *testing.T) {
	dir := t.TempDir()
	prog := writeScript(t, dir, "sha256sum", "exit 0\n")
	fresh := func() Calibration {
		return Calibration{Format: calibrationFormat, Complete: true, Fingerprint: currentFingerprint(context.Background(), []string{prog}, false)}
	}
	if !fresh().StillValid() {
		t.Fatal("fresh fingerprint does not match itself")
	}
	old := fresh()
	old.Complete = false
	if old.StillValid() {
		t.Error("calibration cut short still valid")
	}
	old = fresh()
	old.Format--
	if old.StillValid() {
		t.Error("older calibration format still valid")
	}
	old = fresh()
	old.Fingerprint.GoVersion = "go1.0"
	if old.StillValid() {
		t.Error("other Go version still valid")
	}
	old = fresh()
	old.Fingerprint.CPUModel += " (other)"
	if old.StillValid() {
		t.Error("other CPU still valid")
	}
	old = fresh()
	old.Fingerprint.Kernels = append(old.Fingerprint.Kernels, "avx512x16-gone")
	if old.StillValid() {
		t.Error("calibration from a process that ran another kernel set still valid (GODEBUG=cpu.avx512f=off)")
	}
	old = fresh()
	old.Policy.BatchKernel = "nosuch"
	if old.StillValid() {
		t.Error("calibration whose policy names a kernel this machine lacks still valid")
	}
	old = fresh()
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(prog, later, later); err != nil {
		t.Fatal(err)
	}
	if old.StillValid() {
		t.Error("replaced external program still valid")
	}
}

// An external program cut short by the time budget is reported as not
// measured, not as failing the known answers.
func TestMeasureExternalOutOfTime(t *testing.T) {
	dir := t.TempDir()
	slow := writeScript(t, dir, "sha256sum", "exec sleep 10\n")
	s, err := writeSamples(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c := measureExternal(ctx, "sha256sum", slow, s)
	if c.Rejected != errOverBudget.Error() || c.Chosen || strings.Contains(c.Rejected, "known-answer") {
		t.Fatalf("slow program cut short: %+v; want rejected as not measured", c)
	}
	if verified(c) == "FAIL" {
		t.Errorf("table says the program failed the known answers")
	}
}

// derive without the file measurements (the budget ran out) keeps the
// defaults and says so instead of quoting figures of 0.
func TestDeriveUnmeasured(t *testing.T) {
	c := Calibration{
		Fingerprint: Fingerprint{NumCPU: 2},
		Candidates: []Candidate{
			{Name: NameStd, Kind: KindInProcess, Verified: true, MBps: 1300, Chosen: true},
			{Name: "openssl", Kind: KindExternal, Path: "/x/openssl", Verified: true, MBps: 5000, OverheadUs: 1000},
		},
	}
	derive(&c, hasher.SHA256Std)
	checkInvariants(t, c)
	if c.Policy.InlineMax != hasher.DefaultInlineMax || c.Policy.ExternalMin != 0 {
		t.Errorf("policy %+v: want the default inline_max and no external program", c.Policy)
	}
	if x, _ := c.Candidate("openssl"); !strings.Contains(x.Rejected, "not measured") {
		t.Errorf("openssl: %q; want rejected as not compared", x.Rejected)
	}
	notes := strings.Join(c.Notes, "\n")
	if strings.Contains(notes, " 0 MB/s") || !strings.Contains(notes, "not measured") {
		t.Errorf("notes quote unmeasured figures:\n%s", notes)
	}
}

// The inline cut-off keeps its default through the hand-offs load makes
// of one machine (1-5 µs, 2-4× apart), and moves only for one 8× off. A
// hand-off under what one can cost is noise and keeps the default too.
func TestInlineMaxMovesOnlyOnLargeDifferences(t *testing.T) {
	for _, tc := range []struct {
		handoffUs, mbps float64
		want            int64
	}{
		{1, 2000, hasher.DefaultInlineMax},    // 40 KB
		{2.5, 2000, hasher.DefaultInlineMax},  // 100 KB
		{5, 2000, hasher.DefaultInlineMax},    // 200 KB
		{10, 2000, hasher.DefaultInlineMax},   // 400 KB
		{0.1, 2000, hasher.DefaultInlineMax},  // under minHandoffUs: noise
		{0, 2000, hasher.DefaultInlineMax},    // the pool measured no slower than inline
		{0.5, 2000, hasher.DefaultInlineMax},  // 20 KB: within the band
		{0.5, 500, 16 << 10},                  // 5 KB on slow hashing: the floor
		{0.3, 20000, hasher.DefaultInlineMax}, // noise even where hashing is fast
		{30, 2000, 2 << 20},                   // 1.2 MB
		{500, 2000, 8 << 20},                  // 20 MB: the ceiling
		{3, 0, hasher.DefaultInlineMax},       // throughput unknown
	} {
		if got := inlineMax(tc.handoffUs, tc.mbps); got != tc.want {
			t.Errorf("hand-off %.1f µs at %.0f MB/s: inline_max %d, want %d", tc.handoffUs, tc.mbps, got, tc.want)
		}
	}
}

// With no time at all, calibration measures nothing yet still returns a
// safe policy: in-process crypto/sha256, no external program.
func TestCalibrateOverBudget(t *testing.T) {
	c, err := Run(context.Background(), Options{Budget: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, c)
	if c.Policy.ExternalMin != 0 || c.Policy.BatchKernel != "" {
		t.Errorf("unmeasured candidates used: %+v", c.Policy)
	}
	if c.Complete || c.StillValid() || !strings.Contains(c.String(), "cut short") {
		t.Errorf("calibration cut short: complete %v, still valid %v; want neither, and the table to say so", c.Complete, c.StillValid())
	}
	for _, x := range c.Candidates {
		if x.Kind == KindExternal && x.Path != "" && x.Verified && x.Rejected == "" {
			t.Errorf("%s neither measured nor rejected", x.Name)
		}
	}
}
