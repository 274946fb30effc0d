package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/annexd/annexd/key"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "annexd.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestZeroConfigFills(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	t.Setenv("XDG_RUNTIME_DIR", "/rt")
	var c Config
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Index != "/state/annexd/index.db" || c.Socket != "/rt/annexd/annexd.sock" {
		t.Errorf("paths: index %q socket %q", c.Index, c.Socket)
	}
	if b, _ := c.BackendValue(); b != key.SHA256E {
		t.Errorf("backend %v", b)
	}
	if c.Watch.QuietDelay != DefaultQuietDelay || c.Watch.SafetyRescan != DefaultSafetyRescan {
		t.Errorf("watch %+v", c.Watch)
	}
	if c.Indexer.MaxPending != DefaultMaxPending || c.Hasher.Calibrate != "auto" {
		t.Errorf("indexer %+v hasher %+v", c.Indexer, c.Hasher)
	}
}

func TestDefaultPathFallbacks(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "relative/ignored")
	if got, err := DefaultIndexPath(); err != nil || got != filepath.Join(home, ".local/state/annexd/index.db") {
		t.Errorf("index %q, %v; want %q", got, err, filepath.Join(home, ".local/state/annexd/index.db"))
	}
	if got, want := DefaultConfigPath(), filepath.Join(home, ".config/annexd/annexd.toml"); got != want {
		t.Errorf("config %q, want %q", got, want)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	s := DefaultSocketPath()
	if !strings.HasSuffix(s, "/annexd.sock") || !filepath.IsAbs(s) {
		t.Errorf("socket %q", s)
	}
}

// Without a home directory the index has no default: the daemon, check-db
// and compact refuse to guess, and say what to give.
func TestDefaultIndexWithoutHome(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	if p, err := DefaultIndexPath(); !errors.Is(err, ErrNoHome) || !strings.Contains(err.Error(), "--index") {
		t.Errorf("DefaultIndexPath() = %q, %v; want ErrNoHome naming --index", p, err)
	}
	var c Config
	if err := c.Fill(); !errors.Is(err, ErrNoHome) {
		t.Errorf("Fill without a home: %v, want ErrNoHome", err)
	}
	c = Config{Index: "/x/index.db"}
	if err := c.Fill(); err != nil {
		t.Errorf("Fill with an index given: %v", err)
	}
	t.Setenv("XDG_STATE_HOME", "/state")
	if p, err := DefaultIndexPath(); err != nil || p != "/state/annexd/index.db" {
		t.Errorf("DefaultIndexPath() = %q, %v with XDG_STATE_HOME", p, err)
	}
}

