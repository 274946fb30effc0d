// Package daemon wires annexd together: it opens the index, calibrates the
// hasher (or reuses a stored calibration), builds the parts, and runs the
// store's writer, the watcher, the indexer, the audit, deduplication, the
// hub link and the API server under one errgroup until its context ends,
// then shuts them down in order so that every acknowledged change is on
// disk.
//
// It holds no answers of its own: the API server is given its parts
// (apiserver.Parts): internal/query for the index's questions and the
// audit's answers, internal/deduppart for deduplication, internal/hublink
// for the hub. What stays here is the order of the start, the daemon's
// own loops (the systemd status line, the progress log, the watch for
// damage) and the one seam between the indexer and the audit (audit.go).
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/api/apiserver"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/calibrate"
	_ "github.com/annexd/annexd/hasher/simd" // sha256-simd, a candidate of the calibration
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/internal/deduppart"
	"github.com/annexd/annexd/internal/diskprocs"
	"github.com/annexd/annexd/internal/durable"
	"github.com/annexd/annexd/internal/gcpace"
	"github.com/annexd/annexd/internal/heal"
	"github.com/annexd/annexd/internal/hublink"
	"github.com/annexd/annexd/internal/ignore"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/internal/logrepeat"
	"github.com/annexd/annexd/internal/query"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/internal/sdnotify"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

// Errors returned by New and Run.
var (
	// ErrRoot: a root is missing, not a directory, or overlaps another.
	ErrRoot = roots.ErrRoot
	// ErrNoRoots: nothing to watch.
	ErrNoRoots = errors.New("daemon: no roots to index")
	// ErrLocked: another annexd uses the index.
	ErrLocked = errors.New("daemon: index in use")
	// ErrHubConfig: the [hub] or [publish] section cannot work.
	ErrHubConfig = hublink.ErrConfig
)

// storeBatch caps a group commit. Every group rewrites the pages its
// changes touch, and a first scan's digest inserts land on random pages,
// so larger groups write less per file: on the corpus 1,024 changes a group
// made 126 commits and 60,000 page writes, 4,096 made 68 and 32,000. The
// earlier measurement that preferred 1,024 ran under a 64 MiB memory limit,
// where the larger groups' dirty pages kept the collector running. On a
// large index the store shrinks its groups by the nodes they touch.
const storeBatch = 4096

// maxDataWindow caps the window of records re-verified after an unclean
// end. Where the kernel never writes back on its own the hasher's window
// is endless, but then the hasher syncs every file it hashes.
const maxDataWindow = 10 * time.Minute

// testDataWindowEnv, when set in the environment to a duration, replaces
// the data window of records re-verified after an unclean end. It is for
// the end-to-end tests, which would otherwise sleep through a minute's
// window before a kill; a window shorter than the kernel's writeback can
// give keys of bytes a power cut lost, so annexd logs a warning.
const testDataWindowEnv = "ANNEXD_TEST_DATA_WINDOW"

// testBudgetEnv, when set in the environment to a duration, gives the
// calibration that much time instead of calibrate.DefaultBudget: the tests
// that need a complete calibration run beside others, which a second
// does not survive.
const testBudgetEnv = "ANNEXD_TEST_CALIBRATION_BUDGET"

func testBudget() time.Duration {
	d, _ := time.ParseDuration(os.Getenv(testBudgetEnv))
	return max(d, 0)
}

// dataWindow is the store's data window (store.Options.DataWindow).
func (a *App) dataWindow() time.Duration {
	w := min(durable.DataWindow(), maxDataWindow)
	if v := os.Getenv(testDataWindowEnv); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			a.log.Warn("the data window is set by the environment, for tests; keys may name bytes a power cut loses",
				"env", testDataWindowEnv, "window", d, "kernel_window", w)
			return d
		}
	}
	return w
}

// calibrationMeta is the store meta key of the stored calibration.
const calibrationMeta = "hasher.calibration"

