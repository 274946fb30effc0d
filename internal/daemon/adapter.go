package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/annexlink"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// adapter serves the API from the indexer and the store.
type adapter struct{ a *App }

var _ api.Index = (*adapter)(nil)

func (x *adapter) Roots() []string { return x.a.cfg.Roots }

var lookupStates = map[indexer.State]api.LookupState{
	indexer.Current:    api.StateCurrent,
	indexer.Pending:    api.StatePending,
	indexer.Missing:    api.StateMissing,
	indexer.NotRegular: api.StateNotRegular,
	indexer.Ignored:    api.StateIgnored,
	indexer.Unreadable: api.StateUnreadable,
	indexer.Corrupt:    api.StateCorrupt,
}

func (x *adapter) Lookup(ctx context.Context, path []byte, wait bool) (api.LookupResult, error) {
	r, err := x.a.ix.Lookup(ctx, string(path), wait)
	if errors.Is(err, indexer.ErrOutsideRoots) {
		return api.LookupResult{Path: path, State: api.StateOutsideRoots}, nil
	}
	if err != nil {
		return api.LookupResult{}, err
	}
	st, ok := lookupStates[r.State]
	if !ok {
		return api.LookupResult{}, fmt.Errorf("daemon: lookup state %v has no API name", r.State)
	}
	if st == api.StateNotRegular {
		if k, ok := annexlink.Key(string(path)); ok {
			return api.LookupResult{Path: path, State: api.StateAnnexLink, Key: k}, nil
		}
	}
	out := api.LookupResult{Path: path, State: st, Key: r.Key, Size: r.Size, Message: r.Message}
	if r.VerifiedAt != 0 {
		out.VerifiedAt = time.Unix(0, r.VerifiedAt)
	}
	return out, nil
}

// Backend implements api.Backender: the index holds this hash's digests.
func (x *adapter) Backend() key.Backend { return x.a.backend }

// Whereis lists the files with q's content in path order, marking the
// names of one inode (LinkOf) and the copies that share blocks
// (SharesWith) as far as the group's survey tells (whereisSurvey).
func (x *adapter) Whereis(ctx context.Context, q api.WhereisQuery, fn func(api.Location) error) error {
	paths, err := x.a.st.ByDigest(q.Backend, q.Digest)
	if err != nil {
		return err
	}
	slices.SortFunc(paths, bytes.Compare)
	var (
		firsts firstNames
		marks  *shareMarks
	)
	if len(paths) > 1 {
		if sv := x.whereisSurvey(q); sv != nil {
			marks = newShareMarks(sv)
		}
	}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, ok, err := x.a.st.Get(p)
		if err != nil {
			return err
		}
		if !ok || !rec.HasDigest() {
			continue // changed since ByDigest read it
		}
		loc, err := x.freshLocation(p, &rec)
		if err != nil {
			return err
		}
		loc.OutsideRoots = x.a.outsideRoot(p)
		loc.LinkOf = firsts.linkOf(rec.Dev, rec.Ino, p)
		if loc.LinkOf == nil && marks != nil {
			loc.SharesWith = marks.sharesWith(rec.Dev, rec.Ino, p)
		}
		if err := fn(loc); err != nil {
			return err
		}
	}
	return nil
}

// maxWhereisSurvey is the most inodes whereis surveys itself: a larger
// group is marked only once a survey is kept (dups makes one).
const maxWhereisSurvey = 256

// whereisSurvey returns the survey of q's group: the one the store
// keeps, or a new one, which the store is given to keep; nil for content
// that is not a duplicate group, has no bytes, or has too many copies.
func (x *adapter) whereisSurvey(q api.WhereisQuery) *store.Survey {
	g, ok, err := x.a.st.DupGroup(q.Backend, q.Digest, store.DupOptions{Brief: true})
	switch {
	case err != nil || !ok || g.Size == 0:
		return nil
	case g.Survey != nil:
		return g.Survey
	case g.Inodes > maxWhereisSurvey:
		return nil
	}
	return x.surveyOf(g, true)
}

