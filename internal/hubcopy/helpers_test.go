package hubcopy_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubcopy"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Remote is the heal package's interface of a copy source on another
// host (internal/heal, declared there): a Copier must meet it.
type Remote interface {
	Fetch(ctx context.Context, key string, w io.Writer) (host string, err error)
}

var _ Remote = (*hubcopy.Copier)(nil)

// copyMaxBytes bounds each copy bucket of the tests' hubs.
var copyMaxBytes int64 = 32 << 20

// waitFor bounds a wait for the hub on a loaded machine; never asserted.
const waitFor = 2 * time.Minute

// world is a hub and its hosts, each with its index, its publisher and
// its copier, all in this process over the hub's loopback listener.
type world struct {
	t     testing.TB
	dir   string
	hub   *hub.Hub
	url   string
	creds map[string][]nats.Option
	hosts map[string]*host
	logs  *testutil.Buffer
	// answer is the hosts' wait for a holder's answer (Config.Answer);
	// 0 means the default.
	answer time.Duration
}

type host struct {
	name string
	root string
	st   *store.Store
	pub  *publish.Publisher
	cp   *hubcopy.Copier
	// stopCopier ends the host's copier: it no longer answers.
	stopCopier func()
}

// newWorld starts a hub that knows laptop (an nkey), desktop and
// intruder (passwords).
func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{t: t, dir: t.TempDir(), creds: map[string][]nats.Option{}, hosts: map[string]*host{}, logs: &testutil.Buffer{}}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	w.creds["laptop"] = []nats.Option{nats.Nkey(pub, kp.Sign)}
	hosts := []hub.Host{{Name: "laptop", Nkey: pub}}
	for _, n := range []string{"desktop", "intruder"} {
		hash, err := bcrypt.GenerateFromPassword([]byte(n+"-secret"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		w.creds[n] = []nats.Option{nats.UserInfo(n, n+"-secret")}
		hosts = append(hosts, hub.Host{Name: n, Password: string(hash)})
	}
	h, err := hub.New(hub.Config{Listen: "127.0.0.1:0", Dir: filepath.Join(w.dir, "hub"), Hosts: hosts,
		MaxStreamBytes: 64 << 20, CopyMaxBytes: copyMaxBytes, CopyTTL: time.Hour,
		Logger: slog.New(slog.NewTextHandler(w.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
		if t.Failed() || os.Getenv("HUBCOPY_LOG") != "" {
			t.Logf("the hub's log:\n%s", w.logs.String())
		}
	})
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatalf("hub: %v", err)
	}
	w.hub, w.url = h, h.ClientURL()
	return w
}

// addHost starts a host whose tree lives in root; copyURL, unless empty,
// is where its copier dials the hub (a proxy).
func (w *world) addHost(name, root, copyURL string, rate int64) *host {
	t := w.t
	t.Helper()
	h := &host{name: name, root: root}
	st, err := store.Open(filepath.Join(w.dir, name+".db"), store.Options{NoSync: true, Changes: true, MaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(what string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				t.Errorf("%s %s: %v", name, what, err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	run("store", st.Run)
	id, err := publish.LoadHostID(filepath.Join(w.dir, name+"-id"))
	if err != nil {
		t.Fatal(err)
	}
	h.pub, err = publish.New(st, publish.Config{Name: name, HostID: id, URL: w.url, Options: w.creds[name],
		Poll: 5 * time.Millisecond, Heartbeat: 2 * time.Second, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run("publisher", h.pub.Run)
	if copyURL == "" {
		copyURL = w.url
	}
	h.cp, err = hubcopy.New(hubcopy.Config{Name: name, URL: copyURL, Options: w.creds[name], Index: index{h.pub, name},
		Store: st, Rate: rate, Stall: time.Second, Answer: w.answer, Logger: slog.New(slog.NewTextHandler(w.logs, nil)).With("host", name)})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	h.stopCopier = stop
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := h.cp.Run(cctx); err != nil && ctx.Err() == nil && cctx.Err() == nil {
			t.Errorf("%s copier: %v", name, err)
		}
	}()
	w.hosts[name] = h
	return h
}

// index asks the hub's view over the publisher's connection.
type index struct {
	p    *publish.Publisher
	name string
}

func (x index) Whereis(ctx context.Context, backend, digest string, size int64) (hubwire.Content, error) {
	nc := x.p.Conn()
	if nc == nil {
		return hubwire.Content{}, errors.New("not connected")
	}
	return hub.NewClient(nc, x.name).Whereis(ctx, backend, digest, size)
}

// put writes a file of n random bytes under the host's tree, indexes it
// as the indexer would, waits for the hub to have it, and returns its
// key and bytes.
func (h *host) put(t testing.TB, rel string, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	return h.putBytes(t, rel, data), data
}

// putBytes writes and indexes a file as put does, and returns its key.
func (h *host) putBytes(t testing.TB, rel string, data []byte) string {
	t.Helper()
	n := len(data)
	p := filepath.Join(h.root, rel)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := fsstat.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	r := store.Record{Backend: key.SHA256E, Digest: sum[:], Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs,
		Dev: fi.Dev, Ino: fi.Ino, HashedAt: time.Now().UnixNano()}
	if err := h.st.Put(context.Background(), []byte(p), r); err != nil {
		t.Fatal(err)
	}
	h.caughtUp(t)
	return fmt.Sprintf("SHA256E-s%d--%s%s", n, hex.EncodeToString(sum[:]), filepath.Ext(rel))
}

// caughtUp waits until the hub's view has applied h's changes.
func (h *host) caughtUp(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		local, err := h.st.ChangeLog()
		if err != nil {
			t.Fatal(err)
		}
		s := h.pub.Status()
		if s.IndexID == local.IndexID.String() && s.Acked == local.Seq && !s.Resending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the hub did not catch up", h.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fetch fetches k through h, waiting first for its links to be up.
func (h *host) fetch(t testing.TB, k string, w io.Writer) (string, error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		from, err := h.cp.Fetch(context.Background(), k, w)
		if (errors.Is(err, hubcopy.ErrLink) || err != nil && strings.Contains(err.Error(), "not connected")) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return from, err
	}
}

// connect opens a plain connection with name's credentials.
func (w *world) connect(t testing.TB, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append(append([]nats.Option{nats.CustomInboxPrefix(hubwire.InboxPrefix + name)}, w.creds[name]...), opts...)
	nc, err := nats.Connect(w.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// proxy forwards TCP connections to the hub until cut.
type proxy struct {
	ln      net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	blocked time.Time // refuse connections until then
}

func newProxy(t testing.TB, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	addr := strings.TrimPrefix(to, "nats://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			blocked := time.Now().Before(p.blocked)
			p.mu.Unlock()
			if blocked {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

// block breaks every connection through the proxy, and refuses new
// ones for d.
func (p *proxy) block(d time.Duration) {
	p.mu.Lock()
	p.blocked = time.Now().Add(d)
	p.mu.Unlock()
	p.cut()
}

// cut breaks every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
