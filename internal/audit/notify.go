package audit

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os/exec"
	"sync"
	"time"
	"unicode/utf8"
)

// notifyTimeout bounds one run of the on_problem command.
const notifyTimeout = 30 * time.Second

// notifyWaitDelay is how long a finished command's output is read for:
// a child it leaves in the background may hold the pipe for ever.
const notifyWaitDelay = time.Second

// notifier runs the on_problem command with a problem's JSON on its
// standard input, at most once every interval. A problem met within the
// interval is held, and the last one held is sent once the interval is
// over with the count of the others in "suppressed". It never blocks the
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
	var held *Problem
	var due <-chan time.Time
	for {
		select {
		case p := <-n.ch:
			n.mu.Lock()
			if wait := n.every - time.Since(n.last); !n.last.IsZero() && wait > 0 {
				if held != nil {
					n.suppressed++
				}
				held = &p
				if due == nil {
					due = time.After(wait)
				}
				n.mu.Unlock()
				continue
			}
			n.mu.Unlock()
			n.exec(ctx, p)
		case <-due:
			due = nil
			p := *held
			held = nil
			n.exec(ctx, p)
		case <-ctx.Done():
			return
		}
	}
}

// exec runs the command for p, with the problems not sent since the last
// run counted, and starts the interval.
func (n *notifier) exec(ctx context.Context, p Problem) {
	n.mu.Lock()
	n.last = time.Now()
	suppressed := n.suppressed
	n.suppressed = 0
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.argv[0], n.argv[1:]...)
	cmd.Stdin = bytes.NewReader(problemJSON(p, suppressed))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = notifyWaitDelay
	if err := cmd.Run(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
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
