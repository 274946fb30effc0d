package audit

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os/exec"
	"sync"
	"time"
	"unicode/utf8"
)

// notifyTimeout bounds one run of the on_problem command.
const notifyTimeout = 30 * time.Second

// notifier runs the on_problem command with a problem's JSON on its
// standard input, at most once every interval; the problems met in
// between are counted in the next run's "suppressed". It never blocks the
// audit: a problem that finds the queue full is only counted.
type notifier struct {
	argv  []string
	every time.Duration
	log   *slog.Logger
	ch    chan Problem

	mu         sync.Mutex
	suppressed int
	last       time.Time
}

func newNotifier(argv []string, every time.Duration, log *slog.Logger) *notifier {
	return &notifier{argv: argv, every: every, log: log, ch: make(chan Problem, 16)}
}

// send queues p for the command.
func (n *notifier) send(p Problem) {
	if len(n.argv) == 0 {
		return
	}
	select {
	case n.ch <- p:
	default:
		n.mu.Lock()
		n.suppressed++
		n.mu.Unlock()
	}
}

// run runs the command for queued problems until ctx ends.
func (n *notifier) run(ctx context.Context) {
	for {
		select {
		case p := <-n.ch:
			n.mu.Lock()
			if !n.last.IsZero() && time.Since(n.last) < n.every {
				n.suppressed++
				n.mu.Unlock()
				continue
			}
			n.last = time.Now()
			suppressed := n.suppressed
			n.suppressed = 0
			n.mu.Unlock()
			n.exec(ctx, p, suppressed)
		case <-ctx.Done():
			return
		}
	}
}

func (n *notifier) exec(ctx context.Context, p Problem, suppressed int) {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.argv[0], n.argv[1:]...)
	cmd.Stdin = bytes.NewReader(problemJSON(p, suppressed))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		n.log.Warn("on_problem command failed", "command", n.argv, "err", err, "output", out.String())
	}
}

// problemJSON is the JSON the on_problem command reads: the problem, with
// path_b64 instead of path for a name that is not UTF-8, and how many
// problems were not sent since the last run.
func problemJSON(p Problem, suppressed int) []byte {
	v := map[string]any{
		"state":        p.Class.String(),
		"recorded_key": p.RecordedKey,
		"observed_key": p.ObservedKey,
		"recorded":     hex.EncodeToString(p.Recorded),
		"observed":     hex.EncodeToString(p.Observed),
		"size":         p.Size,
		"seen":         p.Seen.UTC().Format(time.RFC3339Nano),
		"why":          p.Why,
		"suppressed":   suppressed,
	}
	if utf8.Valid(p.Path) {
		v["path"] = string(p.Path)
	} else {
		v["path_b64"] = base64.StdEncoding.EncodeToString(p.Path)
	}
	b, _ := json.Marshal(v)
	return append(b, '\n')
}