// Options are settings that are not part of the config file.
type Options struct {
	// Version is reported by the API.
	Version string
	// ExitWhenIdle stops the daemon once the initial scan is done and
	// nothing is pending (benchmarks, one-shot indexing).
	ExitWhenIdle bool
	// NoDataSync hashes recently written files without making their data
	// durable first (hasher.Policy.SyncWindow < 0): only for the power-cut
	// tests and benchmarks that show what the sync guards against.
	NoDataSync bool
	// Registry receives the daemon's metrics and is served on /metrics;
	// nil makes a fresh one.
	Registry *prometheus.Registry
	// PaceGC lets the collector run less often while the indexer works in
	// bulk (package gcpace). It changes the whole process, so only the
	// program sets it.
	PaceGC bool
	// DiskProcs gives the Go runtime more threads while the daemon reads
	// from storage (package diskprocs). It changes the whole process, so
	// only the program sets it.
	DiskProcs bool
}

// App is one annexd instance.
type App struct {
	cfg   config.Config // Roots resolved
	opts  Options
	log   *slog.Logger
	roots roots.Set
	// repeats logs the first error from a damaged or full index, and
	// counts the rest.
	repeats logrepeat.Filter

	backend key.Backend
	started time.Time

	st    *store.Store
	h     *hasher.Hasher
	w     *watcher.Watcher
	ix    *indexer.Indexer
	srv   *apiserver.Server
	calib *calibrate.Calibration
	dedup *deduppart.Part
	// audit verifies the index; set in setup, before the indexer runs,
	// and handed the indexer's findings (audit.go).
	audit    *audit.Auditor
	findings findings
	// heal heals the audit's corrupt findings (heal.go); set in setup.
	heal *heal.Part
	// work wakes what looks at the daemon's work while it works.
	work activity

	// query answers the API's questions; set in setup.
	query *query.Index

	// syncDir holds the watcher's Sync cookies ("" if it could not be
	// made).
	syncDir string
	// calibrating says whether the hasher is being calibrated.
	calibrating atomic.Bool
	// calibReused says the stored calibration was used, not measured anew.
	calibReused atomic.Bool

	link *hublink.Link // the hub and the publisher; nil without them
}

// New checks a filled, validated config. It fails when a root does not
// exist or is not a directory; it opens nothing. The roots' symlinks are
// resolved here, once: everything after indexes under the resolved paths.
func New(cfg config.Config, log *slog.Logger, opts Options) (*App, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	repeats := logrepeat.New(log.Handler(), store.ErrCorrupt, store.ErrNoSpace)
	log = slog.New(repeats)
	if len(cfg.Roots) == 0 {
		return nil, ErrNoRoots
	}
	set, err := roots.Resolve(cfg.Roots)
	if err != nil {
		return nil, err
	}
	cfg.Roots = set.Paths()
	b, err := cfg.BackendValue()
	if err != nil {
		return nil, err
	}
	if !hasher.Supported(b) {
		return nil, fmt.Errorf("daemon: backend %s cannot be hashed by this build", b)
	}
	if err := checkAudit(&cfg); err != nil {
		return nil, err
	}
	if err := checkNetwork(&cfg); err != nil {
		return nil, err
	}
	l, err := hublink.New(cfg, log)
	if err != nil {
		return nil, err
	}
	return &App{cfg: cfg, opts: opts, log: log, repeats: repeats, backend: b, roots: set, link: l}, nil
}

// Run runs the daemon until ctx ends (or, with ExitWhenIdle, until it is
// idle), then flushes pending writes and returns. It returns an error when a
// part cannot start or fails.
func (a *App) Run(ctx context.Context) error {
	a.started = time.Now()
	st, err := a.openStore()
	if err != nil {
		return err
	}
	a.st = st
	defer st.Close()
	a.dropChanges()
	defer a.runWriter(ctx)()
	if dir, err := makeSyncDir(a.cfg.Index); err != nil {
		a.log.Warn("cannot make the sync directory; status --wait may answer before recent changes are seen",
			"path", dir, "err", err)
	} else {
		a.syncDir = dir
		defer a.removeSyncDir()
	}
	// The API listens before the slow part of the start (calibration):
	// status answers "starting" at once, and the rest 503 until ready.
	reg := a.registry()
	if err := a.listen(reg); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	runCtx, stop := context.WithCancel(gctx)
	defer stop()
	g.Go(func() error { return a.srv.Run(runCtx) })
	a.notify(sdnotify.Status("starting: " + a.phase()))
	if err := a.setup(runCtx, reg); err != nil {
		stop()
		g.Wait()
		return err
	}
	defer a.h.Close()
	a.srv.Ready(a.parts())
	a.log.Info("annexd started", "roots", a.cfg.Roots, "given_as", a.roots.Aliases(), "index", a.cfg.Index, "socket", a.cfg.Socket,
		"backend", a.backend.String(), "version", a.opts.Version)
	a.runParts(runCtx, g, stop)
	return a.stopped(g.Wait())
}

