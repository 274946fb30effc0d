// Package config is annexd's configuration: the TOML file's schema, its
// loading with strict key checking, and the embedded defaults, filled in one
// place so that the zero Config works.
//
// The file is optional. Every key is documented in
// configs/annexd.example.toml; a key this package does not know is an error
// that names the key and the file. Command-line flags are applied by the
// caller after Load and before Fill, so they override the file.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/annexd/annexd/key"
)

// Errors returned by Load and Validate.
var (
	// ErrUnknownKey is returned when the file holds a key this version does not know.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrInvalid is wrapped by every validation error.
	ErrInvalid = errors.New("config: invalid value")
	// ErrNotFound is returned when an explicitly named file does not exist.
	ErrNotFound = errors.New("config: file not found")
)

// Defaults. Fill applies them; the example config documents them.
const (
	DefaultQuietDelay   = time.Second
	DefaultSafetyRescan = 6 * time.Hour
	DefaultLogLevel     = "info"
	DefaultLogFormat    = "text"
	DefaultMaxPending   = 4096
	DefaultCalibrate    = "auto"
	DefaultExternal     = "auto"
)

// Config is the whole configuration. The zero value is valid once Fill has
// run.
type Config struct {
	// Roots are the directories to index (absolute after Fill).
	Roots []string `toml:"roots"`
	// Index is the bbolt index file.
	Index string `toml:"index"`
	// Socket is the unix socket the API listens on.
	Socket string `toml:"socket"`
	// Backend names the git-annex backend of the keys, e.g. "SHA256E".
	Backend string `toml:"backend"`

	Log     Log     `toml:"log"`
	Watch   Watch   `toml:"watch"`
	Ignore  Ignore  `toml:"ignore"`
	Hasher  Hasher  `toml:"hasher"`
	Indexer Indexer `toml:"indexer"`
	API     API     `toml:"api"`
	Dedup   Dedup   `toml:"dedup"`
	Audit   Audit   `toml:"audit"`   // audit.go
	Hub     Hub     `toml:"hub"`     // hub.go
	Publish Publish `toml:"publish"` // hub.go
	Changes Changes `toml:"changes"` // changes.go
	UI      UI      `toml:"ui"`      // ui.go

	// File is the config file this came from, "" when none was read.
	File string `toml:"-"`
	// Flags names the command-line flag that gave a key its value, by
	// key ("backend" → "--backend"): an error about the value names the
	// flag, not the file.
	Flags map[string]string `toml:"-"`
}

// SetByFlag notes that flag gave key its value.
func (c *Config) SetByFlag(key, flag string) {
	if c.Flags == nil {
		c.Flags = map[string]string{}
	}
	c.Flags[key] = flag
}

// Log configures logging.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text, json
}

// Watch configures the watcher.
type Watch struct {
	// QuietDelay is how long a file must be quiet before it is hashed.
	QuietDelay time.Duration `toml:"quiet_delay"`
	// SafetyRescan is the mean interval of the periodic, jittered rescan;
	// a negative value disables it.
	SafetyRescan time.Duration `toml:"safety_rescan"`
	// OneFileSystem keeps each root to its own file system, as find -xdev
	// does: file systems mounted inside a root are left out. By default
	// they are indexed.
	OneFileSystem bool `toml:"one_file_system"`
}

// Ignore configures which paths are never indexed.
type Ignore struct {
	// Patterns are gitignore-style patterns added to the defaults.
	Patterns []string `toml:"patterns"`
	// NoDefaults drops the built-in patterns (VCS internals, caches).
	NoDefaults bool `toml:"no_defaults"`
	// AnnexObjects indexes git-annex's object store (.git/annex/objects),
	// which the built-in patterns leave out with the rest of .git/.
	AnnexObjects bool `toml:"annex_objects"`
}

// Hasher overrides the hasher's calibrated policy; zero fields keep it.
type Hasher struct {
	// Calibrate is "auto" (reuse a stored calibration while valid), "always"
	// (measure at every start) or "never" (built-in policy, no measuring).
	Calibrate string `toml:"calibrate"`
	// InlineMax: files up to this size are hashed on the caller's goroutine.
	InlineMax Size `toml:"inline_max"`
	// Workers is the size of the pool for large files.
	Workers int `toml:"workers"`
	// External is "auto" (when calibration says it wins), "never" or "always".
	External string `toml:"external"`
	// ExternalMin: the smallest file an external program may hash.
	ExternalMin Size `toml:"external_min"`
	// Readers is how many small files are read at once from one device
	// while many are hashed (a first scan); 0 keeps the hasher's default.
	Readers int `toml:"readers"`
}

// Indexer tunes the indexer.
type Indexer struct {
	// HashWorkers is how many files are hashed at once; 0 picks from the CPU count.
	HashWorkers int `toml:"hash_workers"`
	// MaxPending bounds the queue of paths waiting to be hashed.
	MaxPending int `toml:"max_pending"`
}

// API configures the local API beyond its unix socket.
type API struct {
	// TCP, when set, also serves the API on this loopback address
	// ("127.0.0.1:7777"); every request must then carry Token.
	TCP string `toml:"tcp"`
	// Token is the bearer token TCP clients send; at least 16 characters.
	Token string `toml:"token"`
}

