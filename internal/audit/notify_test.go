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
