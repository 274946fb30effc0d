package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
)

// The printer draws progress only where it has a terminal, clears it
// before other lines, and reports a stopped run as stopped.
func TestDedupPrinter(t *testing.T) {
	var out, stderr, bar bytes.Buffer
	w := bufio.NewWriter(&out)
	p := &dedupPrinter{out: w, info: w, stderr: &stderr, bar: &progressBar{w: &bar}}
	events := []api.DedupEvent{
		{Plan: &api.DedupPlan{Mode: "reflink", Groups: 12, Actions: 20, Frees: 3 << 20, AlreadyShared: 2,
			Unsupported: []api.DedupUnsupported{{FS: "ext4", Path: []byte("/e/x"), Error: "operation not supported", Groups: 1, Actions: 1}}}},
		{Group: &api.DedupGroup{Keeper: []byte("/k"), Frees: 2 << 20, Targets: [][]byte{[]byte("/a"), []byte("/b"), []byte("/c"), []byte("/d"), []byte("/e")}}},
		{Progress: &api.DedupProgress{Done: 10, Total: 20, Freed: 1 << 20}},
		{Skip: &api.DedupSkip{Keeper: []byte("/k"), Target: []byte("/a"), Reason: "changed"}},
	}
	for _, ev := range events {
		if err := p.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	p.stopped.Store(true)
	if err := p.finish(nil, api.DedupEnd{Result: &api.DedupResult{Planned: 20, Done: 10, Freed: 1 << 20, Skipped: map[string]int{"changed": 1}, Seconds: 1.25}},
		&api.DedupError{Code: api.CodeInterrupted}); err == nil {
		t.Error("a stopped run exits 0")
	}
	want := "will free 3.0 MiB: 20 files in 12 groups (reflink; 2 already shared)\n" +
		"    2.0 MiB  /k ← /a, /b, /c (+2 more)\n" +
		"  … and 11 more groups\n" +
		"stopped early: freed 1.0 MiB in 10 of 20 files (1.2 s)\n" +
		"skipped 1: changed 1\n" +
		"  changed  /a (keeper /k)\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if b := bar.String(); !strings.Contains(b, "\r\033[K[###############...............]  50%  10 of 20 files, freed 1.0 MiB") || !strings.HasSuffix(b, "\r\033[K") {
		t.Errorf("progress line %q: want it drawn, then cleared", b)
	}
	if s := stderr.String(); !strings.Contains(s, "ext4 cannot share extents (holding /e/x: operation not supported): 1 file in 1 group left as they are; --hardlink") {
		t.Errorf("stderr %q", s)
	}
}

// The first signal asks the daemon to stop after the actions under way;
// the second leaves at once.
func TestDedupInterrupts(t *testing.T) {
	var stderr bytes.Buffer
	p := &dedupPrinter{stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := make(chan os.Signal, 2)
	stop := make(chan struct{})
	left := make(chan struct{})
	done := make(chan struct{})
	go func() {
		p.interrupts(ctx, sig, stop, func() { close(left) })
		close(done)
	}()
	sig <- os.Interrupt
	<-stop
	if !p.stopped.Load() {
		t.Error("stopped not set with stop closed")
	}
	select {
	case <-left:
		t.Fatal("the first signal left at once")
	default:
	}
	sig <- os.Interrupt
	<-left
	<-done
	if !strings.Contains(stderr.String(), "stopping after the actions under way (Ctrl-C again to leave at once)") {
		t.Errorf("stderr %q", stderr.String())
	}
}