// openStore opens the index.
func (a *App) openStore() (*store.Store, error) {
	st, err := store.Open(a.cfg.Index, store.Options{Logger: a.log.With("part", "store"), MaxBatch: storeBatch,
		DataWindow: a.dataWindow(), Changes: a.cfg.Linked(), Feed: feedOptions(a.cfg.Changes)})
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("%w: %w (is another annexd running? stop it, or give this one its own --index)", ErrLocked, err)
	}
	return st, err
}

// runWriter runs the store's writer until the function it returns is
// called: after everything that writes has stopped, even when ctx ended
// long before.
func (a *App) runWriter(ctx context.Context) (stop func()) {
	storeCtx, stopStore := context.WithCancel(context.WithoutCancel(ctx))
	storeDone := make(chan error, 1)
	go func() { storeDone <- a.st.Run(storeCtx) }()
	return func() {
		stopStore()
		if err := <-storeDone; err != nil {
			a.log.Error("index writer failed", "err", err)
		}
	}
}

// runParts runs the parts under g until ctx ends; stop ends them all
// (ExitWhenIdle).
func (a *App) runParts(ctx context.Context, g *errgroup.Group, stop func()) {
	g.Go(func() error { return a.ix.Run(ctx) })
	g.Go(func() error { return a.w.Run(ctx) })
	g.Go(func() error { return a.ix.Follow(ctx, a.w) })
	g.Go(func() error { return a.notifyProgress(ctx) })
	g.Go(func() error { return a.logProgress(ctx) })
	g.Go(func() error { a.query.CheckOutside(ctx); return nil })
	g.Go(func() error { return a.watchDamage(ctx) })
	g.Go(func() error { return a.dedup.Run(ctx) })
	g.Go(func() error { return a.dedup.RunSurveys(ctx) })
	g.Go(func() error { return a.audit.Run(ctx) })
	g.Go(func() error { return a.heal.Run(ctx) })
	g.Go(func() error { a.relayIndexer(ctx); return nil })
	if a.opts.PaceGC {
		g.Go(func() error {
			// Bulk work keeps the collector's settings (GOGC=100 under
			// the program's soft limit): GOGC=200 under 128 MiB bought
			// no CPU measurable beside it and cost 40-50 MiB of peak
			// RssAnon (BENCHMARKS.md). Run still hands the freed memory
			// back once the work ends.
			gcpace.Run(ctx, gcpace.Options{Busy: a.bulk, Idle: a.ixResting, Wake: a.ix.WorkChanged,
				Percent: 100, Limit: debug.SetMemoryLimit(-1)})
			return nil
		})
	}
	if a.opts.DiskProcs {
		g.Go(func() error {
			if err := diskprocs.Run(ctx, diskprocs.Options{Idle: a.resting, Wake: a.work.wait}); err != nil {
				a.log.Info("GOMAXPROCS stays fixed: the process's I/O counters cannot be read", "err", err)
			}
			return nil
		})
	}
	a.link.Start(ctx, g, a.st)
	if a.opts.ExitWhenIdle {
		g.Go(func() error {
			if a.ix.WaitIdle(ctx) == nil {
				a.log.Info("idle; exiting as asked", "took", time.Since(a.started).Round(time.Millisecond))
				stop()
			}
			return nil
		})
	}
}

// watchDamage returns an error once a read or a write met damage in the
// index. The error ends the daemon's errgroup, so a damaged index is
// neither served nor written (the store refuses writes from then on).
func (a *App) watchDamage(ctx context.Context) error {
	select {
	case <-a.st.Damaged():
		return fmt.Errorf("daemon: %w", a.st.Damage())
	case <-ctx.Done():
		return nil
	}
}

// stopped logs the end of a run that ended with err, and returns err with
// what the log left out.
func (a *App) stopped(err error) error {
	if n := a.repeats.Dropped(store.ErrCorrupt); n > 0 && errors.Is(err, store.ErrCorrupt) {
		err = fmt.Errorf("%w (%d more errors from the same damage were not logged)", err, n)
	}
	if n := a.repeats.Dropped(store.ErrNoSpace); n > 0 {
		a.log.Warn("more writes failed for lack of space and were not logged; the next scan records their files",
			"count", n)
	}
	p := a.ix.Progress()
	a.log.Info("annexd stopped", "files_hashed", p.FilesHashed, "bytes_hashed", p.BytesHashed,
		"uptime", time.Since(a.started).Round(time.Millisecond))
	return err
}

