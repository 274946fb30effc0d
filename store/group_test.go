package store

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The cap halves while commits touch more nodes than the bound, stops at
// minGroup, and doubles back to MaxBatch when full groups touch few.
func TestGroupSizeFollowsNodes(t *testing.T) {
	g := newGroupSize(1024, 100)
	for _, step := range []struct {
		changes int
		nodes   int64
		want    int
	}{
		{1024, 300, 512},
		{512, 101, 256},
		{256, 100, 256}, // at the bound: kept
		{256, 60, 256},  // within the band: kept
		{10, 5, 256},    // a group that was not full says nothing
		{256, 40, 512},
		{512, 10, 1024},
		{1024, 10, 1024}, // never above MaxBatch
		{1024, 1e6, 512}, {512, 1e6, 256}, {256, 1e6, 128}, {128, 1e6, 64},
		{64, 1e6, minGroup}, // never below minGroup
	} {
		g.committed(step.changes, step.nodes)
		if g.n != step.want {
			t.Fatalf("after %d changes touching %d nodes: cap %d, want %d", step.changes, step.nodes, g.n, step.want)
		}
	}
}

// A first scan's load of records with random digests shrinks the writer's
// groups when their commits touch more nodes than Options.MaxGroupNodes,
// and keeps them at MaxBatch when they touch few.
func TestWriterBoundsGroupsByNodes(t *testing.T) {
	for _, tc := range []struct {
		maxNodes   int
		wantShrunk bool
	}{{32, true}, {DefaultMaxGroupNodes, false}} {
		t.Run(fmt.Sprint("nodes=", tc.maxNodes), func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "index.db"), Options{
				// Groups below deferMinGroup index their random digests at once.
				MaxBatch: deferMinGroup / 2, MaxGroupNodes: tc.maxNodes, MaxDelay: 10 * time.Second, NoSync: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			stop := runWriter(t, s)
			var wg sync.WaitGroup
			for i := range 8192 {
				wg.Add(1)
				d := sha256.Sum256(fmt.Appendf(nil, "content %d", i))
				r := rec("", int64(i), 1, uint64(i+1))
				r.Digest = d[:]
				s.Submit(Change{Op: OpPut, Path: p("/r/d%02d/f%05d", i/512, i), Record: r}, func(err error) {
					if err != nil {
						t.Error(err)
					}
					wg.Done()
				})
			}
			wg.Wait()
			stop() // the writer's fields are read after it returned
			if shrunk := s.group.n <= deferMinGroup/8; shrunk != tc.wantShrunk {
				t.Errorf("group cap %d after the load (MaxBatch %d, MaxGroupNodes %d), want shrunk %v", s.group.n, deferMinGroup/2, tc.maxNodes, tc.wantShrunk)
			}
			mustCheck(t, s)
		})
	}
}

// While the caller says it works in bulk, a group waits BulkIdle for a
// change that trickles in, so a cold first scan's changes, each after its
// file's read, still make groups large enough to defer their digest
// entries; a change whose caller waits, and once the bulk work ends a
// lone change, goes at MaxIdle again.
func TestBulkGroupsWaitForTrickles(t *testing.T) {
	s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
		Options{MaxDelay: 2 * time.Second, MaxIdle: time.Millisecond, BulkIdle: 500 * time.Millisecond, NoSync: true})
	var groups atomic.Int32
	testHookApplied = func() { groups.Add(1) }
	t.Cleanup(func() { testHookApplied = nil })
	var bulk atomic.Bool
	s.SetBulk(bulk.Load)
	trickle := func(phase string) int32 {
		groups.Store(0)
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			path := p("/r/%s/f%02d", phase, i)
			s.Submit(Change{Op: OpPut, Path: path, Record: rec(string(path), 1, 1, uint64(i+1))}, func(err error) {
				if err != nil {
					t.Errorf("%s: %v", path, err)
				}
				wg.Done()
			})
			time.Sleep(5 * time.Millisecond)
		}
		wg.Wait()
		return groups.Load()
	}
	bulk.Store(true)
	if n := trickle("bulk"); n > 3 {
		t.Errorf("bulk: 30 changes 5 ms apart made %d groups, want at most 3 (BulkIdle 500 ms)", n)
	}
	// A change its caller waits for (a lookup's hash, a scan's start) does
	// not wait for more: its group goes at MaxIdle.
	began := time.Now()
	mustPut(t, s, "/r/waited", rec("waited", 1, 1, 99))
	if took := time.Since(began); took > 250*time.Millisecond {
		t.Errorf("a Put during bulk work took %v; want its group committed at MaxIdle, not BulkIdle (500 ms)", took)
	}
	bulk.Store(false)
	if n := trickle("quiet"); n < 10 {
		t.Errorf("after the bulk work: 30 changes 5 ms apart made %d groups, want one a change or so (MaxIdle 1 ms)", n)
	}
}
