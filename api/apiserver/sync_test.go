package apiserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// syncIndex is a storeIndex whose Sync is counted and may block or fail.
type syncIndex struct {
	*storeIndex
	calls atomic.Int32
	block chan struct{} // Sync waits for it (or ctx) when not nil
	err   error
}

func (x *syncIndex) Sync(ctx context.Context) error {
	x.calls.Add(1)
	if x.block != nil {
		select {
		case <-x.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return x.err
}

func TestStatusWaitSyncsFirst(t *testing.T) {
	idx := &syncIndex{storeIndex: newStoreIndex(t, t.TempDir())}
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx := context.Background()
	if _, err := ts.client.Status(ctx); err != nil || idx.calls.Load() != 0 {
		t.Fatalf("plain status: %v, %d syncs", err, idx.calls.Load())
	}
	st, err := ts.client.WaitIdle(ctx, 5*time.Second)
	if err != nil || !st.Idle || idx.calls.Load() != 1 {
		t.Fatalf("wait: idle %v, %v, %d syncs; want idle after one sync", st.Idle, err, idx.calls.Load())
	}

	// A sync that fails for another reason than the timeout: idle as before.
	idx.err = errors.New("watcher: sync: no directory")
	if st, err := ts.client.WaitIdle(ctx, 5*time.Second); err != nil || !st.Idle {
		t.Errorf("failed sync: idle %v, %v", st.Idle, err)
	}
}

// TestStatusWaitSyncTimeout: a sync that does not finish within the
// timeout never gives an idle answer.
func TestStatusWaitSyncTimeout(t *testing.T) {
	idx := &syncIndex{storeIndex: newStoreIndex(t, t.TempDir()), block: make(chan struct{})}
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	st, err := ts.client.WaitIdle(context.Background(), 200*time.Millisecond)
	if err != nil || st.Idle {
		t.Fatalf("idle %v, %v; want not idle when the sync did not finish", st.Idle, err)
	}
	close(idx.block)
	st, err = ts.client.WaitIdle(context.Background(), 5*time.Second)
	if err != nil || !st.Idle {
		t.Fatalf("idle %v, %v after the sync finished", st.Idle, err)
	}
}

// idleIndex is a storeIndex that says when it becomes idle (api.IdleWaiter).
type idleIndex struct {
	*storeIndex
	idleNow chan struct{} // closed when the index becomes idle
}

func (x *idleIndex) WaitIdle(ctx context.Context) error {
	select {
	case <-x.idleNow:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestStatusWaitOnIdleWaiter: a long poll on an IdleWaiter waits on it
// instead of asking Status again and again, and answers once it is idle.
func TestStatusWaitOnIdleWaiter(t *testing.T) {
	idx := &idleIndex{storeIndex: newStoreIndex(t, t.TempDir()), idleNow: make(chan struct{})}
	idx.idle.Store(false)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	done := make(chan error, 1)
	go func() {
		st, err := ts.client.WaitIdle(context.Background(), time.Minute)
		if err == nil && !st.Idle {
			err = errors.New("answered not idle")
		}
		done <- err
	}()
	time.Sleep(time.Second) // ten poll intervals, were it polling
	if n := idx.statuses.Load(); n > 2 {
		t.Errorf("status read %d times while waiting, want at most 2", n)
	}
	idx.idle.Store(true)
	close(idx.idleNow)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