// dropChanges removes a change log left from a run with a hub: nothing
// follows it now, and a later link resends the index whole anyway.
func (a *App) dropChanges() {
	if a.cfg.Linked() {
		return
	}
	if err := a.st.DropChanges(); err != nil {
		a.log.Warn("cannot drop the change log of an earlier hub link", "err", err)
	}
}

// registry is the metrics registry the API serves.
func (a *App) registry() *prometheus.Registry {
	reg := a.opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return reg
}

// listen builds the API server and binds its socket.
func (a *App) listen(reg *prometheus.Registry) error {
	var err error
	a.srv, err = apiserver.NewServer(apiserver.Config{
		Starting:    query.Starting{Store: a.st, About: a.about(), Roots: a.cfg.Roots, Doing: a.phase},
		RootAliases: a.roots.Aliases(),
		Socket:      a.cfg.Socket,
		TCPAddr:     a.cfg.API.TCP,
		Token:       a.cfg.API.Token,
		Version:     a.opts.Version,
		Logger:      a.log.With("part", "api"),
		Registerer:  reg,
		Gatherer:    reg,
		Page:        a.pageConfig(),
	})
	if err != nil {
		return err
	}
	return a.srv.Listen()
}

// pageConfig is the web page's listener: TLS with the hub's certificate
// when the config places it beyond loopback (config.UI).
func (a *App) pageConfig() apiserver.PageConfig {
	p := apiserver.PageConfig{Listen: a.cfg.UI.Listen, ListenKey: "ui.listen"}
	if host, _, err := net.SplitHostPort(p.Listen); err == nil && !isLoopback(host) {
		p.TLSCert, p.TLSKey = a.cfg.Hub.TLSCert, a.cfg.Hub.TLSKey
	}
	return p
}

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// parts are what the API serves once setup is done.
func (a *App) parts() apiserver.Parts {
	p := apiserver.Parts{Index: a.query, Audit: query.NewAudit(a.audit), Heal: a.heal, Dedup: a.dedup, Have: a.haver(),
		DirDups: query.NewDirDups(a.query), Changes: changeFeed(a.st), Tree: query.NewTree(a.query)}
	if a.link != nil {
		p.Hub = a.link
	}
	return p
}

// maxAutoWorkers bounds the indexer's workers when the config leaves them
// to the hasher: 128 small files of up to 64 KiB held for the lanes are
// 8 MiB, well within the daemon's soft memory limit on any machine.
const maxAutoWorkers = 128

// setup builds the hasher, watcher and indexer.
func (a *App) setup(ctx context.Context, reg *prometheus.Registry) error {
	policy, err := a.policy(ctx)
	if err != nil {
		return err
	}
	if a.opts.NoDataSync {
		policy.SyncWindow = -1
	}
	a.h = hasher.New(policy, a.log.With("part", "hasher"))

	patterns := a.ignorePatterns()
	m, err := ignore.New(patterns)
	if err != nil {
		return fmt.Errorf("daemon: ignore patterns: %w", err)
	}
	writes := ledger.New()
	a.w, err = watcher.New(a.cfg.Roots, watcher.Options{
		Writes:        writes,
		Quiet:         a.cfg.Watch.QuietDelay,
		SafetyRescan:  a.cfg.Watch.SafetyRescan,
		OneFileSystem: a.cfg.Watch.OneFileSystem,
		Ignore:        m,
		Logger:        a.log.With("part", "watcher"),
		SyncDir:       a.syncDir,
		// The first scan starts beside the set-up of the watches, each
		// directory read once its watch is in place (BeforeDir below).
		EarlyInitialRescan: true,
	})
	if err != nil {
		return err
	}
	workers := a.cfg.Indexer.HashWorkers
	if workers <= 0 {
		// Enough files at once to keep the multi-buffer lanes full while
		// half the workers read their next files, but no more than
		// maxAutoWorkers: each may hold a small file's bytes for the lanes.
		workers = min(max(2*runtime.GOMAXPROCS(0), a.h.Streams()), maxAutoWorkers)
	}
	a.ix, err = indexer.New(a.st, a.h, indexer.Options{
		Roots:         slices.Clone(a.cfg.Roots), // the API reads the config's meanwhile
		Backend:       a.backend,
		Workers:       workers,
		MaxPending:    a.cfg.Indexer.MaxPending,
		Ignore:        patterns,
		Exclude:       a.exclude(),
		Ledger:        writes,
		OnFinding:     a.findings.found,
		Watches:       a.w,
		OneFileSystem: a.cfg.Watch.OneFileSystem,
		Logger:        a.log.With("part", "indexer"),
	})
	if err != nil {
		return err
	}
	a.st.SetBulk(a.ix.Bulk) // a cold scan's records trickle in: larger groups (store.SetBulk)
	if err := a.setupAudit(writes, reg); err != nil {
		return fmt.Errorf("daemon: audit: %w", err)
	}
	a.setupHeal(writes)
	if err := a.setupDedup(ctx, writes, reg); err != nil {
		return fmt.Errorf("daemon: dedup: %w", err)
	}
	return a.setupQuery(reg)
}

