package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api/apiserver"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/daemon"
	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/ignore"
	ver "github.com/annexd/annexd/internal/version"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// defaultMemoryLimit is the Go runtime's soft memory limit unless
// GOMEMLIMIT is set. A first scan of the corpus keeps 20-40 MiB live (the
// store's group and its dirty pages, the files being read for the hasher's
// lanes). At 64 MiB its peak RssAnon is 61 MiB against 113 at the 96 MiB
// limit raised to 128 MiB with GOGC=200 while indexing, for no more CPU in
// the same runs (BENCHMARKS.md, bench/memory.sh). An earlier 20 % cost at
// 64 MiB came from a hasher that kept every file's job alive.
const defaultMemoryLimit = 64 << 20

// runFlags are the root command's flags; each overrides the config file.
type runFlags struct {
	config       string
	index        string
	socket       string
	backend      string
	logLevel     string
	logFormat    string
	ignore       []string
	noDefaults   bool
	calibrate    string
	hashWorkers  int
	readers      int
	exitWhenIdle bool
	noDataSync   bool
}

// setupRun makes root run the daemon and returns its flags.
func setupRun(root *cobra.Command) *runFlags {
	var f runFlags
	root.Long = `annexd keeps a content-addressed index of the files under each ROOT:
it hashes every regular file into a git-annex key (SHA256E by default),
records it in an index file, watches the roots with inotify and keeps the
index current while files change. annexctl asks it questions over a unix
socket.

Without ROOT arguments the roots come from the config file. Flags override
the config file ($XDG_CONFIG_HOME/annexd/annexd.toml, or --config); every key
is documented in configs/annexd.example.toml.

The Go runtime's soft memory limit is 64 MiB unless GOMEMLIMIT is set;
once annexd has indexed in bulk, it returns the freed memory to the system
unless GOGC or GOMEMLIMIT is set. Go code runs on four threads per CPU while annexd reads
from disk unless GOMAXPROCS is set.`
	root.Example = `  annexd ~/                      index your home directory and keep it current
  annexd --index /srv/idx.db /srv/data
  annexctl status --wait          (in another terminal) wait for the first scan`
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		return runDaemon(cmd, args, &f)
	}
	fl := root.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "config file (default $XDG_CONFIG_HOME/annexd/annexd.toml, if it exists)")
	fl.StringVar(&f.index, "index", "", "index file (default $XDG_STATE_HOME/annexd/index.db)")
	fl.StringVar(&f.socket, "socket", "", "API socket (default $XDG_RUNTIME_DIR/annexd/annexd.sock)")
	fl.StringVar(&f.backend, "backend", "", "git-annex backend of the keys (default SHA256E)")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (default info)")
	fl.StringVar(&f.logFormat, "log-format", "", "text or json (default text)")
	fl.Duration("quiet-delay", 0, "how long a file must be left alone before it is hashed; 0 hashes at once (default 1s)")
	fl.Duration("safety-rescan", 0, "mean interval of the periodic stat-only rescan, <0 disables (default 6h)")
	fl.Bool("one-file-system", false, "keep each root to its own file system, as find -xdev (default: cross mounts)")
	fl.StringArrayVar(&f.ignore, "ignore", nil, "gitignore-style pattern of paths never indexed (repeatable; added to the config's)")
	fl.BoolVar(&f.noDefaults, "no-default-ignores", false, "do not leave out VCS internals and caches by default")
	fl.StringVar(&f.calibrate, "calibrate", "", "hashing calibration: auto, always or never (default auto)")
	fl.IntVar(&f.hashWorkers, "hash-workers", 0, "files checked and hashed at once (default: from the hasher)")
	fl.IntVar(&f.readers, "readers", 0, "small files read at once per device while many are hashed (default 16)")
	// For benchmarks and one-shot indexing: stop once the first scan is
	// done and nothing is pending. Documented in bench/daemon.sh.
	fl.BoolVar(&f.exitWhenIdle, "exit-when-idle", false, "exit once the initial scan is done and nothing is pending")
	_ = fl.MarkHidden("exit-when-idle")
	// For the power-cut tests (e2e/powercut) and their benchmarks only.
	fl.BoolVar(&f.noDataSync, "no-data-sync", false, "hash recently written files without syncing their data first (unsafe)")
	_ = fl.MarkHidden("no-data-sync")
	fl.Bool("hub", false, "run the hub other hosts publish to, as [hub] enabled = true (see annexd hub --help)")
	completeFlags(root)
	return &f
}

// flagKeys are the config keys the flags set, by flag.
var flagKeys = map[string]string{
	"index": "index", "socket": "socket", "backend": "backend", "log-level": "log.level",
	"log-format": "log.format", "calibrate": "hasher.calibrate", "quiet-delay": "watch.quiet_delay",
	"safety-rescan": "watch.safety_rescan", "readers": "hasher.readers", "hash-workers": "indexer.hash_workers",
	"hub": "hub.enabled", "one-file-system": "watch.one_file_system",
}

