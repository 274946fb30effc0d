// Command testtime reads `go test -json` on stdin, prints what go test
// prints without -json (each package's result, and the output of what
// failed), and at the end where the time went: how long one, two, ...
// packages ran at once, the machine's CPU over the run, and the slowest
// packages and tests. It exits 1 when a test or a package failed.
// scripts/test.sh runs it.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type timing struct {
	name    string
	elapsed float64
}

// run is what the events told so far.
type run struct {
	out      io.Writer
	outputs  map[string][]string // package or package.test → its output, until it passes
	packages []timing
	tests    []timing
	failed   []string
	spans    spans // when each package ran
}

func main() {
	start, cpu0 := time.Now(), readCPU()
	r := &run{out: os.Stdout, outputs: map[string][]string{}, spans: spans{started: map[string]time.Time{}}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(r.out, sc.Text()) // a build error, say: not JSON
			continue
		}
		r.take(e)
	}
	r.summary(time.Since(start), readCPU().since(cpu0))
	if len(r.failed) > 0 {
		os.Exit(1)
	}
}

func (r *run) take(e event) {
	key := e.Package
	if e.Test != "" {
		key += "." + e.Test
	}
	if e.Test == "" {
		r.spans.take(e)
	}
	switch e.Action {
	case "output":
		r.outputs[key] = append(r.outputs[key], e.Output)
	case "pass", "skip":
		if e.Test == "" {
			fmt.Fprintf(r.out, "ok  \t%s\t%.1fs\n", e.Package, e.Elapsed)
			r.packages = append(r.packages, timing{e.Package, e.Elapsed})
		} else if !strings.Contains(e.Test, "/") {
			r.tests = append(r.tests, timing{key, e.Elapsed})
		}
		delete(r.outputs, key)
	case "fail":
		r.failed = append(r.failed, key)
		for _, l := range r.outputs[key] {
			fmt.Fprint(r.out, l)
		}
		delete(r.outputs, key)
		if e.Test == "" {
			r.packages = append(r.packages, timing{e.Package, e.Elapsed})
		}
	}
}

func (r *run) summary(wall time.Duration, cpu cpuTime) {
	top := func(ts []timing, n int) []timing {
		slices.SortFunc(ts, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
		return ts[:min(n, len(ts))]
	}
	fmt.Fprintf(r.out, "\n== where the time went (wall %s; packages run %s at a time)\n", wall.Round(time.Second), parallel())
	fmt.Fprintf(r.out, "packages running at once: %s\n", r.spans.profile())
	if cpu.ok {
		fmt.Fprintf(r.out, "the machine's CPU meanwhile (every process): %s user + %s system = %s busy of %d CPUs' %s (%.0f %%)\n",
			cpu.user.Round(time.Second), cpu.system.Round(time.Second), (cpu.user + cpu.system).Round(time.Second),
			cpu.cpus, (wall * time.Duration(cpu.cpus)).Round(time.Second), 100*float64(cpu.user+cpu.system)/float64(wall*time.Duration(cpu.cpus)))
	}
	fmt.Fprintln(r.out, "slowest packages:")
	for _, t := range top(r.packages, 10) {
		fmt.Fprintf(r.out, "  %6.1fs  %s\n", t.elapsed, t.name)
	}
	fmt.Fprintln(r.out, "slowest tests:")
	for _, t := range top(r.tests, 15) {
		fmt.Fprintf(r.out, "  %6.1fs  %s\n", t.elapsed, t.name)
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(r.out, "FAILED: %s\n", strings.Join(r.failed, ", "))
	}
}

// parallel is go test's -p, as scripts/test.sh passes it in GOTEST_P.
func parallel() string {
	if p := os.Getenv("GOTEST_P"); p != "" {
		return p
	}
	return "GOMAXPROCS"
}
