package watcher

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// maxProblems caps the unreadable directories a RootStatus lists.
const maxProblems = 10

// denials are the directories of a root that cannot be read or watched.
type denials struct {
	why   map[string]string // directory → the error
	list  []DirProblem      // the published part of why; nil when it changed
	log   *slog.Logger
	retry time.Duration // Options.DeniedRetry, for the log
}

func (d *denials) clear() {
	clear(d.why)
	d.list = nil
}

// DirProblem is a directory the watcher cannot read or watch, and why.
type DirProblem struct {
	Path   string
	Reason string // the error, e.g. "permission denied"
}

// unreadableErr reports whether err means that a directory exists but
// cannot be read or watched: any error but its absence or a watch limit.
func unreadableErr(err error) bool {
	return err != nil && !isLimit(err) && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR)
}

// deny records that directory d cannot be read or watched. Its subtree is
// unknown until a retry (retryDenied) or an event on d finds it readable.
func (dn *denials) deny(d string, err error) {
	reason := err.Error()
	var errno unix.Errno
	if errors.As(err, &errno) {
		reason = errno.Error()
	}
	if _, known := dn.why[d]; !known {
		dn.log.Warn("cannot read directory; its records are kept and it is tried again periodically",
			"path", d, "err", err, "retry_every", dn.retry)
		dn.list = nil
	}
	dn.why[d] = reason
}

// undeny forgets that d was unreadable.
func (dn *denials) undeny(d string) {
	if _, ok := dn.why[d]; ok {
		delete(dn.why, d)
		dn.list = nil
	}
}

// retryDenied tries again to watch and read every directory that could
// not be, and emits a Rescan for each that now can.
func (r *root) retryDenied(ctx context.Context) bool {
	if r.fsw == nil {
		return true
	}
	tops := make([]string, 0, len(r.denied.why))
	for p := range r.denied.why {
		tops = append(tops, p)
	}
	slices.Sort(tops)
	for _, p := range tops {
		if _, err := listDirs(p, p == r.path); err != nil {
			continue // still unreadable, or gone: an event or a rescan tells
		}
		if _, still := r.denied.why[p]; !still {
			continue // covered by a directory above, retried just now
		}
		r.denied.undeny(p)
		r.dropTree(p)
		r.addTree(p)
		if _, still := r.denied.why[p]; still {
			continue
		}
		r.log.Info("directory readable again", "path", p)
		if !r.emit(ctx, Event{Kind: Rescan, Path: p, Reason: ReasonDegraded}) {
			return false
		}
	}
	return true
}

// problems returns the directories to publish, sorted, at most
// maxProblems; the list is kept until the set changes.
func (d *denials) problems() []DirProblem {
	if d.list != nil || len(d.why) == 0 {
		return d.list
	}
	paths := make([]string, 0, len(d.why))
	for p := range d.why {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, strings.Compare)
	out := make([]DirProblem, 0, min(len(paths), maxProblems))
	for _, p := range paths[:min(len(paths), maxProblems)] {
		out = append(out, DirProblem{Path: p, Reason: d.why[p]})
	}
	d.list = out
	return out
}
