package hub_test

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// waitFor is how long a test waits for the hub to catch up: long enough
// for a loaded machine, never part of what is asserted.
const waitFor = 3 * time.Minute

// cluster is a hub and the hosts that publish to it, all in this process.
type cluster struct {
	t      *testing.T
	dir    string
	cfg    hub.Config
	hub    *hub.Hub
	stop   context.CancelFunc
	done   chan error
	url    string
	hosts  map[string]*host
	creds  map[string][]nats.Option
	digest map[string]bool // every digest any tree held, for exact comparisons
	logs   *syncBuffer     // the hub's log, shown when the test fails
}

// host is one machine: its tree, its index and its publisher.
type host struct {
	name   string
	root   string
	dbPath string
	st     *store.Store
	stopW  func()
	pub    *publish.Publisher
	stopP  context.CancelFunc
	doneP  chan error
	id     [16]byte
	batch  int
	// instance is the publisher's instance file (publish.LoadInstance).
	instance string
}

// newCluster starts a hub with a listener on loopback, the hub's own host
// "nas" publishing in process, "laptop" with an nkey and "desktop" with
// a password.
func newCluster(t *testing.T) *cluster { return newClusterTLS(t, nil) }

// newClusterTLS is newCluster with the hub's listener on TLS when cert
// is not nil.
func newClusterTLS(t *testing.T, cert *tls.Config) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), hosts: map[string]*host{}, creds: map[string][]nats.Option{}, digest: map[string]bool{},
		logs: &syncBuffer{}}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	hash, err := bcrypt.GenerateFromPassword([]byte("desktop-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	c.creds["laptop"] = []nats.Option{nats.Nkey(pub, kp.Sign)}
	c.creds["desktop"] = []nats.Option{nats.UserInfo("desktop", "desktop-secret")}
	c.cfg = hub.Config{
		Listen: "127.0.0.1:0", Dir: filepath.Join(c.dir, "hub"), Self: "nas",
		Hosts:  []hub.Host{{Name: "laptop", Nkey: pub}, {Name: "desktop", Password: string(hash)}},
		TLS:    cert,
		Logger: slog.New(slog.NewTextHandler(c.logs, nil)),
	}
	c.startHub()
	t.Cleanup(func() {
		c.close()
		if t.Failed() {
			t.Logf("the hub's log:\n%s", c.logs.tail(100))
		}
	})
	return c
}

func (c *cluster) startHub() {
	c.t.Helper()
	h, err := hub.New(c.cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
	case err := <-done:
		cancel()
		c.t.Fatalf("hub: %v", err)
	}
	c.hub, c.stop, c.done, c.url = h, cancel, done, h.ClientURL()
	// A restarted hub listens where the first one did.
	c.cfg.Listen = strings.TrimPrefix(c.url, "nats://")
}

// testLease is the claim lease of shortLease: well beyond the test
// publishers' 2 s heartbeat, short enough to wait out.
const testLease = 8 * time.Second

// shortLease restarts the hub with a claim lease of testLease.
func (c *cluster) shortLease() {
	c.t.Helper()
	c.stopHub()
	hub.SetClaimLease(&c.cfg, testLease)
	c.startHub()
}

func (c *cluster) stopHub() {
	c.t.Helper()
	if c.stop == nil {
		return
	}
	c.stop()
	if err := <-c.done; err != nil {
		c.t.Errorf("hub Run: %v", err)
	}
	c.stop = nil
}

func (c *cluster) close() {
	for _, h := range c.hosts {
		h.stopPublisher(c.t)
		h.closeStore(c.t)
	}
	c.stopHub()
}

// addHost makes a host with an empty tree, its index open and its
// publisher running.
func (c *cluster) addHost(name string) *host {
	c.t.Helper()
	dir := filepath.Join(c.dir, name)
	h := &host{name: name, root: filepath.Join(dir, "tree"), dbPath: filepath.Join(dir, "index.db"), batch: 500,
		instance: filepath.Join(dir, "host-id-publisher")}
	if err := os.MkdirAll(h.root, 0o755); err != nil {
		c.t.Fatal(err)
	}
	id, err := publish.LoadHostID(filepath.Join(dir, "host-id"))
	if err != nil {
		c.t.Fatal(err)
	}
	h.id = id
	h.openStore(c.t)
	c.hosts[name] = h
	c.startPublisher(h)
	return h
}

func (h *host) openStore(t *testing.T) {
	t.Helper()
	st, err := store.Open(h.dbPath, store.Options{NoSync: true, Changes: true, MaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := st.Run(ctx); err != nil {
			t.Errorf("store Run: %v", err)
		}
	}()
	h.st, h.stopW = st, func() { cancel(); wg.Wait() }
}

func (h *host) closeStore(t *testing.T) {
	if h.st == nil {
		return
	}
	h.stopW()
	if err := h.st.Close(); err != nil {
		t.Errorf("close %s: %v", h.dbPath, err)
	}
	h.st = nil
}

func (c *cluster) startPublisher(h *host) {
	c.t.Helper()
	// A restart in the same boot keeps the publisher's instance, as the
	// daemon's does.
	inst, err := publish.LoadInstance(h.instance)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := publish.Config{Name: h.name, HostID: h.id, URL: c.url, Options: c.creds[h.name],
		Batch: h.batch, Poll: 5 * time.Millisecond, Heartbeat: 2 * time.Second, Timeout: 5 * time.Second, Instance: inst}
	if h.name == c.cfg.Self {
		cfg.URL, cfg.Options = "", c.hub.SelfOptions()
	}
	p, err := publish.New(h.st, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	h.pub, h.stopP, h.doneP = p, cancel, done
}

func (h *host) stopPublisher(t *testing.T) {
	if h.stopP == nil {
		return
	}
	h.stopP()
	if err := <-h.doneP; err != nil {
		t.Errorf("publisher %s: %v", h.name, err)
	}
	h.stopP = nil
}

// write makes files under the host's tree: relative path → content.
func (h *host) write(t *testing.T, files map[string]string) {
	t.Helper()
	for rel, data := range files {
		p := filepath.Join(h.root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tree returns path → hex SHA-256 of every file under the host's root,
// computed from the files themselves.
func (h *host) tree(t *testing.T) map[string]string {
	t.Helper()
	return testutil.TreeDigests(t, h.root)
}

// index brings the host's index in line with its tree, as the indexer
// would: a record for every file, none for a file that went away.
func (h *host) index(t *testing.T, c *cluster) {
	t.Helper()
	files := h.tree(t)
	var cs []store.Change
	for p, d := range files {
		c.digest[d] = true
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		dig, _ := hex.DecodeString(d)
		r := store.Record{Backend: key.SHA256E, Digest: dig, Size: st.Size, MtimeNs: st.Mtim.Nano(),
			CtimeNs: st.Ctim.Nano(), Dev: st.Dev, Ino: st.Ino, HashedAt: time.Now().UnixNano()}
		cs = append(cs, store.Change{Op: store.OpPut, Path: []byte(p), Record: r})
	}
	if err := h.st.Subtree(context.Background(), []byte("/"), func(path []byte, _ store.Record) error {
		if _, ok := files[string(path)]; !ok {
			cs = append(cs, store.Change{Op: store.OpDelete, Path: path})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, len(cs))
	for _, c := range cs {
		h.st.Submit(c, func(err error) { errs <- err })
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// caughtUp waits until the hub's view has applied every change of h.
func (h *host) caughtUp(t *testing.T) publish.Status {
	t.Helper()
	return h.caughtUpWithin(t, waitFor, false)
}

// caughtUpWithin is caughtUp that fails after d, or at once when strict
// and h sees more acknowledged than its index holds.
func (h *host) caughtUpWithin(t *testing.T, d time.Duration, strict bool) publish.Status {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		local, err := h.st.ChangeLog()
		if err != nil {
			t.Fatal(err)
		}
		s := h.pub.Status()
		if strict && s.IndexID == local.IndexID.String() && s.Acked > local.Seq {
			t.Fatalf("%s: acknowledged %d of %d changes", h.name, s.Acked, local.Seq)
		}
		if s.IndexID == local.IndexID.String() && s.Acked == local.Seq && !s.Resending {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the hub did not catch up in %s: local %+v, status %+v", h.name, d, local, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cluster) client(t *testing.T, name string) *hub.Client {
	t.Helper()
	h := c.hosts[name]
	deadline := time.Now().Add(waitFor)
	for h.pub.Conn() == nil || !h.pub.Conn().IsConnected() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never connected", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return hub.NewClient(h.pub.Conn(), h.name)
}

// hostStates asks through host asker for every host's state, retrying
// while asker's connection is not back yet (after a hub restart).
func (c *cluster) hostStates(t *testing.T, asker string) []hubwire.State {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		st, err := c.client(t, asker).Hosts(context.Background())
		if err == nil {
			return st
		}
		if !errors.Is(err, hub.ErrUnreachable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holders maps host → sorted paths, as a whereis answer or as expected.
type holders map[string][]string

func fromReply(t *testing.T, c hubwire.Content) holders {
	t.Helper()
	out := holders{}
	for _, h := range c.Holders {
		for _, p := range h.Paths {
			out[h.Host] = append(out[h.Host], string(p))
		}
		sort.Strings(out[h.Host])
		if len(slices.Compact(slices.Clone(out[h.Host]))) != len(out[h.Host]) {
			t.Fatalf("%s lists a path twice: %q", h.Host, out[h.Host])
		}
	}
	return out
}

// matchTrees asks through host asker where every digest any tree ever
// held is, and compares the answers with the trees.
func (c *cluster) matchTrees(t *testing.T, asker string) {
	t.Helper()
	want := map[string]holders{}
	for name, h := range c.hosts {
		for p, d := range h.tree(t) {
			c.digest[d] = true
			if want[d] == nil {
				want[d] = holders{}
			}
			want[d][name] = append(want[d][name], p)
		}
	}
	cl := c.client(t, asker)
	for d := range c.digest {
		for _, ps := range want[d] {
			sort.Strings(ps)
		}
		got, err := cl.Whereis(context.Background(), "SHA256", d, -1)
		if err != nil {
			t.Fatalf("whereis %s: %v", d, err)
		}
		g := fromReply(t, got)
		if len(want[d]) == 0 && len(g) == 0 {
			continue
		}
		if !equalHolders(g, want[d]) {
			t.Fatalf("whereis %s: hub says %v, trees say %v", d, g, want[d])
		}
	}
}

func equalHolders(a, b holders) bool {
	if len(a) != len(b) {
		return false
	}
	for h, ps := range a {
		if !slices.Equal(ps, b[h]) {
			return false
		}
	}
	return true
}