func TestLoadFull(t *testing.T) {
	p := writeFile(t, `
roots = ["/a", "~/b"]
index = "/x/index.db"
socket = "/x/s.sock"
backend = "BLAKE2B256E"
[log]
level = "debug"
format = "json"
[watch]
quiet_delay = "250ms"
safety_rescan = "2h"
[ignore]
patterns = ["*.tmp", "build/"]
no_defaults = true
[hasher]
calibrate = "never"
inline_max = "64KiB"
workers = 3
external = "never"
external_min = 1048576
[indexer]
hash_workers = 4
max_pending = 100
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	if c.Roots[0] != "/a" || c.Roots[1] != filepath.Join(home, "b") {
		t.Errorf("roots %q", c.Roots)
	}
	if c.Watch.QuietDelay != 250*time.Millisecond || c.Watch.SafetyRescan != 2*time.Hour {
		t.Errorf("watch %+v", c.Watch)
	}
	if c.Hasher.InlineMax != 64<<10 || c.Hasher.ExternalMin != 1<<20 || c.Hasher.Workers != 3 {
		t.Errorf("hasher %+v", c.Hasher)
	}
	if !c.Ignore.NoDefaults || len(c.Ignore.Patterns) != 2 || c.File != p {
		t.Errorf("ignore %+v file %q", c.Ignore, c.File)
	}
	if c.Indexer.HashWorkers != 4 || c.Indexer.MaxPending != 100 {
		t.Errorf("indexer %+v", c.Indexer)
	}
}

func TestUnknownKeyNamesKeyAndFile(t *testing.T) {
	p := writeFile(t, "[watch]\nquiet = \"1s\"\n")
	_, err := Load(p)
	if !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("err = %v, want ErrUnknownKey", err)
	}
	if !strings.Contains(err.Error(), `"watch.quiet"`) || !strings.Contains(err.Error(), p) {
		t.Errorf("message %q should name the key and the file", err)
	}
}

func TestSyntaxErrorNamesFile(t *testing.T) {
	p := writeFile(t, "roots = [\n")
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want one naming %s", err, p)
	}
}

func TestExplicitMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	c, err := Load("")
	if err != nil || c.File != "" {
		t.Fatalf("default missing file: %v, %+v", err, c)
	}
}

func TestDefaultFileIsRead(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if err := os.MkdirAll(filepath.Join(dir, "annexd"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "annexd", "annexd.toml"), []byte("backend = \"SHA512\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load("")
	if err != nil || c.Backend != "SHA512" {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestValidateRejects(t *testing.T) {
	cases := map[string]func(*Config){
		"backend":              func(c *Config) { c.Backend = "SHA3" },
		"log.level":            func(c *Config) { c.Log.Level = "loud" },
		"log.format":           func(c *Config) { c.Log.Format = "xml" },
		"hasher.calibrate":     func(c *Config) { c.Hasher.Calibrate = "sometimes" },
		"hasher.external":      func(c *Config) { c.Hasher.External = "maybe" },
		"indexer.hash_workers": func(c *Config) { c.Indexer.HashWorkers = -1 },
		"watch.quiet_delay":    func(c *Config) { c.Watch.QuietDelay = -time.Second },
		"api.token":            func(c *Config) { c.API.TCP = "127.0.0.1:7777"; c.API.Token = "short" },
		"ui.listen":            func(c *Config) { c.UI.Listen = "0.0.0.0:8443" }, // beyond loopback without TLS
	}
	for name, mod := range cases {
		var c Config
		if err := c.Fill(); err != nil {
			t.Fatal(err)
		}
		mod(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// The page beyond loopback needs the hub's TLS certificate and key; on
// loopback it needs nothing.
func TestUIListen(t *testing.T) {
	for _, c := range []struct {
		listen, cert string
		ok           bool
	}{{"", "", true}, {"127.0.0.1:0", "", true}, {"[::1]:8080", "", true}, {"localhost:8080", "", true},
		{"0.0.0.0:8443", "", false}, {"192.168.1.2:8443", "", false}, {"0.0.0.0:8443", "/etc/hub.pem", true}, {"nonsense", "", false}} {
		var cfg Config
		if err := cfg.Fill(); err != nil {
			t.Fatal(err)
		}
		cfg.UI.Listen = c.listen
		cfg.Hub.TLSCert, cfg.Hub.TLSKey = c.cert, c.cert
		if err := cfg.UI.validate(&cfg); (err == nil) != c.ok {
			t.Errorf("ui.listen %q with tls_cert %q: %v", c.listen, c.cert, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{"0": 0, "4096": 4096, "64KiB": 64 << 10, "1 MiB": 1 << 20, "10MB": 10e6, "3B": 3}
	for s, want := range good {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5MiB", "ten", "99999999999TiB"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) accepted", s)
		}
	}
}

func TestPrepareSocketDir(t *testing.T) {
	base := t.TempDir()
	sock := filepath.Join(base, "annexd-test", "annexd.sock")
	if err := PrepareSocketDir(sock); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Dir(sock))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, %v", st.Mode(), err)
	}
	if err := PrepareSocketDir(sock); err != nil {
		t.Fatalf("second call: %v", err)
	}
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PrepareSocketDir(sock); !errors.Is(err, ErrSocketDir) {
		t.Fatalf("open dir accepted: %v", err)
	}
}

// The example config must load without unknown keys and validate: it is the
// documentation of every key.
func TestExampleConfigLoads(t *testing.T) {
	c, err := Load("../../configs/annexd.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Every key of the schema is documented in the example file, set or shown
// commented out as "# key = value".
func TestExampleDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../../configs/annexd.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "# "); ok && strings.Contains(rest, " = ") && !strings.Contains(strings.SplitN(rest, " = ", 2)[0], " ") {
			lines[i] = rest
		}
	}
	var c Config
	md, err := toml.Decode(strings.Join(lines, "\n"), &c)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range md.Keys() {
		have[k.String()] = true
	}
	for _, k := range schemaKeys(reflect.TypeOf(Config{}), "") {
		if !have[k] {
			t.Errorf("key %q is not documented in configs/annexd.example.toml", k)
		}
	}
}

func schemaKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("toml")
		if name == "" || name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == t.PkgPath() {
			out = append(out, schemaKeys(f.Type, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// A value a flag gave is named by the flag; one the file gave by the key
// and the file.
func TestInvalidNamesTheFlag(t *testing.T) {
	c := Config{File: "/etc/annexd.toml", Backend: "SHA257E"}
	c.SetByFlag("backend", "--backend")
	if _, err := c.BackendValue(); err == nil || !strings.Contains(err.Error(), `--backend "SHA257E"`) || strings.Contains(err.Error(), "annexd.toml") {
		t.Errorf("from the flag: %v", err)
	}
	c = Config{File: "/etc/annexd.toml", Backend: "SHA257E"}
	if _, err := c.BackendValue(); err == nil || !strings.Contains(err.Error(), `backend = "SHA257E" in /etc/annexd.toml`) {
		t.Errorf("from the file: %v", err)
	}
}
