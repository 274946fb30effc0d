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

	"github.com/annexd/annexd/store"
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
// audit: a problem that finds the queue full is only counted. What it
// holds is kept (keep) as it changes and taken back (load) when it runs
// again, so that a stop within the interval loses no problem: the held
// one is sent once the interval is over, with the others counted.
type notifier struct {
	argv  []string
	every time.Duration
	log   *slog.Logger
	ch    chan Problem
	keep  func(untold) // nil: nothing is kept
	load  func() untold

	mu         sync.Mutex
	suppressed int
	last       time.Time
}

// untold is what the notifier has not told yet: the problem it holds
// for the end of the interval, the count of the others, and when the
// command last ran.
type untold struct {
	Held       *Problem  `json:"held,omitempty"`
	Suppressed int       `json:"suppressed,omitempty"`
	Last       time.Time `json:"last,omitzero"`
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

// run runs the command for queued problems until ctx ends, beginning
// with what an earlier run left untold.
func (n *notifier) run(ctx context.Context) {
	var held *Problem
	var due <-chan time.Time
	if n.load != nil && len(n.argv) > 0 {
		u := n.load()
		n.mu.Lock()
		n.suppressed += u.Suppressed
		n.last = u.Last
		n.mu.Unlock()
		if held = u.Held; held != nil {
			due = time.After(max(n.every-time.Since(u.Last), 0))
		}
	}
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
				u := untold{Held: held, Suppressed: n.suppressed, Last: n.last}
				n.mu.Unlock()
				n.kept(u)
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
			n.keepQueued(held)
			return
		}
	}
}

// keepQueued keeps, at the end of a run, the problems still queued as if
// they had come within the interval: the last is held, the others are
// counted, and the next run tells them.
func (n *notifier) keepQueued(held *Problem) {
	queued := false
	for {
		select {
		case p := <-n.ch:
			if held != nil {
				n.mu.Lock()
				n.suppressed++
				n.mu.Unlock()
			}
			held, queued = &p, true
			continue
		default:
		}
		break
	}
	if queued {
		n.mu.Lock()
		u := untold{Held: held, Suppressed: n.suppressed, Last: n.last}
		n.mu.Unlock()
		n.kept(u)
	}
}

// kept keeps u, if the notifier keeps anything.
func (n *notifier) kept(u untold) {
	if n.keep != nil {
		n.keep(u)
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
	n.mu.Lock()
	u := untold{Suppressed: n.suppressed, Last: n.last}
	n.mu.Unlock()
	n.kept(u) // told: only what came meanwhile is left
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

// metaUntold is the meta name of what the notifier has not told.
const metaUntold = "audit/untold"

// untoldIn keeps what the notifier has not told in st's meta, and takes it
// back: keep writes u, or drops what was kept when u holds nothing (the
// next start tells it); load reads what an earlier run did not tell.
func untoldIn(st Store, log *slog.Logger) (keep func(untold), load func() untold) {
	return func(u untold) { keepUntold(st, log, u) }, func() untold { return loadUntold(st) }
}

func keepUntold(st Store, log *slog.Logger, u untold) {
	c := store.Change{Op: store.OpDeleteMeta, Path: []byte(metaUntold)}
	if u.Held != nil || u.Suppressed > 0 {
		b, err := json.Marshal(&u)
		if err != nil {
			return
		}
		c = store.Change{Op: store.OpPutMeta, Path: []byte(metaUntold), Value: b}
	}
	if err := commit(st, c); err != nil {
		log.Warn("cannot keep the problems not told yet", "err", err)
	}
}

func loadUntold(st Store) untold {
	var u untold
	if b, ok, err := st.GetMeta(metaUntold); err == nil && ok {
		_ = json.Unmarshal(b, &u) // unreadable: nothing to tell
	}
	return u
}
