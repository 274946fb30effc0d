// Package diskprocs gives the Go runtime more threads while the process
// reads from storage. A read of a file not in the page cache blocks its
// thread in the kernel, and the runtime hands that thread's turn to run Go
// code to another thread only at its monitor's next tick. With one thread
// per CPU, a cold first scan left the CPUs idle a third of the time; with
// four it ran 1.5× faster. Warm, extra threads only contend, so the count
// goes back once the reads from storage stop.
package diskprocs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

// Defaults of Options.
const (
	DefaultInterval = 200 * time.Millisecond
	DefaultMinRate  = 8 << 20 // bytes a second
	DefaultHold     = 10      // samples: 2 s at the default interval
)

// Options tune Run; zero fields take the defaults.
type Options struct {
	// Base is GOMAXPROCS while reads come from memory; 0: the current value.
	Base int
	// High is GOMAXPROCS while the process reads from storage; 0: 4 × Base.
	High int
	// Interval is how often the bytes read from storage are sampled.
	Interval time.Duration
	// MinRate is the rate of reads from storage, in bytes a second, that
	// raises the count to High.
	MinRate int64
	// Hold is how many samples in a row below MinRate bring it back to Base.
	Hold int

	set       func(int) int         // runtime.GOMAXPROCS; tests replace it
	readBytes func() (int64, error) // this process's bytes read from storage
}

func (o Options) withDefaults() Options {
	if o.Base <= 0 {
		o.Base = runtime.GOMAXPROCS(0)
	}
	if o.High <= 0 {
		o.High = 4 * o.Base
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.MinRate <= 0 {
		o.MinRate = DefaultMinRate
	}
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.set == nil {
		o.set = runtime.GOMAXPROCS
	}
	if o.readBytes == nil {
		o.readBytes = ReadBytes
	}
	return o
}

// Run samples the bytes the process reads from storage until ctx ends,
// and sets GOMAXPROCS to High while they come at MinRate or more, to Base
// otherwise. It leaves GOMAXPROCS at Base when it returns. It returns an
// error only when the count cannot be read at all.
func Run(ctx context.Context, o Options) error {
	o = o.withDefaults()
	last, err := o.readBytes()
	if err != nil {
		return err
	}
	g := gate{o: o}
	defer o.set(o.Base)
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for prev := time.Now(); ; {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			n, err := o.readBytes()
			if err != nil {
				continue // a transient failure keeps the current count
			}
			rate := float64(n-last) / now.Sub(prev).Seconds()
			last, prev = n, now
			if procs, changed := g.step(rate); changed {
				o.set(procs)
			}
		}
	}
}

// gate decides the count from the sampled rates.
type gate struct {
	o     Options
	high  bool
	quiet int // samples in a row below MinRate while high
}

// step takes one sampled rate and returns the count it calls for and
// whether that is a change.
func (g *gate) step(rate float64) (int, bool) {
	if rate >= float64(g.o.MinRate) {
		g.quiet = 0
		if !g.high {
			g.high = true
			return g.o.High, true
		}
		return g.o.High, false
	}
	if !g.high {
		return g.o.Base, false
	}
	if g.quiet++; g.quiet < g.o.Hold {
		return g.o.High, false
	}
	g.high, g.quiet = false, 0
	return g.o.Base, true
}

// errNoField reports a /proc/self/io without its read_bytes line.
var errNoField = errors.New("diskprocs: no read_bytes in /proc/self/io")

// ReadBytes returns the bytes this process caused to be read from storage
// (read_bytes of /proc/self/io): page-cache fills by its reads, read-ahead
// and faults of its mappings, not the reads the page cache answered.
func ReadBytes() (int64, error) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("read_bytes: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("diskprocs: read_bytes %q: %w", v, err)
			}
			return n, nil
		}
	}
	return 0, errNoField
}
