package audit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/store"
)

// heldState is an index whose first read of the audit's state is held
// after reading, so Run's load is under way with the state read then.
type heldState struct {
	*store.Store
	read, release chan struct{}
	once          sync.Once
}

func (s *heldState) GetMeta(name string) ([]byte, bool, error) {
	v, ok, err := s.Store.GetMeta(name)
	if name == metaState {
		s.once.Do(func() { close(s.read); <-s.release })
	}
	return v, ok, err
}

// A pause asked for while Run still loads the saved state is not undone
// by the load: Pause waits for it.
func TestPauseWhileLoading(t *testing.T) {
	e := newEnv(t, "", envOptions())
	st := &heldState{Store: e.st, read: make(chan struct{}), release: make(chan struct{})}
	o := envOptions()
	o.Indexer = e.ix
	b, err := New(st, e.h, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-st.read
	paused := make(chan error, 1)
	go func() { paused <- b.Pause(ctx) }()
	select { // a Pause that does not wait for the load acts at once
	case err := <-paused:
		close(st.release)
		t.Fatalf("Pause returned (%v) while Run was loading the state", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(st.release)
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the load to end", func() bool {
		select {
		case <-b.loaded:
			return true
		default:
			return false
		}
	})
	if s := b.Status(); s.State != "paused" {
		t.Errorf("state %q after a pause asked for during the load, want paused", s.State)
	}
}
