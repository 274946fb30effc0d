package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// spans are the times each package's test binary ran, from its "start"
// event to its result.
type spans struct {
	started map[string]time.Time
	edges   []edge
}

// edge is a package starting (+1) or ending (-1) at a time.
type edge struct {
	at    time.Time
	delta int
}

func (s *spans) take(e event) {
	if e.Time.IsZero() {
		return
	}
	switch e.Action {
	case "start":
		s.started[e.Package] = e.Time
	case "pass", "fail", "skip":
		if at, ok := s.started[e.Package]; ok {
			delete(s.started, e.Package)
			s.edges = append(s.edges, edge{at, +1}, edge{e.Time, -1})
		}
	}
}

// running returns how long n packages ran at once, for each n from 1.
func (s *spans) running() []time.Duration {
	edges := slices.Clone(s.edges)
	slices.SortStableFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	var by []time.Duration
	n := 0
	for i, e := range edges {
		if i > 0 && n > 0 {
			for len(by) < n {
				by = append(by, 0)
			}
			by[n-1] += e.at.Sub(edges[i-1].at)
		}
		n += e.delta
	}
	return by
}

// profile says how long one, two, ... packages ran at once: a long time
// with fewer than -p is a tail that leaves CPUs idle.
func (s *spans) profile() string {
	var parts []string
	for i, d := range s.running() {
		parts = append(parts, fmt.Sprintf("%d for %s", i+1, d.Round(time.Second)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// cpuTime is the machine's CPU time from /proc/stat: every process's,
// not only the tests'.
type cpuTime struct {
	ok           bool
	cpus         int
	user, system time.Duration
}

// readCPU reads /proc/stat's first line; ok is false where it cannot.
func readCPU() cpuTime {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTime{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPU(line, runtime.NumCPU())
}

// parseCPU reads "cpu user nice system idle iowait irq softirq ..." in
// clock ticks of 1/100 s (USER_HZ). Nice counts as user; irq and softirq
// as system.
func parseCPU(line string, cpus int) cpuTime {
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuTime{}
	}
	var v [7]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return cpuTime{}
		}
		v[i] = n
	}
	tick := time.Second / 100
	return cpuTime{ok: true, cpus: cpus, user: time.Duration(v[0]+v[1]) * tick, system: time.Duration(v[2]+v[5]+v[6]) * tick}
}

// since is the CPU time from c0 to c.
func (c cpuTime) since(c0 cpuTime) cpuTime {
	if !c.ok || !c0.ok {
		return cpuTime{}
	}
	return cpuTime{ok: true, cpus: c.cpus, user: c.user - c0.user, system: c.system - c0.system}
}