// loadConfig reads the config file and applies the flags and arguments.
func loadConfig(cmd *cobra.Command, args []string, f *runFlags) (config.Config, error) {
	cfg, err := config.Load(f.config)
	if err != nil {
		return cfg, err
	}
	fl := cmd.Flags()
	// Which flags gave which keys: an error about a value names the flag
	// that gave it, not the file.
	for flag, key := range flagKeys {
		if fl.Changed(flag) {
			cfg.SetByFlag(key, "--"+flag)
		}
	}
	set := func(name string, dst *string, v string) {
		if fl.Changed(name) {
			*dst = v
		}
	}
	set("index", &cfg.Index, f.index)
	set("socket", &cfg.Socket, f.socket)
	set("backend", &cfg.Backend, f.backend)
	set("log-level", &cfg.Log.Level, f.logLevel)
	set("log-format", &cfg.Log.Format, f.logFormat)
	set("calibrate", &cfg.Hasher.Calibrate, f.calibrate)
	if fl.Changed("quiet-delay") {
		cfg.Watch.QuietDelay, _ = fl.GetDuration("quiet-delay")
		if cfg.Watch.QuietDelay == 0 {
			cfg.Watch.QuietDelay = 1 // 0 on the command line means "at once"
		}
	}
	if fl.Changed("one-file-system") {
		cfg.Watch.OneFileSystem, _ = fl.GetBool("one-file-system")
	}
	if fl.Changed("safety-rescan") {
		cfg.Watch.SafetyRescan, _ = fl.GetDuration("safety-rescan")
	}
	if fl.Changed("readers") {
		cfg.Hasher.Readers = f.readers
	}
	if fl.Changed("hub") {
		cfg.Hub.Enabled, _ = fl.GetBool("hub")
	}
	if fl.Changed("hash-workers") {
		cfg.Indexer.HashWorkers = f.hashWorkers
	}
	cfg.Ignore.Patterns = append(cfg.Ignore.Patterns, f.ignore...)
	if f.noDefaults {
		cfg.Ignore.NoDefaults = true
	}
	if len(args) > 0 {
		cfg.Roots = args
	}
	if err := cfg.Fill(); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, checkIgnore(cfg, f.ignore)
}

func runDaemon(cmd *cobra.Command, args []string, f *runFlags) error {
	cfg, err := loadConfig(cmd, args, f)
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	if len(cfg.Roots) == 0 {
		return &exitError{Code: exitUsage, Err: errors.New("no directory to index: give one, as in `annexd ~/`, or set roots in " + config.DefaultConfigPath())}
	}
	log := newLogger(cmd.ErrOrStderr(), cfg)
	if os.Getenv("GOMEMLIMIT") == "" {
		// Keep the heap of a long-running daemon near its live size; a
		// soft limit, so a larger live heap still works (set GOMEMLIMIT
		// to change it).
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	opts := daemon.Options{Version: version(), ExitWhenIdle: f.exitWhenIdle, NoDataSync: f.noDataSync,
		PaceGC:    os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "",
		DiskProcs: os.Getenv("GOMAXPROCS") == ""}
	app, err := daemon.New(cfg, log, opts)
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		log.Info("signal received; flushing and exiting", "signal", s.String())
		cancel()
		signal.Stop(sigs) // a second signal kills the process
	}()
	defer signal.Stop(sigs)
	if err := app.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		if errors.Is(err, store.ErrCorrupt) {
			return damaged(err, cmd, args)
		}
		return &exitError{Code: runExit(err), Err: err}
	}
	return nil
}

// usageErrors are the failures of a start that the user fixes in the
// flags, the config or the index path; the README's table gives them
// exit status 2.
var usageErrors = []error{
	daemon.ErrLocked, daemon.ErrRoot, daemon.ErrNoRoots, daemon.ErrNoNetwork,
	store.ErrNotIndex, store.ErrNewerSchema, store.ErrNeedsMigration, store.ErrUnwritable,
	apiserver.ErrConfig, apiserver.ErrSocketInUse, apiserver.ErrUnsafeSocketDir, apiserver.ErrListen,
	ignore.ErrBadPattern, config.ErrInvalid,
	daemon.ErrHubConfig, hub.ErrConfig, hub.ErrListen,
}

// runExit is the exit status of a daemon run that failed with err.
func runExit(err error) int {
	for _, u := range usageErrors {
		if errors.Is(err, u) {
			return exitUsage
		}
	}
	return exitFailure
}

// checkIgnore compiles the ignore patterns of the config file and of the
// flags apart, so that a bad one is reported with where it came from.
func checkIgnore(cfg config.Config, flags []string) error {
	file := cfg.Ignore.Patterns[:len(cfg.Ignore.Patterns)-len(flags)]
	if _, err := ignore.New(file); err != nil {
		return fmt.Errorf("%w (in [ignore] patterns of %s)", err, cfgName(cfg))
	}
	if _, err := ignore.New(flags); err != nil {
		return fmt.Errorf("%w (given with --ignore)", err)
	}
	return nil
}

// cfgName names the config file, or says there is none.
func cfgName(cfg config.Config) string {
	if cfg.File == "" {
		return "no config file"
	}
	return cfg.File
}

func newLogger(w io.Writer, cfg config.Config) *slog.Logger {
	level, _ := cfg.LogLevel()
	o := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// version is the build's version (internal/version): stamped at build
// time, the module's, or the source's revision.
func version() string { return ver.String() }

// completeFlags offers the values of the flags that take one of a few.
func completeFlags(root *cobra.Command) {
	fixed := func(name string, values ...string) {
		_ = root.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	var backends []string
	for _, b := range key.Backends() {
		if hasher.Supported(b) {
			backends = append(backends, b.String())
		}
	}
	fixed("backend", backends...)
	fixed("log-level", "debug", "info", "warn", "error")
	fixed("log-format", "text", "json")
	fixed("calibrate", "auto", "always", "never")
	root.ValidArgsFunction = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs // ROOTs are directories
	}
}
