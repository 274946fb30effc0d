package hub_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/annexd/annexd/internal/testutil"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/annexd/annexd/internal/hub"
)

// node is one hub of a cluster, in this process.
type node struct {
	cfg  hub.Config
	hub  *hub.Hub
	stop context.CancelFunc
	done chan error
}

// freePort returns a loopback port nothing listens on now, so that a
// node restarted later listens where the others' routes point.
func freePort(t testing.TB) int { return testutil.FreePort(t) }

// newNodes configures n clustered hubs on loopback, with "laptop" as
// their one network host, and a cluster of hosts publishing to them all.
// The routes use routeTLS unless it is nil.
func newNodes(t *testing.T, n int, routeTLS *tls.Config) ([]*node, *cluster, *syncBuffer) {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), hosts: map[string]*host{}, creds: map[string][]nats.Option{}, digest: map[string]bool{}}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	c.creds["laptop"] = []nats.Option{nats.Nkey(pub, kp.Sign)}
	var names, routes, clients []string
	for i := range n {
		names = append(names, fmt.Sprintf("nas%d", i+1))
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(t)))
		clients = append(clients, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var nodes []*node
	for i := range n {
		nodes = append(nodes, &node{cfg: hub.Config{
			Listen: clients[i], Dir: filepath.Join(c.dir, names[i]), Self: names[i],
			Hosts: []hub.Host{{Name: "laptop", Nkey: pub}}, Logger: log.With("node", names[i]),
			Cluster: &hub.Cluster{Name: "annexd", Listen: strings.TrimPrefix(routes[i], "nats-route://"),
				Routes: routes, Nodes: names, Secret: "route-secret", TLS: routeTLS},
		}})
	}
	c.url = "nats://" + strings.Join(clients, ",nats://")
	t.Cleanup(func() {
		c.close()
		for _, nd := range nodes {
			nd.halt(t)
		}
		if t.Failed() {
			t.Logf("the nodes' logs:\n%s", logs.tail(300))
		}
	})
	return nodes, c, logs
}

