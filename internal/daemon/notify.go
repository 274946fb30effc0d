package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/annexd/annexd/internal/sdnotify"
)

// notifyEvery is how often the systemd status line is brought up to date.
const notifyEvery = 5 * time.Second

// phase says what the daemon does before it serves the index.
func (a *App) phase() string {
	if a.calibrating.Load() {
		return "calibrating hashing"
	}
	return "setting up the hasher, the watches and the indexer"
}

// notify sends state lines to systemd (a no-op outside a notify unit).
func (a *App) notify(lines ...string) bool {
	if err := sdnotify.Notify(lines...); err != nil {
		a.log.Warn("cannot notify systemd", "err", err)
		return false
	}
	return true
}

// notifyProgress tells systemd that the daemon is ready, keeps its status
// line current while it runs, and says when it stops. While the daemon
// is idle it sleeps until its work changes.
func (a *App) notifyProgress(ctx context.Context) error {
	if os.Getenv(sdnotify.Env) == "" {
		return nil
	}
	last := a.summary()
	if !a.notify(sdnotify.Ready, sdnotify.Status(last)) {
		return nil
	}
	t := time.NewTicker(notifyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.notify(sdnotify.Stopping, sdnotify.Status("stopping: flushing the index"))
			return nil
		case <-t.C:
		}
		wake := a.work.wait()
		s, idle := a.summaryIdle()
		if s != last {
			if !a.notify(sdnotify.Status(s)) {
				return nil
			}
			last = s
		}
		if idle && !sleep(ctx, t, notifyEvery, wake) {
			a.notify(sdnotify.Stopping, sdnotify.Status("stopping: flushing the index"))
			return nil
		}
	}
}

// summary is one line on the daemon's state for systemctl status.
func (a *App) summary() string {
	s, _ := a.summaryIdle()
	return s
}

// summaryIdle is summary, and whether the indexer is idle.
func (a *App) summaryIdle() (string, bool) {
	p := a.ix.Progress()
	if p.Idle {
		files := int64(-1)
		if s, err := a.st.Stats(); err == nil {
			files = s.Files
		}
		return fmt.Sprintf("idle: %d files indexed", files), true
	}
	return fmt.Sprintf("indexing: %d files seen, %d hashed, %d queued", p.FilesSeen, p.FilesHashed, p.FilesQueued+p.Watching), false
}