// location describes a record as the index holds it, without looking at
// the file.
func location(p []byte, rec *store.Record) (api.Location, error) {
	k, err := key.FromDigest(rec.Backend, rec.Digest, rec.Size, filepath.Base(string(p)), key.ExtRule{})
	if err != nil {
		return api.Location{}, fmt.Errorf("daemon: key of %q: %w", p, err)
	}
	return api.Location{Path: p, Key: k, Size: rec.Size, State: rec.State.String()}, nil
}

// freshLocation is location with Stale set when a fresh lstat disagrees
// with the record or the record is racily clean.
func (x *adapter) freshLocation(p []byte, rec *store.Record) (api.Location, error) {
	loc, err := location(p, rec)
	if err != nil {
		return loc, err
	}
	loc.Stale = !x.a.ix.Unchanged(string(p), rec)
	return loc, nil
}

// Dups lists the store's groups with what their surveys of block sharing
// found (surveyOf). Unless q.Outside, members outside the roots are left
// out, the figures count the inodes left, and groups left with fewer than
// two are skipped; with q.Paths, groups with no member at or below one
// are skipped. The limit then counts the groups sent.
func (x *adapter) Dups(ctx context.Context, q api.DupQuery, fn func(api.DupGroup) error) error {
	// group reads only what the digest index keeps of each record.
	opts := store.DupOptions{MinSize: q.MinSize, After: q.After, Limit: q.Limit, Brief: true}
	skips := !q.Outside || len(q.Paths) > 0
	if skips {
		opts.Limit = 0
	}
	sent := 0
	var marks shareMarks // one for every group: its room is used again
	return x.a.st.Dups(ctx, opts, func(g store.Group) error {
		if skips && q.Limit > 0 && sent == q.Limit {
			return store.ErrStop
		}
		if !anyWithin(g.Members, q.Paths) {
			return nil
		}
		marks.reset(x.surveyOf(g, q.Resurvey))
		out, ok, err := x.group(g, &marks, q.Outside)
		if err != nil || !ok {
			return err
		}
		sent++
		return fn(out)
	})
}

// surveyOf returns the survey of g's blocks: the one the store keeps,
// unless again, or a new one, which the store is given to keep.
func (x *adapter) surveyOf(g store.Group, again bool) *store.Survey {
	if g.Survey != nil && !again {
		return g.Survey
	}
	sv, seen := dedup.SurveyGroup(g)
	x.a.st.SubmitSurvey(g.Backend, g.Digest, sv, seen, nil)
	return &sv
}

// anyWithin reports whether a member is at or below one of paths; no
// paths: true.
func anyWithin(ms []store.Member, paths [][]byte) bool {
	if len(paths) == 0 {
		return true
	}
	for _, m := range ms {
		for _, p := range paths {
			if roots.Within(string(m.Path), string(p)) {
				return true
			}
		}
	}
	return false
}

// group turns a store group and what its survey says (marks, reset to
// it) into an API group; ok is false when, without the members outside
// the roots, it is no longer a duplicate group.
func (x *adapter) group(g store.Group, marks *shareMarks, withOutside bool) (out api.DupGroup, ok bool, err error) {
	out = api.DupGroup{
		Backend: g.Backend.WithExtension(), Digest: g.Digest, Size: g.Size, Cursor: g.Cursor,
		Files: make([]api.Location, 0, len(g.Members)), SurveyedAt: time.Unix(0, marks.sv.At),
	}
	slices.SortFunc(g.Members, func(a, b store.Member) int { return bytes.Compare(a.Path, b.Path) })
	var (
		firsts firstNames
		keys   keyCache
	)
	for _, m := range g.Members {
		outside := x.a.outsideRoot(m.Path)
		if outside && !withOutside {
			continue
		}
		loc, err := keys.location(m.Path, &m.Record)
		if err != nil {
			return out, false, err
		}
		loc.OutsideRoots = outside
		loc.LinkOf = firsts.linkOf(m.Record.Dev, m.Record.Ino, m.Path)
		if loc.LinkOf == nil {
			loc.SharesWith = marks.sharesWith(m.Record.Dev, m.Record.Ino, m.Path)
		}
		out.Files = append(out.Files, loc)
	}
	out.Copies = firsts.inodes()
	if out.Copies < 2 {
		return out, false, nil
	}
	out.Duplicate = g.Size * int64(out.Copies-1)
	out.Reclaimable, out.Physical, out.Unsurveyed = marks.figures()
	return out, true, nil
}