// Load reads the config file at path. When path is "" the default location is
// tried and a missing file yields the zero Config; a path that was named
// explicitly must exist. Keys the schema does not know are an error naming
// the key and the file.
func Load(path string) (Config, error) {
	explicit := path != ""
	if !explicit {
		path = DefaultConfigPath()
	}
	var c Config
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return c, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("%w: %s", ErrNotFound, path)
	}
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	md, err := toml.Decode(string(data), &c)
	if err != nil {
		return c, fmt.Errorf("config: %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		names := make([]string, len(und))
		for i, k := range und {
			names[i] = fmt.Sprintf("%q", k.String())
		}
		return c, fmt.Errorf("%w %s in %s", ErrUnknownKey, strings.Join(names, ", "), path)
	}
	c.File = path
	return c, nil
}

// Fill sets every unset field to its default and makes paths absolute. It is
// the one place defaults live.
func (c *Config) Fill() error {
	var err error
	if c.Index == "" {
		if c.Index, err = DefaultIndexPath(); err != nil {
			return err
		}
	}
	if c.Socket == "" {
		c.Socket = DefaultSocketPath()
	}
	if c.Backend == "" {
		c.Backend = key.Default.String()
	}
	if c.Log.Level == "" {
		c.Log.Level = DefaultLogLevel
	}
	if c.Log.Format == "" {
		c.Log.Format = DefaultLogFormat
	}
	if c.Audit.Heal == "" {
		c.Audit.Heal = "ask"
	}
	if c.Audit.HealKeep == 0 {
		c.Audit.HealKeep = DefaultHealKeep
	}
	if c.Watch.QuietDelay == 0 {
		c.Watch.QuietDelay = DefaultQuietDelay
	}
	if c.Watch.SafetyRescan == 0 {
		c.Watch.SafetyRescan = DefaultSafetyRescan
	}
	if c.Hasher.Calibrate == "" {
		c.Hasher.Calibrate = DefaultCalibrate
	}
	if c.Hasher.External == "" {
		c.Hasher.External = DefaultExternal
	}
	if c.Indexer.MaxPending == 0 {
		c.Indexer.MaxPending = DefaultMaxPending
	}
	c.Dedup.fill()
	for i, r := range c.Roots {
		if c.Roots[i], err = absPath(r); err != nil {
			return err
		}
	}
	if c.Index, err = absPath(c.Index); err != nil {
		return err
	}
	if c.Socket, err = absPath(c.Socket); err != nil {
		return err
	}
	return c.fillHub()
}

// absPath expands a leading "~/" and makes p absolute and clean.
func absPath(p string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("config: expanding %q: %w", p, err)
		}
		p = filepath.Join(home, p[1:])
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("config: %q: %w", p, err)
	}
	return a, nil
}

// Validate checks the values of a filled Config. It does not touch the file
// system; the daemon checks the roots when it starts.
func (c *Config) Validate() error {
	if _, err := c.BackendValue(); err != nil {
		return err
	}
	if _, err := c.LogLevel(); err != nil {
		return err
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return c.invalid("log.format", c.Log.Format, `"text" or "json"`)
	}
	if c.Watch.QuietDelay < 0 {
		return c.invalid("watch.quiet_delay", c.Watch.QuietDelay.String(), "a duration ≥ 0")
	}
	if !oneOf(c.Hasher.Calibrate, "auto", "always", "never") {
		return c.invalid("hasher.calibrate", c.Hasher.Calibrate, `"auto", "always" or "never"`)
	}
	if !oneOf(c.Hasher.External, "auto", "always", "never") {
		return c.invalid("hasher.external", c.Hasher.External, `"auto", "always" or "never"`)
	}
	if c.Hasher.Workers < 0 {
		return c.invalid("hasher.workers", fmt.Sprint(c.Hasher.Workers), "a count ≥ 0")
	}
	if c.Hasher.Readers < 0 {
		return c.invalid("hasher.readers", fmt.Sprint(c.Hasher.Readers), "a count ≥ 0")
	}
	if c.Indexer.HashWorkers < 0 {
		return c.invalid("indexer.hash_workers", fmt.Sprint(c.Indexer.HashWorkers), "a count ≥ 0")
	}
	if c.API.TCP != "" && len(c.API.Token) < 16 {
		return c.invalid("api.token", strings.Repeat("*", len(c.API.Token)), "at least 16 characters when api.tcp is set")
	}
	if c.Indexer.MaxPending < 1 {
		return c.invalid("indexer.max_pending", fmt.Sprint(c.Indexer.MaxPending), "a count ≥ 1")
	}
	if err := c.Dedup.validate(c); err != nil {
		return err
	}
	if err := c.UI.validate(c); err != nil {
		return err
	}
	if err := c.Changes.validate(c); err != nil {
		return err
	}
	if err := c.Audit.validate(c); err != nil {
		return err
	}
	return c.validateHub()
}

func (c *Config) invalid(name, val, want string) error {
	if f, ok := c.Flags[name]; ok {
		return fmt.Errorf("%w: %s %q: want %s", ErrInvalid, f, val, want)
	}
	where := ""
	if c.File != "" {
		where = " in " + c.File
	}
	return fmt.Errorf("%w: %s = %q%s: want %s", ErrInvalid, name, val, where, want)
}

func oneOf(s string, opts ...string) bool {
	for _, o := range opts {
		if s == o {
			return true
		}
	}
	return false
}

// BackendValue parses Backend.
func (c *Config) BackendValue() (key.Backend, error) {
	b, err := key.ParseBackend(c.Backend)
	if err != nil {
		return key.Unknown, c.invalid("backend", c.Backend, "a git-annex backend such as SHA256E")
	}
	return b, nil
}

// LogLevel parses Log.Level.
func (c *Config) LogLevel() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.Log.Level)); err != nil {
		return 0, c.invalid("log.level", c.Log.Level, `"debug", "info", "warn" or "error"`)
	}
	return l, nil
}