// start runs the node; ready is closed once it answers.
func (nd *node) start(ready chan<- error) {
	h, err := hub.New(nd.cfg)
	if err != nil {
		ready <- err
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	nd.hub, nd.stop, nd.done = h, cancel, make(chan error, 1)
	go func() { nd.done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
		ready <- nil
	case err := <-nd.done:
		nd.done <- err
		ready <- fmt.Errorf("%s: %w", nd.cfg.Self, err)
	case <-time.After(waitFor):
		ready <- fmt.Errorf("%s not ready in %s", nd.cfg.Self, waitFor)
	}
}

// startAll starts nodes together: a cluster forms only once most of its
// nodes are up.
func startAll(t testing.TB, nodes ...*node) {
	t.Helper()
	ready := make(chan error, len(nodes))
	for _, nd := range nodes {
		go nd.start(ready)
	}
	for range nodes {
		if err := <-ready; err != nil {
			t.Fatal(err)
		}
	}
}

func (nd *node) halt(t testing.TB) {
	if nd.stop == nil {
		return
	}
	nd.stop()
	if err := <-nd.done; err != nil {
		t.Errorf("%s Run: %v", nd.cfg.Self, err)
	}
	nd.stop = nil
}

// converged waits until the node's view has applied every change of h.
func (nd *node) converged(t *testing.T, h *host) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		local, err := h.st.ChangeLog()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range nd.hub.Hosts() {
			if s.Name == h.name && s.Complete && s.IndexID == local.IndexID.String() && s.Seq == local.Seq {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not apply %s's changes in %s: local %+v, view %+v", nd.cfg.Self, h.name, waitFor, local, nd.hub.Hosts())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// matches compares the node's own answers with h's tree, for every
// digest any tree held.
func (nd *node) matches(t *testing.T, c *cluster, h *host) {
	t.Helper()
	want := map[string][]string{}
	for p, d := range h.tree(t) {
		c.digest[d] = true
		want[d] = append(want[d], p)
	}
	for d := range c.digest {
		got, err := nd.hub.Whereis("SHA256", d)
		if err != nil {
			t.Fatalf("%s whereis %s: %v", nd.cfg.Self, d, err)
		}
		exp := holders{}
		if len(want[d]) > 0 {
			exp[h.name] = want[d]
			for _, ps := range exp {
				sort.Strings(ps)
			}
		}
		if g := fromReply(t, got); !equalHolders(g, exp) && (len(g) > 0 || len(exp) > 0) {
			t.Fatalf("%s whereis %s: %v, the tree says %v", nd.cfg.Self, d, g, exp)
		}
	}
}

func (c *cluster) writeMany(t *testing.T, h *host, prefix string, n int) {
	t.Helper()
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("%s/f%03d", prefix, i)] = fmt.Sprintf("%s %d", prefix, i)
	}
	h.write(t, files)
	h.index(t, c)
}

// TestClusterSurvivesANode runs three clustered hubs and one host that
// publishes to all three: every node's own view converges on the host's
// tree; with the stream's leader stopped the other two take new changes
// and answer; the stopped node, started again, catches up.
func TestClusterSurvivesANode(t *testing.T) {
	nodes, c, _ := newNodes(t, 3, nil)
	startAll(t, nodes...)
	laptop := c.addHost("laptop")
	c.writeMany(t, laptop, "first", 150)
	laptop.caughtUp(t)
	for _, nd := range nodes {
		nd.converged(t, laptop)
		nd.matches(t, c, laptop)
	}

	var down *node
	deadline := time.Now().Add(waitFor)
	for down == nil {
		for _, nd := range nodes {
			if nd.hub.StreamLeader() {
				down = nd
			}
		}
		if down == nil && time.Now().After(deadline) {
			t.Fatal("no node leads the stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The host publishes to the leader, and must fail over to another.
	laptop.stopPublisher(t)
	first := "nats://" + down.cfg.Listen
	urls := []string{first}
	for _, nd := range nodes {
		if nd != down {
			urls = append(urls, "nats://"+nd.cfg.Listen)
		}
	}
	c.url = strings.Join(urls, ",")
	c.creds["laptop"] = append(c.creds["laptop"], nats.DontRandomize())
	c.startPublisher(laptop)
	c.client(t, "laptop") // connected
	if u := laptop.pub.Conn().ConnectedUrl(); u != first {
		t.Fatalf("the host connected to %s, not to %s, the first of %s", u, first, c.url)
	}
	down.halt(t)
	var up []*node
	for _, nd := range nodes {
		if nd != down {
			up = append(up, nd)
		}
	}

	if err := os.RemoveAll(filepath.Join(laptop.root, "first")); err != nil {
		t.Fatal(err)
	}
	c.writeMany(t, laptop, "second", 150)
	laptop.caughtUp(t)
	if u := laptop.pub.Conn().ConnectedUrl(); u == first {
		t.Fatalf("the host is still connected to the stopped node %s", u)
	}
	for _, nd := range up {
		nd.converged(t, laptop)
		nd.matches(t, c, laptop)
	}
	// A query through the host reaches a node that is up.
	for _, s := range c.hostStates(t, "laptop") {
		if s.Name == "laptop" && s.Records != 150 {
			t.Fatalf("the cluster holds %d of the laptop's records, want 150", s.Records)
		}
	}

	startAll(t, down)
	down.converged(t, laptop)
	down.matches(t, c, laptop)
	c.writeMany(t, laptop, "third", 50)
	laptop.caughtUp(t)
	for _, nd := range nodes {
		nd.converged(t, laptop)
		nd.matches(t, c, laptop)
	}
}

// syncBuffer keeps the nodes' logs, shown when the test fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestClusterRoutesTLS runs the routes over TLS: the nodes form the
// cluster and converge, and a server with the wrong route secret is
// refused.
func TestClusterRoutesTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	routeTLS := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	nodes, c, logs := newNodes(t, 3, routeTLS)
	startAll(t, nodes...)
	laptop := c.addHost("laptop")
	c.writeMany(t, laptop, "tls", 20)
	laptop.caughtUp(t)
	for _, nd := range nodes {
		nd.converged(t, laptop)
		nd.matches(t, c, laptop)
	}

	route, err := url.Parse(nodes[0].cfg.Cluster.Routes[0])
	if err != nil {
		t.Fatal(err)
	}
	route.User = url.UserPassword("annexd-route", "not-the-secret")
	rogue, err := server.NewServer(&server.Options{ServerName: "rogue", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "annexd", Host: "127.0.0.1", Port: freePort(t), TLSConfig: routeTLS.Clone(), TLSTimeout: 5},
		Routes:  []*url.URL{route}})
	if err != nil {
		t.Fatal(err)
	}
	rogue.SetLoggerV2(testServerLog{logs}, false, false, false)
	go rogue.Start()
	defer rogue.Shutdown()
	// The rogue holds a route for a moment, until the node's refusal
	// reaches it; then none, for as long as it tries again.
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(logs.String(), "authentication error") || rogue.NumRoutes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in %s the nodes did not refuse the rogue route (it holds %d routes)", waitFor, rogue.NumRoutes())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testServerLog struct{ w *syncBuffer }

func (l testServerLog) Noticef(f string, v ...any) { fmt.Fprintf(l.w, "rogue: "+f+"\n", v...) }
func (l testServerLog) Warnf(f string, v ...any)   { fmt.Fprintf(l.w, "rogue: "+f+"\n", v...) }
func (l testServerLog) Errorf(f string, v ...any)  { fmt.Fprintf(l.w, "rogue: "+f+"\n", v...) }
func (l testServerLog) Fatalf(f string, v ...any)  { fmt.Fprintf(l.w, "rogue: "+f+"\n", v...) }
func (l testServerLog) Debugf(f string, v ...any)  { fmt.Fprintf(l.w, "rogue: "+f+"\n", v...) }
func (l testServerLog) Tracef(string, ...any)      {}

// TestClusterConfigRefused: a node refuses routes open to anyone, routes
// in clear beyond loopback unless allowed, and lists that do not name it.
func TestClusterConfigRefused(t *testing.T) {
	base := func() hub.Config {
		return hub.Config{Listen: "127.0.0.1:4222", Dir: t.TempDir(), Self: "nas1",
			Hosts: []hub.Host{{Name: "laptop", Nkey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"}},
			Cluster: &hub.Cluster{Name: "annexd", Listen: "127.0.0.1:6222", Routes: []string{"nats-route://127.0.0.1:6223"},
				Nodes: []string{"nas1", "nas2", "nas3"}, Secret: "s"}}
	}
	if _, err := hub.New(base()); err != nil {
		t.Fatalf("a valid node refused: %v", err)
	}
	for name, edit := range map[string]func(c *hub.Config){
		"no secret":       func(c *hub.Config) { c.Cluster.Secret = "" },
		"hashed secret":   func(c *hub.Config) { c.Cluster.Secret = "$2a$04$abcdefghijklmnopqrstuuJk9n1zlK5l2ckfyMkVdX3l7C1r2Ppui" },
		"clear routes":    func(c *hub.Config) { c.Cluster.Listen = "0.0.0.0:6222" },
		"not in nodes":    func(c *hub.Config) { c.Self = "nas4" },
		"no self":         func(c *hub.Config) { c.Self = "" },
		"no host listen":  func(c *hub.Config) { c.Listen = "" },
		"client route":    func(c *hub.Config) { c.Cluster.Routes = []string{"nats://127.0.0.1:4222"} },
		"secret in route": func(c *hub.Config) { c.Cluster.Routes = []string{"nats-route://u:p@127.0.0.1:6223"} },
		"no routes":       func(c *hub.Config) { c.Cluster.Routes = nil },
		"node twice":      func(c *hub.Config) { c.Cluster.Nodes = []string{"nas1", "nas1"} },
		"bad name":        func(c *hub.Config) { c.Cluster.Name = "a b" },
	} {
		c := base()
		edit(&c)
		if _, err := hub.New(c); !errors.Is(err, hub.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	c := base()
	c.Cluster.Listen, c.Plaintext = "0.0.0.0:6222", true
	if _, err := hub.New(c); err != nil {
		t.Errorf("routes in clear, allowed: %v", err)
	}
}

// TestClusterRefusesASingleHubsDir: a single hub's directory made into a
// cluster node would answer from records the other nodes never get.
func TestClusterRefusesASingleHubsDir(t *testing.T) {
	nodes, _, _ := newNodes(t, 3, nil)
	single := nodes[0].cfg
	single.Cluster = nil
	h, err := hub.New(single)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	node, err := hub.New(nodes[0].cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Run(context.Background()); !errors.Is(err, hub.ErrConfig) || !strings.Contains(err.Error(), nodes[0].cfg.Dir) {
		t.Fatalf("a node on a single hub's directory: %v, want ErrConfig naming %s", err, nodes[0].cfg.Dir)
	}
}
