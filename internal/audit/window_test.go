package audit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	for _, bad := range []string{"", "mon", "mon-fri", "funday 01:00-02:00", "01:00", "01:00-01:00", "25:00-26:00",
		"01:60-02:00", "mon-fri 01:00-06:00 extra", "24:00-01:00", "01:00-24:01"} {
		if _, err := parseWindow(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("parseWindow(%q) = %v, want ErrConfig", bad, err)
		}
	}
	w, err := parseWindow("Fri-Mon,wed 22:30-24:00")
	if err != nil {
		t.Fatal(err)
	}
	want := [7]bool{true, true, false, true, false, true, true} // sun mon tue wed thu fri sat
	if w.days != want || w.start != 22*60+30 || w.end != 24*60 {
		t.Fatalf("parsed %+v", w)
	}
}

// A weekday window, one past midnight, and one all day on the weekend, on
// the days around a week's boundary.
func TestWindows(t *testing.T) {
	ws, err := parseWindows([]string{"mon-fri 01:00-06:00", "fri 23:00-02:00", "sat,sun 00:00-24:00"})
	if err != nil {
		t.Fatal(err)
	}
	at := func(day, hhmm string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", day+" "+hhmm, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// 2026-11-30 is a Monday.
	for _, tc := range []struct {
		day, hhmm string
		in        bool
	}{
		{"2026-11-30", "00:59", false}, {"2026-11-30", "01:00", true}, {"2026-11-30", "05:59", true},
		{"2026-11-30", "06:00", false}, {"2026-12-04", "22:59", false}, {"2026-12-04", "23:00", true},
		{"2026-12-05", "01:30", true}, {"2026-12-05", "13:00", true}, {"2026-12-06", "23:59", true},
		{"2026-12-07", "00:30", false}, {"2026-12-07", "01:30", true},
		{"2026-12-01", "23:30", false}, {"2026-12-02", "01:59", true},
	} {
		if got := inWindows(ws, at(tc.day, tc.hhmm)); got != tc.in {
			t.Errorf("%s %s: in = %v, want %v", tc.day, tc.hhmm, got, tc.in)
		}
	}
	if got, want := nextOpen(ws, at("2026-11-30", "07:10")), at("2026-12-01", "01:00"); !got.Equal(want) {
		t.Errorf("nextOpen Mon 07:10 = %v, want %v", got, want)
	}
	if got := nextOpen(ws, at("2026-11-30", "02:00")); !got.Equal(at("2026-11-30", "02:00")) {
		t.Errorf("nextOpen inside a window = %v", got)
	}
	if got, want := closesAt(ws, at("2026-11-30", "02:00")), at("2026-11-30", "06:00"); !got.Equal(want) {
		t.Errorf("closesAt Mon 02:00 = %v, want %v", got, want)
	}
	// Friday 23:00 runs into the weekend's whole days until Monday 00:00,
	// and Monday's window opens at 01:00.
	if got, want := closesAt(ws, at("2026-12-04", "23:30")), at("2026-12-07", "00:00"); !got.Equal(want) {
		t.Errorf("closesAt Fri 23:30 = %v, want %v", got, want)
	}
	if !nextOpen(nil, at("2026-11-30", "07:10")).Equal(at("2026-11-30", "07:10")) || !closesAt(nil, at("2026-11-30", "07:10")).IsZero() {
		t.Error("no windows should mean any time")
	}
}

func TestWritebackOf(t *testing.T) {
	proc := t.TempDir()
	if got := writebackOf(proc); got != 65*time.Second {
		t.Errorf("defaults: %v", got)
	}
	vm := filepath.Join(proc, "sys", "vm")
	if err := os.MkdirAll(vm, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"dirty_expire_centisecs": "6000\n", "dirty_writeback_centisecs": "1000\n"} {
		if err := os.WriteFile(filepath.Join(vm, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := writebackOf(proc); got != 100*time.Second {
		t.Errorf("from sysctls: %v", got)
	}
	t.Logf("this machine: %v", writebackOf("/proc"))
}

// FuzzParseWindow: a window that parses is never empty, opens within a
// week of any time, and closes after it opened.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"01:00-06:00", "mon-fri 01:00-06:00", "sat,sun 22:00-07:00", "fri-mon,wed 00:00-24:00", "x", "mon 1:2-3:4"} {
		f.Add(s, int64(1_796_000_000))
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		w, err := parseWindow(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("parseWindow(%q): %v without ErrConfig", s, err)
			}
			return
		}
		days := 0
		for _, d := range w.days {
			if d {
				days++
			}
		}
		if days == 0 || w.start == w.end || w.start < 0 || w.start >= 24*60 || w.end < 0 || w.end > 24*60 {
			t.Fatalf("parseWindow(%q) = %+v", s, w)
		}
		at := time.Unix(unix%(1<<33), 0)
		open := nextOpen([]window{w}, at)
		if open.IsZero() || open.Before(at) || open.Sub(at) > 8*24*time.Hour || !w.contains(open) {
			t.Fatalf("%q from %v: opens %v", s, at, open)
		}
		if end := closesAt([]window{w}, open); !end.IsZero() && !end.After(open) {
			t.Fatalf("%q opened %v closes %v", s, open, end)
		}
	})
}

// A plan says how long until it: as people say it, and with the words
// that fit the reason.
func TestWhyWhen(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		why  string
		in   time.Duration
		want string
	}{
		{whyNext, 59*time.Minute + 50*time.Second, "the next pass is due in 1h0m"},
		{whyNext, 59 * time.Minute, "the next pass is due in 59m"},
		{whyNext, 30 * 24 * time.Hour, "the next pass is due in 30d"},
		{whyNext, 50*time.Hour + 20*time.Minute, "the next pass is due in 2d2h"},
		{whyDue, 40 * time.Second, "a pass is due; it begins in 40s (a random delay)"},
		{whyWindow, 5 * time.Hour, "waiting for the run window, which opens in 5h0m"},
		{whyGoesOn, 3 * time.Hour, "the pass in progress goes on at the next run, in 3h0m"},
		{whyGoesOn, 0, "the pass in progress goes on"},
		{whyOff, -time.Second, "scheduled audits are off"},
	} {
		at := now.Add(c.in)
		if c.in == 0 {
			at = time.Time{}
		}
		if got := whyWhen(c.why, at, now); got != c.want {
			t.Errorf("whyWhen(%q, +%v) = %q, want %q", c.why, c.in, got, c.want)
		}
	}
}