// shareMarks marks the members of a group that share blocks with an
// earlier one, and counts what the survey says of the inodes listed.
type shareMarks struct {
	sv    *store.Survey
	marks []shareMark // by survey index
}

// shareMark is what shareMarks knows of one inode of the survey: whether
// a name of it is listed and, for the first inode of a physical copy, its
// first name listed.
type shareMark struct {
	listed bool
	first  []byte
}

func newShareMarks(sv *store.Survey) *shareMarks {
	var s shareMarks
	s.reset(sv)
	return &s
}

// reset makes s mark by sv, with nothing listed yet.
func (s *shareMarks) reset(sv *store.Survey) {
	n := len(sv.Inodes)
	s.sv, s.marks = sv, slices.Grow(s.marks[:0], n)[:n]
	clear(s.marks)
}

// sharesWith returns the first name listed of another inode whose blocks
// (dev, ino) shares, or nil when it is the first of its physical copy
// (then recorded) or the survey does not know it.
func (s *shareMarks) sharesWith(dev, ino uint64, path []byte) []byte {
	i := s.sv.Find(dev, ino)
	if i < 0 {
		return nil
	}
	s.marks[i].listed = true
	c := &s.marks[s.sv.Inodes[i].Copy]
	if c.first != nil {
		return c.first
	}
	c.first = path
	return nil
}

// figures returns the reclaimable bytes, the physical copies and the
// copies not surveyed among the inodes listed.
func (s *shareMarks) figures() (reclaimable int64, physical, unsurveyed int) {
	for i, m := range s.marks {
		if m.first != nil { // the first name listed of a physical copy
			physical++
		}
		if m.listed && !s.sv.Inodes[i].Known {
			unsurveyed++
		}
	}
	return s.sv.Reclaimable(func(i int) bool { return s.marks[i].listed }), physical, unsurveyed
}

// keyCache hands the last key made for a group's member to the next
// member with the same backend, size and extensions: a key depends on the
// base name only through what follows its first dot (key.Extension), and
// the digest is the group's.
type keyCache struct {
	b      key.Backend
	size   int64
	suffix []byte
	k      key.Key
	ok     bool
}

func (c *keyCache) location(p []byte, rec *store.Record) (api.Location, error) {
	sfx := extensions(p)
	if c.ok && c.b == rec.Backend && c.size == rec.Size && bytes.Equal(c.suffix, sfx) {
		return api.Location{Path: p, Key: c.k, Size: rec.Size, State: rec.State.String()}, nil
	}
	loc, err := location(p, rec)
	if err == nil {
		*c = keyCache{b: rec.Backend, size: rec.Size, suffix: sfx, k: loc.Key, ok: true}
	}
	return loc, err
}

// extensions returns what key.Extension reads of a path: its base name
// from the first dot after any leading dots, or nothing.
func extensions(p []byte) []byte {
	base := bytes.TrimLeft(p[bytes.LastIndexByte(p, '/')+1:], ".")
	if dot := bytes.IndexByte(base, '.'); dot >= 0 {
		return base[dot:]
	}
	return nil
}

