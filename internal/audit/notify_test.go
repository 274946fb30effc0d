package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startNotifier runs a notifier of argv until the test ends.
func startNotifier(t *testing.T, argv []string, every time.Duration) *notifier {
	t.Helper()
	n := newNotifier(argv, every, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return n
}

// notifications returns the JSON objects the command appended to out.
func notifications(t *testing.T, out string) []map[string]any {
	t.Helper()
	b, _ := os.ReadFile(out)
	var ms []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("notification %q: %v", l, err)
		}
		ms = append(ms, m)
	}
	return ms
}

// A command that leaves a child holding its output (a notifier that forks
// into the background) does not hold up the next notification.
func TestNotifierChildKeepsOutput(t *testing.T) {
	dir := t.TempDir()
	out, pids := filepath.Join(dir, "out"), filepath.Join(dir, "pids")
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	n := startNotifier(t, []string{"sh", "-c", "cat >> " + out + "; sleep 600 & echo $! >> " + pids}, time.Nanosecond)
	n.send(Problem{Path: []byte("/a"), Class: Corrupt})
	waitFor(t, "the first notification", func() bool { return len(notifications(t, out)) == 1 })
	n.send(Problem{Path: []byte("/b"), Class: Corrupt})
	waitFor(t, "the second notification", func() bool { return len(notifications(t, out)) == 2 })
}

// Problems met within the interval are not dropped: once it is over, the
// last of them is sent with the count of the others, so every problem is
// either sent or counted, also when none follows.
func TestNotifierSendsSuppressedLater(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	n := startNotifier(t, []string{"sh", "-c", "cat >> " + out}, 300*time.Millisecond)
	for _, p := range []string{"/a", "/b", "/c"} {
		n.send(Problem{Path: []byte(p), Class: Corrupt})
	}
	told := func() int {
		ms := notifications(t, out)
		k := len(ms)
		for _, m := range ms {
			s, _ := m["suppressed"].(float64)
			k += int(s)
		}
		return k
	}
	waitFor(t, "all three problems told", func() bool { return told() == 3 })
	if ms := notifications(t, out); ms[len(ms)-1]["path"] != "/c" {
		t.Fatalf("the last notification is not of the last problem: %v", ms)
	}
}

// What the notifier holds when it stops is kept, and told by the next
// one once the interval is over: the last problem held, the others
// counted as suppressed.
func TestNotifierKeepsWhatItHolds(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	argv := []string{"sh", "-c", "cat >> " + out}
	var mu sync.Mutex
	var kept untold
	n := newNotifier(argv, time.Hour, slog.New(slog.DiscardHandler))
	n.keep = func(u untold) { mu.Lock(); kept = u; mu.Unlock() }
	n.load = func() untold { return untold{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.run(ctx) }()
	for _, p := range []string{"/a", "/b", "/c"} {
		n.send(Problem{Path: []byte(p), Class: Corrupt})
	}
	waitFor(t, "the first problem told", func() bool { return len(notifications(t, out)) == 1 })
	cancel()
	<-done
	mu.Lock()
	u := kept
	mu.Unlock()
	if u.Held == nil || string(u.Held.Path) != "/c" || u.Suppressed != 1 || u.Last.IsZero() {
		t.Fatalf("kept %+v; want /c held, 1 suppressed, the time of the last run", u)
	}
	next := newNotifier(argv, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	next.load = func() untold { return u }
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go next.run(ctx)
	waitFor(t, "the held problem told", func() bool { return len(notifications(t, out)) == 2 })
	if m := notifications(t, out)[1]; m["path"] != "/c" || m["suppressed"] != 1.0 {
		t.Errorf("the next run told %v; want /c with 1 suppressed", m)
	}
}
