package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// PressureGate is busy while tasks wait for a CPU, or for I/O, more than
// Max percent of the time: Linux's pressure stall information, the "some"
// lines of ProcDir/pressure/cpu and io, which count the time at least one
// task was held up. It looks back about pressureWindow: at the kernel's
// totals since its earlier looks, or at its ten-second averages when it
// has none recent enough. The caller's own time in reads (OwnIO) is left
// out of the I/O share, so that an audit reading alone on an idle machine
// does not take its own waits for a busy machine.
type PressureGate struct {
	Max     float64              // percent of the time
	ProcDir string               // "": /proc
	OwnIO   func() time.Duration // the caller's time in reads so far; nil: none
	mu      sync.Mutex
	looks   []psiLook // oldest first; the first the base of the shares
}

// pressureWindow is how far back PressureGate looks.
const pressureWindow = 10 * time.Second

// psiLook is what one look at the totals saw.
type psiLook struct {
	at          time.Time
	cpu, io     time.Duration // the "some" totals
	own         time.Duration // OwnIO
	cpu10, io10 float64       // the "some" avg10, percent
}

// Busy implements Gate. It is never busy when the pressure cannot be read.
func (g *PressureGate) Busy() (string, bool) {
	l, err := readPressure(or(g.ProcDir, "/proc"))
	if err != nil {
		return "", false
	}
	l.at = time.Now()
	if g.OwnIO != nil {
		l.own = g.OwnIO()
	}
	cpu, io, span := g.shares(l)
	over := func(what string, share float64) string {
		return fmt.Sprintf("the machine is busy: tasks waited for %s %.0f%% of the last %s, above max_pressure = %s%%",
			what, share, span.Round(time.Second), strconv.FormatFloat(g.Max, 'f', -1, 64))
	}
	switch {
	case cpu > g.Max:
		return over("a CPU", cpu), true
	case io > g.Max:
		return over("I/O", io), true
	}
	return "", false
}

// shares returns the percent of the time tasks waited for a CPU and, the
// caller's own reads left out, for I/O, and the span they cover.
func (g *PressureGate) shares(l psiLook) (cpu, io float64, span time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.looks = append(g.looks, l)
	for len(g.looks) > 1 && !g.looks[1].at.After(l.at.Add(-pressureWindow)) {
		g.looks = g.looks[1:]
	}
	base := g.looks[0]
	span = l.at.Sub(base.at)
	if span < time.Second || span > 2*pressureWindow {
		// Too short to tell, or too old to stand for now.
		g.looks = append(g.looks[:0], l)
		return l.cpu10, l.io10, pressureWindow
	}
	frac := func(d time.Duration) float64 { return min(max(d.Seconds()/span.Seconds(), 0), 1) }
	some, own := frac(l.io-base.io), frac(l.own-base.own)
	// The waits of others and the caller's overlap by chance: some is
	// 1 - (1-own)(1-others). A caller that waited nearly all the time
	// hides the rest; then nothing is told of them.
	others := 0.0
	if own < 0.95 {
		others = max(1-(1-some)/(1-own), 0)
	}
	return 100 * frac(l.cpu-base.cpu), 100 * others, span
}

// HasPressure reports whether the kernel gives pressure stall information
// under procDir ("": /proc).
func HasPressure(procDir string) bool {
	_, err := readPressure(or(procDir, "/proc"))
	return err == nil
}

// errNoSome reports a pressure file without its "some" line.
var errNoSome = errors.New("audit: no some line in a pressure file")

// readPressure reads the "some" lines of procDir/pressure/cpu and io.
func readPressure(procDir string) (psiLook, error) {
	var l psiLook
	var err error
	if l.cpu10, l.cpu, err = readSome(filepath.Join(procDir, "pressure", "cpu")); err != nil {
		return l, err
	}
	l.io10, l.io, err = readSome(filepath.Join(procDir, "pressure", "io"))
	return l, err
}

// readSome returns the avg10 (percent) and total of a pressure file's
// "some" line: "some avg10=1.23 avg60=0.50 avg300=0.10 total=12345"
// (microseconds).
func readSome(path string) (float64, time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || string(f[0]) != "some" {
			continue
		}
		var avg10 float64
		var total int64
		var seen int
		for _, kv := range f[1:] {
			k, v, _ := bytes.Cut(kv, []byte("="))
			switch string(k) {
			case "avg10":
				avg10, err = strconv.ParseFloat(string(v), 64)
				seen++
			case "total":
				total, err = strconv.ParseInt(string(v), 10, 64)
				seen++
			}
			if err != nil {
				return 0, 0, fmt.Errorf("audit: %s: %q: %w", path, kv, err)
			}
		}
		if seen != 2 {
			return 0, 0, fmt.Errorf("%w: %s", errNoSome, path)
		}
		return avg10, time.Duration(total) * time.Microsecond, nil
	}
	return 0, 0, fmt.Errorf("%w: %s", errNoSome, path)
}