// firstNames remembers the first listed name of each inode of a group.
// Most groups have a few members: a list is searched until it grows long,
// then a map takes over.
type firstNames struct {
	list []firstName
	m    map[[2]uint64][]byte
}

type firstName struct {
	in   [2]uint64 // dev, ino
	path []byte
}

// maxFirstList is how many inodes firstNames searches in a list.
const maxFirstList = 16

// linkOf returns the first name met of (dev, ino), or nil when path is
// that first name, which it then records.
func (f *firstNames) linkOf(dev, ino uint64, path []byte) []byte {
	in := [2]uint64{dev, ino}
	if f.m == nil {
		for _, e := range f.list {
			if e.in == in {
				return e.path
			}
		}
		if len(f.list) < maxFirstList {
			f.list = append(f.list, firstName{in, path})
			return nil
		}
		f.m = make(map[[2]uint64][]byte, 2*maxFirstList)
		for _, e := range f.list {
			f.m[e.in] = e.path
		}
	}
	if p, ok := f.m[in]; ok {
		return p
	}
	f.m[in] = path
	return nil
}

// inodes is the number of distinct inodes recorded.
func (f *firstNames) inodes() int {
	if f.m != nil {
		return len(f.m)
	}
	return len(f.list)
}

// Forget implements api.Forgetter.
func (x *adapter) Forget(ctx context.Context, dir []byte, dryRun bool) (api.ForgetResult, error) {
	return x.a.forget(ctx, dir, dryRun)
}

func (x *adapter) Status(ctx context.Context) (api.Status, error) {
	a := x.a
	if a.ix.Progress().Idle {
		_ = a.st.Settle(ctx) // an idle daemon's counts are complete; a failed merge is logged
	}
	s, err := a.st.Stats()
	if err != nil {
		return api.Status{}, err
	}
	p := a.ix.Progress()
	ws := a.w.Status()
	out := x.baseStatus(s)
	out.Pending, out.Idle = int64(p.FilesQueued+p.Watching), p.Idle
	out.Scan = api.ScanProgress{
		Running:         p.ScansPending > 0,
		FilesSeen:       p.FilesSeen,
		BytesSeen:       p.BytesSeen,
		FilesHashed:     p.FilesHashed,
		BytesHashed:     p.BytesHashed,
		FilesQueued:     int64(p.FilesQueued),
		BytesQueued:     p.BytesQueued,
		EstimateSeconds: p.Remaining.Seconds(),
	}
	out.Watcher = api.WatcherStatus{Healthy: true}
	out.OutsideRoots, out.OutsideRootsChecked = a.outsideStatus()
	out.Away = a.awayStatus(ctx)
	out.Dedup = a.dedup.status()
	out.Hub = a.link.Status()
	out.Audit = a.auditSummary()
	for _, r := range ws.Roots {
		rs := api.RootStatus{Path: r.Root, ScanDone: a.ix.RootScanned(r.Root), Watched: !r.Degraded, Degraded: r.Degraded,
			Overflows: r.Overflows, LastOverflow: r.LastOverflow, LastRescan: r.LastRescan,
			RescanPending: !r.LastOverflow.IsZero() && r.LastRescan.Before(r.LastOverflow)}
		out.Watcher.Watches += int64(r.Watches)
		out.Watcher.WatchesNeeded += int64(r.WatchesNeeded)
		out.Watcher.WatchLimit = int64(r.MaxUserWatches)
		if r.Degraded {
			rs.Reason = fmt.Sprintf("%d directories have no watch; run: %s", r.Unwatched, r.Sysctl)
			out.Watcher.Healthy = false
			out.Watcher.Degraded = append(out.Watcher.Degraded, r.Root)
			out.Watcher.Message = "inotify watch limit reached; run: " + r.Sysctl
		}
		if r.Away != "" {
			rs.Watched, rs.Away = !r.RootMissing && !r.Degraded, r.Away
			out.Watcher.Healthy = false
			out.Watcher.Message = r.Root + ": " + r.Away
		}
		if rs.RescanPending && !r.Degraded {
			out.Watcher.Healthy = false // events were lost until the rescan
			out.Watcher.Message = "inotify queue overflowed (events lost); a rescan of " + r.Root + " is pending"
		}
		out.Roots = append(out.Roots, rs)
	}
	if c := a.calib; c != nil {
		out.Calibration = &api.Calibration{
			Summary: fmt.Sprintf("sha256 %s, inline up to %d bytes, %d pool workers, external %s",
				c.Policy.SHA256, c.Policy.InlineMax, c.Policy.Workers, externalSummary(c.Policy.External, c.Policy.ExternalMin)),
			Params: map[string]string{
				"sha256":       string(c.Policy.SHA256),
				"inline_max":   fmt.Sprint(c.Policy.InlineMax),
				"workers":      fmt.Sprint(c.Policy.Workers),
				"external":     c.Policy.External,
				"external_min": fmt.Sprint(c.Policy.ExternalMin),
				"took_ms":      fmt.Sprintf("%.0f", c.TookMs),
			},
			MeasuredAt: c.At.Truncate(time.Millisecond),
		}
	}
	markUnreadable(&out, ws.Roots)
	markBacklog(&out, a.st.Backlog())
	out.Scan.Walk = walkProgress(p.Walk)
	return out, nil
}

