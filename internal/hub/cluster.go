package hub

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubwire"
)

// Cluster joins the hub to other hub nodes over NATS routes. Every node
// runs the same stream, replicated, and keeps a view of its own.
type Cluster struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Listen is the host:port the other nodes' routes connect to.
	Listen string
	// Routes are the other nodes' route URLs (nats-route://host:port).
	// A route to this node itself is ignored.
	Routes []string
	// Nodes names every node by its Config.Self, this one included. Each
	// node makes every node's consumer at start, so none misses a batch.
	Nodes []string
	// Secret is the routes' shared password, the same on every node.
	Secret string
	// TLS encrypts the routes: this node's certificate, and the roots
	// that sign the other nodes'. It is required when Listen is not a
	// loopback address, unless Config.Plaintext is set.
	TLS *tls.Config
}

// routeUser is the user the nodes' routes authenticate as.
const routeUser = "annexd-route"

// maxReplicas is how many nodes hold each batch.
const maxReplicas = 3

func (c *Config) checkCluster() error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: cluster: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	if c.Self == "" {
		return bad("a node needs its own name (self)")
	}
	if c.Listen == "" {
		// The NATS server starts its routes after its client listener.
		return bad("a node needs a listener for hosts")
	}
	if err := hubwire.CheckName(cl.Name); err != nil {
		return bad("name: %v", err)
	}
	if cl.Secret == "" {
		return bad("no route secret: nodes would accept routes from anyone")
	}
	if isBcrypt(cl.Secret) {
		// The server takes a hash for routes coming in, so nodes with
		// the secret and with its hash would form one cluster, each with
		// another key for its claims (claim.go).
		return bad("the route secret is a bcrypt hash: give every node the secret itself")
	}
	host, _, err := net.SplitHostPort(cl.Listen)
	if err != nil {
		return bad("listen %q: %v", cl.Listen, err)
	}
	if cl.TLS == nil && !c.Plaintext && !loopback(host) {
		return bad("listen %q is not a loopback address: give a TLS certificate, or allow plaintext on a network that encrypts already", cl.Listen)
	}
	if len(cl.Routes) == 0 {
		return bad("no routes to the other nodes")
	}
	for _, r := range cl.Routes {
		if _, err := routeURL(r, ""); err != nil {
			return bad("%v", err)
		}
	}
	if !slices.Contains(cl.Nodes, c.Self) {
		return bad("nodes %q do not name this node, %q", cl.Nodes, c.Self)
	}
	seen := map[string]bool{}
	for _, n := range cl.Nodes {
		if err := hubwire.CheckName(n); err != nil {
			return bad("nodes: %v", err)
		}
		if seen[n] {
			return bad("node %q named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// routeURL parses a route's URL and adds the routes' credentials.
func routeURL(s, secret string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "nats-route" || u.Hostname() == "" || u.Port() == "" || u.User != nil {
		return nil, fmt.Errorf("route %q: want nats-route://host:port, without credentials", s)
	}
	u.User = url.UserPassword(routeUser, secret)
	return u, nil
}

// clusterOptions sets the routes and the node's name in o.
func (c *Config) clusterOptions(o *server.Options) error {
	cl := c.Cluster
	host, port, _ := net.SplitHostPort(cl.Listen)
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%w: cluster listen port %q", ErrConfig, port)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	// JetStream tells the nodes apart by their server names.
	o.ServerName = "annexd-" + c.Self
	o.Cluster = server.ClusterOpts{Name: cl.Name, Host: host, Port: p, Username: routeUser,
		Password: cl.Secret, AuthTimeout: 5, TLSConfig: cl.TLS, TLSTimeout: 5}
	for _, r := range cl.Routes {
		u, err := routeURL(r, cl.Secret)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		o.Routes = append(o.Routes, u)
	}
	return nil
}

// replicas is how many nodes hold the stream.
func (c *Config) replicas() int {
	if c.Cluster == nil {
		return 1
	}
	return min(maxReplicas, len(c.Cluster.Nodes))
}

// consumers names the view consumers of the stream: one, or one a node,
// this node's first.
func (c *Config) consumers() []string {
	if c.Cluster == nil {
		return []string{consumerName}
	}
	out := []string{c.ownConsumer()}
	for _, n := range c.Cluster.Nodes {
		if n != c.Self {
			out = append(out, consumerName+"-"+n)
		}
	}
	return out
}

// ownConsumer names the consumer that feeds this node's view.
func (c *Config) ownConsumer() string {
	if c.Cluster == nil {
		return consumerName
	}
	return consumerName + "-" + c.Self
}

// retention keeps a batch until every view applied it: a single hub's
// one consumer takes it off a work queue; a cluster's keeps it until
// each node's consumer acked it.
func (c *Config) retention() jetstream.RetentionPolicy {
	if c.Cluster == nil {
		return jetstream.WorkQueuePolicy
	}
	return jetstream.InterestPolicy
}

// retryable reports whether a JetStream API error may pass once the
// cluster has formed: no leader yet, too few nodes, no answer. A leader
// that does not know enough nodes yet to place the stream answers 400
// "no suitable peers for placement" (10005).
func retryable(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code >= 500 || api.ErrorCode == errCodeNoPeers
	}
	return true
}

// errCodeNoPeers is the server's JSClusterNoPeersErrF.
const errCodeNoPeers jetstream.ErrorCode = 10005

// checkDir refuses a cluster node a view that a single hub left: the
// other nodes' views lack what it holds, and nothing would resend it.
func (c *Config) checkDir() error {
	if c.Cluster == nil {
		return nil
	}
	_, errView := os.Stat(filepath.Join(c.Dir, "view.db"))
	_, errStore := os.Stat(c.storeDir())
	if errView == nil && errors.Is(errStore, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s holds a single hub's view; give each cluster node a new directory (hosts then send their indexes whole once)", ErrConfig, c.Dir)
	}
	return nil
}
