// Package diskprocs gives the Go runtime more threads while the process
// reads from storage. A read of a file not in the page cache blocks its
// thread in the kernel, and the runtime hands that thread's turn to run Go
// code to another thread only at its monitor's next tick. With one thread
// per CPU, a cold first scan left the CPUs idle a third of the time; with
// four it ran 1.5× faster. Warm, extra threads only contend, so the count
// goes back once the reads from storage stop, and it is not raised for a
// trickle: a page cache that is nearly warm still sends a few pages of a
// scan to storage (pages evicted since), and on a tree read 3 % from
// storage one thread per CPU was the faster, on one read 11 % from storage
// four were (BENCHMARKS.md). While nothing runs that reads (Options.Idle),
// the counts are not sampled: Run sleeps until woken.
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
	DefaultMinShare = 1.0 / 16
	DefaultHold     = 10 // samples: 2 s at the default interval
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
	// raises the count to High, if they are also MinShare or more of the
	// bytes the process read (a fraction; 0 takes the default, 1/16).
	MinRate  int64
	MinShare float64
	// Hold is how many quiet samples in a row (below MinRate or below
	// MinShare) bring it back to Base.
	Hold int
	// Idle reports whether nothing runs that reads files, and Wake
	// returns a channel closed when that may change; take it before
	// asking Idle. While Idle says so and the count is Base, Run waits for
	// Wake instead of sampling. Nil: it samples for as long as it runs.
	Idle func() bool
	Wake func() <-chan struct{}

	set       func(int) int         // runtime.GOMAXPROCS; tests replace it
	readBytes func() (Reads, error) // this process's reads so far
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
	if o.MinShare <= 0 {
		o.MinShare = DefaultMinShare
	}
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.set == nil {
		o.set = runtime.GOMAXPROCS
	}
	if o.readBytes == nil {
		o.readBytes = ReadCounts
	}
	return o
}

// Run samples the bytes the process reads from storage until ctx ends,
// and sets GOMAXPROCS to High while they come at MinRate or more and make
// MinShare or more of what it reads, to Base otherwise. It leaves
// GOMAXPROCS at Base when it returns. It returns an error only when the
// counts cannot be read at all.
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
		if !g.high {
			woken, ok := o.sleep(ctx, t)
			if !ok {
				return nil
			}
			if woken {
				// Rates count from here, not across the sleep.
				if n, err := o.readBytes(); err == nil {
					last, prev = n, time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			n, err := o.readBytes()
			if err != nil {
				continue // a transient failure keeps the current count
			}
			rate := float64(n.Storage-last.Storage) / now.Sub(prev).Seconds()
			share := n.share(last)
			last, prev = n, now
			if procs, changed := g.step(rate, share); changed {
				o.set(procs)
			}
		}
	}
}

// sleep waits for o.Wake while o.Idle says nothing reads, with t
// stopped, and returns at once otherwise. It reports whether it slept,
// and false for ok when ctx ended.
func (o *Options) sleep(ctx context.Context, t *time.Ticker) (slept, ok bool) {
	if o.Wake == nil || o.Idle == nil {
		return false, true
	}
	wake := o.Wake()
	if !o.Idle() {
		return false, true
	}
	t.Stop()
	select {
	case <-ctx.Done():
		return true, false
	case <-wake:
	}
	t.Reset(o.Interval)
	return true, true
}

// gate decides the count from the sampled rates.
type gate struct {
	o     Options
	high  bool
	quiet int // quiet samples in a row while high
}

// step takes one sample, the rate of reads from storage and their share
// of the bytes read, and returns the count it calls for and whether that is
// a change.
func (g *gate) step(rate, share float64) (int, bool) {
	if rate >= float64(g.o.MinRate) && share >= g.o.MinShare {
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

// Reads are a process's reads so far, from /proc/self/io.
type Reads struct {
	// Storage is what the process caused to be read from storage
	// (read_bytes): page-cache fills by its reads, read-ahead and faults of
	// its mappings, not the reads the page cache answered.
	Storage int64
	// All is what its read system calls returned (rchar), from the page
	// cache or not, and from sockets and pipes too: annexd's own are small
	// beside a scan's reads (API requests, the hub's acknowledgements).
	All int64
}

// share is the part of the bytes read since last that came from storage;
// reads from storage with no read call (faults of a mapping) count whole.
func (r Reads) share(last Reads) float64 {
	storage, all := r.Storage-last.Storage, r.All-last.All
	if storage <= 0 {
		return 0
	}
	if all <= 0 {
		return 1
	}
	return float64(storage) / float64(all)
}

// errNoField reports a /proc/self/io without its read_bytes or rchar line.
var errNoField = errors.New("diskprocs: no read_bytes or rchar in /proc/self/io")

// ReadCounts returns this process's reads so far.
func ReadCounts() (Reads, error) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return Reads{}, err
	}
	var r Reads
	var found int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		for _, f := range []struct {
			prefix string
			to     *int64
		}{{"read_bytes: ", &r.Storage}, {"rchar: ", &r.All}} {
			v, ok := bytes.CutPrefix(sc.Bytes(), []byte(f.prefix))
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return Reads{}, fmt.Errorf("diskprocs: %s%q: %w", f.prefix, v, err)
			}
			*f.to = n
			found++
		}
	}
	if found != 2 {
		return Reads{}, errNoField
	}
	return r, nil
}
