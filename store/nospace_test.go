package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/testutil"
)

// fillUp mounts a 2 MiB tmpfs, opens an index on it with its writer
// running and fills the rest of it with a padding file. It returns the
// tmpfs's directory.
func fillUp(t *testing.T, log *testutil.Buffer) (*Store, string, func()) {
	t.Helper()
	dir := mountTmpfs(t, "size=2m")
	s, err := Open(filepath.Join(dir, "index.db"), Options{MaxDelay: 2e6, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	pad := filepath.Join(dir, "padding")
	if err := os.WriteFile(pad, make([]byte, 1500<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	return s, dir, stop
}

// submitted tracks changes submitted without waiting for them.
type submitted struct {
	mu    sync.Mutex
	paths [][]byte
	acked map[string]error
	wg    sync.WaitGroup
}

func (sb *submitted) put(s *Store, path []byte, r Record) {
	sb.mu.Lock()
	sb.paths = append(sb.paths, path)
	sb.mu.Unlock()
	sb.wg.Add(1)
	s.Submit(Change{Op: OpPut, Path: path, Record: r}, func(err error) {
		sb.mu.Lock()
		sb.acked[string(path)] = err
		sb.mu.Unlock()
		sb.wg.Done()
	})
}

// putMany submits n puts from a goroutine and closes the channel it
// returns once all are submitted.
func (sb *submitted) putMany(s *Store, n int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			sb.put(s, p("/big/%d/f%d", i/200, i), rec(fmt.Sprint(i), 10, 1, uint64(i)))
		}
	}()
	return done
}

// waitBacklog waits up to a minute until the writer holds changes.
func waitBacklog(t *testing.T, s *Store) Backlog {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b := s.Backlog(); b.Changes > 0 {
			return b
		}
	}
	t.Fatal("the writer never held changes for lack of space")
	return Backlog{}
}

// A full file system: the writer commits what fits, holds the changes it
// cannot commit, counts them as a backlog and commits them, unchanged,
// once there is room again; nothing is refused, half-written or lost
// meanwhile.
func TestFullFileSystemHoldsChanges(t *testing.T) {
	log := new(testutil.Buffer)
	s, dir, stop := fillUp(t, log)
	defer func() { stop(); s.Close() }()
	sb := &submitted{acked: map[string]error{}}
	all := sb.putMany(s, 10000)
	b := waitBacklog(t, s)
	if !errors.Is(b.Err, ErrNoSpace) || b.Since.IsZero() {
		t.Errorf("backlog %+v, want ErrNoSpace and a start", b)
	}
	sb.mu.Lock()
	for p, err := range sb.acked {
		if err != nil {
			t.Fatalf("%s refused while the writer should hold it: %v", p, err)
		}
		if _, ok, err := s.Get([]byte(p)); !ok || err != nil {
			t.Fatalf("acknowledged %s missing: %v %v", p, ok, err)
		}
	}
	t.Logf("%d changes committed before the file system was full, %d held", len(sb.acked), b.Changes)
	sb.mu.Unlock()
	mustCheck(t, s)

	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size=64m"); err != nil {
		t.Fatal(err)
	}
	<-all
	sb.wg.Wait()
	if b := s.Backlog(); b.Changes != 0 {
		t.Errorf("backlog after room came back: %+v", b)
	}
	for _, path := range sb.paths {
		if err := sb.acked[string(path)]; err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, ok, err := s.Get(path); !ok || err != nil {
			t.Fatalf("%s missing after room came back: %v %v", path, ok, err)
		}
	}
	if st, _ := s.Stats(); st.Files != 10000 {
		t.Errorf("%d files, want 10000", st.Files)
	}
	text := log.String()
	if strings.Count(text, "holding changes") != 1 || strings.Count(text, "index writes resumed") != 1 ||
		strings.Contains(text, "commit failed") {
		t.Errorf("want one line when the hold starts and one when it ends:\n%s", text)
	}
	mustCheck(t, s)
}

// Stopping the writer while it holds changes refuses them with ErrNoSpace
// and leaves a sound index without them.
func TestFullFileSystemStop(t *testing.T) {
	s, _, stop := fillUp(t, new(testutil.Buffer))
	sb := &submitted{acked: map[string]error{}}
	all := sb.putMany(s, 10000)
	waitBacklog(t, s)
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	<-all
	sb.wg.Wait()
	refused := 0
	for _, err := range sb.acked {
		if err != nil && !errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrClosed) {
			t.Fatalf("held change refused with %v, want ErrNoSpace or ErrClosed", err)
		}
		if err != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no held change was refused when the writer stopped")
	}
	ro, err := Open(s.Path(), Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	mustCheck(t, ro)
	for path, err := range sb.acked {
		if _, ok, _ := ro.Get([]byte(path)); ok != (err == nil) {
			t.Fatalf("%s: acknowledged %v, present %v", path, err == nil, ok)
		}
	}
}