// setupQuery builds the answers to the API's questions, once every part
// they report on exists, and registers the metrics read at scrape time.
func (a *App) setupQuery(reg prometheus.Registerer) error {
	a.query = query.New(query.Config{Store: a.st, Indexer: a.ix, Watcher: a.w, Roots: a.roots, Backend: a.backend,
		About: a.about(), Logger: a.log, Forgot: a.work.notify, Parts: query.Parts{
			Dedup: a.dedup.Status, Hub: a.link.Status, Audit: query.NewAudit(a.audit).Summary}})
	cs := append([]prometheus.Collector{a.ix.Collector()}, a.query.Collectors()...)
	for _, c := range append(cs, a.link.Collector()) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("daemon: metrics: %w", err)
		}
	}
	return nil
}

// about is what the status says of the daemon.
func (a *App) about() query.About {
	return query.About{Version: a.opts.Version, IndexPath: a.cfg.Index, Started: a.started, Calibration: a.calib}
}

// ignorePatterns are the config's ignore patterns after the defaults it
// asks for.
func (a *App) ignorePatterns() []string {
	patterns := a.cfg.Ignore.Patterns
	switch {
	case a.cfg.Ignore.NoDefaults:
	case a.cfg.Ignore.AnnexObjects:
		patterns = append(ignore.DefaultsWithAnnexObjects(), patterns...)
	default:
		patterns = append(ignore.Defaults(), patterns...)
	}
	// Hardlink deduplication's temporary names are never a person's file:
	// indexed, or watched, a write to an old copy there would count as a
	// write of unknown inode and mark every file written. Last, so no
	// pattern brings them back.
	patterns = append(slices.Clip(patterns), dedup.TempPattern, heal.TempPattern)
	// Trash folders, where dedup --trash moves copies, neither: a copy
	// moved there is gone from the index, not moved.
	return append(patterns, dedup.TrashPatterns...)
}

// policy returns the hasher policy: the stored calibration while it is
// valid, a new one, or the built-in one, with the config's overrides.
func (a *App) policy(ctx context.Context) (hasher.Policy, error) {
	p := hasher.DefaultPolicy()
	var calib calibrate.Calibration
	if a.cfg.Hasher.Calibrate != "never" {
		c, err := a.calibration(ctx)
		if err != nil {
			a.log.Warn("calibration failed; using the built-in hashing policy", "err", err)
		} else {
			a.calib, calib, p = &c, c, c.Policy
		}
	}
	h := a.cfg.Hasher
	p, err := calibrate.Overrides{
		InlineMax: int64(h.InlineMax), Workers: h.Workers,
		External: h.External, ExternalMin: int64(h.ExternalMin), Readers: h.Readers,
	}.Apply(p, calib)
	if err != nil {
		return p, fmt.Errorf("daemon: [hasher] settings from %s: %w", a.cfgFile(), err)
	}
	return p, nil
}

func (a *App) cfgFile() string {
	if a.cfg.File == "" {
		return "defaults"
	}
	return a.cfg.File
}