// baseStatus is what every status says: the daemon and what the index
// holds.
func (x *adapter) baseStatus(s store.Stats) api.Status { return x.a.baseStatus(s) }

func (a *App) baseStatus(s store.Stats) api.Status {
	return api.Status{Version: a.opts.Version, GoVersion: goVersion, PID: os.Getpid(), StartedAt: a.started,
		IndexPath: a.cfg.Index, SchemaVersion: int(s.SchemaVer), Files: s.Files, Bytes: s.Bytes}
}

// starting is the daemon before setup is done, for the API server.
type starting struct{ a *App }

func (x starting) Phase() string { return x.a.phase() }

// Status is what the index holds, and what the daemon is doing.
func (x starting) Status(context.Context) (api.Status, error) {
	a := x.a
	s, err := a.st.Stats()
	if err != nil {
		return api.Status{}, err
	}
	out := a.baseStatus(s)
	out.Starting = a.phase()
	out.Watcher = api.WatcherStatus{Message: "not watching yet: annexd is starting"}
	for _, r := range a.cfg.Roots {
		out.Roots = append(out.Roots, api.RootStatus{Path: r})
	}
	return out, nil
}

func externalSummary(prog string, min int64) string {
	if prog == "" || min == 0 {
		return "never"
	}
	return fmt.Sprintf("%s from %d bytes", filepath.Base(prog), min)
}

// Sync implements api.Syncer: the watcher has read every change made
// before the call.
func (x *adapter) Sync(ctx context.Context) error { return x.a.w.Sync(ctx) }

// WaitIdle returns once the indexer, the watcher and the hand-off
// between them are idle.
func (x *adapter) WaitIdle(ctx context.Context) error { return x.a.ix.WaitIdle(ctx) }

// awayStatus lists the file systems whose records are on the shelf.
func (a *App) awayStatus(ctx context.Context) []api.AwayFileSystem {
	fss, counts, err := a.ix.Away(ctx)
	if err != nil {
		a.log.Warn("cannot list the file systems away", "err", err)
		return nil
	}
	var out []api.AwayFileSystem
	for _, fs := range fss {
		af := api.AwayFileSystem{ID: fmt.Sprintf("%016x", fs.ID), Key: fs.Key, Type: fs.Type, Source: fs.Source,
			Point: fs.Point, Records: int64(counts[fs.ID])}
		if fs.LastSeen > 0 {
			af.LastSeen = time.Unix(0, fs.LastSeen)
		}
		out = append(out, af)
	}
	return out
}