// calibration loads the stored calibration when it is still valid (and
// calibrate is "auto"), or measures and stores a new one.
func (a *App) calibration(ctx context.Context) (calibrate.Calibration, error) {
	var c calibrate.Calibration
	if a.cfg.Hasher.Calibrate == "auto" {
		if b, ok, err := a.st.GetMeta(calibrationMeta); err == nil && ok && json.Unmarshal(b, &c) == nil && c.StillValid() {
			a.log.Info("reusing stored hashing calibration", "measured_at", c.At)
			a.calibReused.Store(true)
			return c, nil
		} else if ok && err == nil {
			a.log.Info("the stored hashing calibration does not hold here (cut short, or this machine or its programs changed); calibrating again")
		}
	}
	a.log.Info("calibrating hashing")
	a.calibrating.Store(true)
	defer a.calibrating.Store(false)
	c, err := calibrate.Run(ctx, calibrate.Options{Log: a.log.With("part", "calibrate"), Budget: testBudget()})
	if err != nil {
		return c, err
	}
	b, err := json.Marshal(c)
	if err == nil {
		// Bounded: with the index's file system full the write waits
		// for room, and the start must not.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = a.st.PutMeta(pctx, calibrationMeta, b)
		cancel()
	}
	if err != nil {
		a.log.Warn("cannot store calibration; it will run again at the next start", "err", err)
	}
	a.log.Info("calibration done", "took_ms", c.TookMs, "inline_max", c.Policy.InlineMax,
		"workers", c.Policy.Workers, "sha256", c.Policy.SHA256, "external_min", c.Policy.ExternalMin,
		"batch_kernel", c.Policy.BatchKernel)
	return c, nil
}

// exclude lists the daemon's own files, never indexed.
func (a *App) exclude() []string {
	// The index and its neighbours change with every commit; the
	// socket's lock file is the daemon's own. Not the socket's whole
	// directory: that may be a root itself.
	x := []string{a.cfg.Index, a.cfg.Index + "-lock", a.cfg.Socket, a.cfg.Socket + ".lock"}
	if a.syncDir != "" {
		x = append(x, a.syncDir)
	}
	return append(x, a.link.Exclude()...)
}

// makeSyncDir makes the directory of the watcher's Sync cookies beside the
// index: the index's directory exists and is writable in every
// configuration (the store writes there; the socket may be replaced by
// TCP or live under a root), and the index's lock makes it this daemon's
// alone. Cookies left by a daemon that was killed are removed.
func makeSyncDir(index string) (string, error) {
	dir := index + "-sync"
	err := os.Mkdir(dir, 0o700)
	if !errors.Is(err, fs.ErrExist) {
		return dir, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return dir, err
	}
	if !fi.IsDir() {
		return dir, fmt.Errorf("daemon: %s is not a directory; remove it", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return dir, err
	}
	return dir, watcher.RemoveCookies(dir)
}

// removeSyncDir removes the sync directory when it holds nothing else.
func (a *App) removeSyncDir() {
	err := watcher.RemoveCookies(a.syncDir)
	if err == nil {
		err = os.Remove(a.syncDir)
	}
	if err != nil {
		a.log.Warn("cannot remove the sync directory", "path", a.syncDir, "err", err)
	}
}

// logProgress logs progress every 10 s while work is pending, and once when
// the initial scan is done. Idle, it sleeps until work comes.
func (a *App) logProgress(ctx context.Context) error {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	idleLogged := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		wake := a.work.wait()
		p := a.ix.Progress()
		if p.Idle {
			if !idleLogged {
				a.log.Info("idle", "files_seen", p.FilesSeen, "files_hashed", p.FilesHashed,
					"bytes_hashed", p.BytesHashed, "uptime", p.Uptime.Round(time.Second))
				idleLogged = true
			}
			if !sleep(ctx, t, 10*time.Second, wake) {
				return nil
			}
			continue
		}
		idleLogged = false
		a.log.Info("indexing", "files_seen", p.FilesSeen, "files_hashed", p.FilesHashed,
			"queued", p.FilesQueued, "bytes_queued", p.BytesQueued, "remaining", p.Remaining.Round(time.Second))
	}
}

// sleep waits for wake with t stopped; t ticks every d again after. It
// reports false when ctx ended.
func sleep(ctx context.Context, t *time.Ticker, d time.Duration, wake <-chan struct{}) bool {
	t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	}
	t.Reset(d)
	return true
}

// ixResting reports whether the indexer has no work of its own.
func (a *App) ixResting() bool { return !a.ix.Working() }

// bulk reports whether the indexer works in bulk (indexer.Bulk). A lone
// change in its quiet period is not bulk work.
func (a *App) bulk() bool { return a.ix.Bulk() }
