package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of the [hub] and [publish] sections.
const (
	DefaultStaleAfter     = 72 * time.Hour
	DefaultMaxStreamBytes = Size(1 << 30)
	DefaultPublishBatch   = 4096
	DefaultHeartbeat      = time.Minute
	DefaultCopyMaxBytes   = Size(1 << 30)
	DefaultCopyTTL        = 24 * time.Hour
	// DefaultCopyRate paces a copy between hosts: 20 MiB a second.
	DefaultCopyRate = Rate(20 << 20)
)

// Hub configures the embedded hub that other hosts publish their changes
// to. It is off unless Enabled (or annexd --hub).
type Hub struct {
	Enabled bool `toml:"enabled"`
	// Listen is the host:port other hosts connect to.
	Listen string `toml:"listen"`
	// Dir holds the hub's stream and view; default <index>-hub.
	Dir string `toml:"dir"`
	// TLSCert and TLSKey are the listener's certificate and key (PEM).
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// Plaintext allows a non-loopback listener without TLS (a VPN).
	Plaintext bool `toml:"plaintext"`
	// StaleAfter is how long a silent host's copies are still trusted.
	StaleAfter time.Duration `toml:"stale_after"`
	// MaxStreamBytes bounds the batches waiting to be applied.
	MaxStreamBytes Size `toml:"max_stream_bytes"`
	// CopyMaxBytes bounds each object bucket of copies from one host to
	// another; CopyTTL is how long a copy nobody fetched stays there.
	CopyMaxBytes Size          `toml:"copy_max_bytes"`
	CopyTTL      time.Duration `toml:"copy_ttl"`
	// Hosts are the machines that may publish, each with its credentials.
	// A cluster's nodes share one list.
	Hosts []HubHost `toml:"host"`
	// Cluster makes this hub one node of several; off while empty.
	Cluster HubCluster `toml:"cluster"`
}

// HubCluster is [hub.cluster]: the routes between hub nodes. The routes
// share the hub's tls_cert and tls_key.
type HubCluster struct {
	// Name is the cluster's name, the same on every node.
	Name string `toml:"name"`
	// Listen is the host:port the other nodes' routes connect to.
	Listen string `toml:"listen"`
	// Routes are the other nodes' nats-route://host:port URLs.
	Routes []string `toml:"routes"`
	// Nodes are the publish names of every node, this one included.
	Nodes []string `toml:"nodes"`
	// PasswordFile holds the routes' shared secret, the same on every node.
	PasswordFile string `toml:"password_file"`
	// CAFile is the PEM bundle that signs the other nodes' certificates,
	// when the system's roots do not.
	CAFile string `toml:"ca_file"`
}

// On reports whether any key of [hub.cluster] is set.
func (h HubCluster) On() bool {
	return h.Name != "" || h.Listen != "" || len(h.Routes) > 0 || len(h.Nodes) > 0 || h.PasswordFile != "" || h.CAFile != ""
}

// HubHost is one [[hub.host]]: a name and exactly one credential.
type HubHost struct {
	Name string `toml:"name"`
	// Nkey is the public half of the host's user nkey ("U…").
	Nkey string `toml:"nkey"`
	// PasswordHash is a bcrypt hash of the host's password.
	PasswordHash string `toml:"password_hash"`
}

// Publish configures how this daemon sends its changes to a hub on
// another machine. It is off while Hub is empty.
type Publish struct {
	// Hub is the hub's URL: tls://nas:4222, or nats:// on a loopback or
	// VPN. A cluster's nodes are listed with commas between them; the
	// connection fails over from one to the next.
	Hub string `toml:"hub"`
	// Name is this host's name at the hub; default the short host name.
	Name string `toml:"name"`
	// NkeySeedFile or PasswordFile holds this host's secret.
	NkeySeedFile string `toml:"nkey_seed_file"`
	PasswordFile string `toml:"password_file"`
	// CAFile is the PEM bundle that signs the hub's certificate, when the
	// system's roots do not.
	CAFile string `toml:"ca_file"`
	// Batch is the most changes one message carries.
	Batch int `toml:"batch"`
	// Heartbeat is how often an idle host tells the hub it is alive.
	Heartbeat time.Duration `toml:"heartbeat"`
	// CopyRate paces copies sent to and fetched from other hosts.
	CopyRate Rate `toml:"copy_rate"`
}

// Linked reports whether the daemon keeps a change log for a hub: it runs
// one, or publishes to one.
func (c *Config) Linked() bool { return c.Hub.Enabled || c.Publish.Hub != "" }

// fillHub sets the defaults of [hub] and [publish] and makes their paths
// absolute. It runs after Index is filled.
func (c *Config) fillHub() error {
	h, p := &c.Hub, &c.Publish
	if h.Dir == "" {
		h.Dir = c.Index + "-hub"
	}
	if h.StaleAfter == 0 {
		h.StaleAfter = DefaultStaleAfter
	}
	if h.MaxStreamBytes == 0 {
		h.MaxStreamBytes = DefaultMaxStreamBytes
	}
	if h.CopyMaxBytes == 0 {
		h.CopyMaxBytes = DefaultCopyMaxBytes
	}
	if h.CopyTTL == 0 {
		h.CopyTTL = DefaultCopyTTL
	}
	if p.CopyRate == 0 {
		p.CopyRate = DefaultCopyRate
	}
	if p.Batch == 0 {
		p.Batch = DefaultPublishBatch
	}
	if p.Heartbeat == 0 {
		p.Heartbeat = DefaultHeartbeat
	}
	for _, f := range []*string{&h.Dir, &h.TLSCert, &h.TLSKey, &h.Cluster.PasswordFile, &h.Cluster.CAFile,
		&p.NkeySeedFile, &p.PasswordFile, &p.CAFile} {
		if *f == "" {
			continue
		}
		var err error
		if *f, err = absPath(*f); err != nil {
			return err
		}
	}
	return nil
}

// validateHub checks [hub] and [publish]. The credentials themselves are
// checked when the daemon reads them.
func (c *Config) validateHub() error {
	if err := c.validateHubSection(); err != nil {
		return err
	}
	p := c.Publish
	if p.Hub == "" {
		return nil
	}
	if c.Hub.Enabled {
		return c.invalid("publish.hub", p.Hub, "empty when [hub] is enabled: the hub's own machine publishes in process")
	}
	for _, s := range strings.Split(p.Hub, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" || u.User != nil {
			return c.invalid("publish.hub", p.Hub, `a URL such as "tls://nas.local:4222" (nats:// only on a loopback or VPN), without credentials; a cluster's nodes separated by commas`)
		}
	}
	if (p.NkeySeedFile == "") == (p.PasswordFile == "") {
		return c.invalid("publish.nkey_seed_file", p.NkeySeedFile, "exactly one of nkey_seed_file and password_file")
	}
	if p.Batch < 1 {
		return c.invalid("publish.batch", fmt.Sprint(p.Batch), "a count ≥ 1")
	}
	if p.Heartbeat < 0 {
		return c.invalid("publish.heartbeat", p.Heartbeat.String(), "a duration > 0")
	}
	return nil
}

func (c *Config) validateHubSection() error {
	h := c.Hub
	if !h.Enabled {
		return nil
	}
	if _, _, err := net.SplitHostPort(h.Listen); err != nil {
		return c.invalid("hub.listen", h.Listen, `the address other hosts connect to, such as "0.0.0.0:4222" (with tls_cert and tls_key)`)
	}
	if (h.TLSCert == "") != (h.TLSKey == "") {
		return c.invalid("hub.tls_key", h.TLSKey, "both tls_cert and tls_key, or neither")
	}
	if len(h.Hosts) == 0 {
		return c.invalid("hub.host", "", "at least one [[hub.host]] with a name and its nkey or password_hash: a hub open to anyone is refused")
	}
	if h.StaleAfter < 0 {
		return c.invalid("hub.stale_after", h.StaleAfter.String(), "a duration > 0")
	}
	for _, host := range h.Hosts {
		if (host.Nkey == "") == (host.PasswordHash == "") {
			return c.invalid("hub.host.nkey", host.Name, "exactly one of nkey and password_hash for each [[hub.host]]")
		}
	}
	return c.validateCluster()
}

// validateCluster checks [hub.cluster], when any of it is set.
func (c *Config) validateCluster() error {
	h, cl := c.Hub, c.Hub.Cluster
	if !cl.On() {
		return nil
	}
	if !plainName(cl.Name) {
		return c.invalid("hub.cluster.name", cl.Name, "the cluster's name, the same on every node: letters, digits, - and _")
	}
	host, _, err := net.SplitHostPort(cl.Listen)
	if err != nil {
		return c.invalid("hub.cluster.listen", cl.Listen, `the address the other nodes' routes connect to, such as "0.0.0.0:6222"`)
	}
	if h.TLSCert == "" && !h.Plaintext && !loopback(host) {
		return c.invalid("hub.cluster.listen", cl.Listen, "a loopback address, or hub.tls_cert and hub.tls_key (the routes use them), or hub.plaintext on a network that encrypts already")
	}
	if len(cl.Routes) == 0 {
		return c.invalid("hub.cluster.routes", "", `the other nodes' routes, such as ["nats-route://nas2.lan:6222", "nats-route://nas3.lan:6222"]`)
	}
	for _, r := range cl.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "nats-route" || u.Hostname() == "" || u.Port() == "" || u.User != nil {
			return c.invalid("hub.cluster.routes", r, "nats-route://host:port, without credentials (they come from password_file)")
		}
	}
	if err := c.validateNodes(); err != nil {
		return err
	}
	if cl.PasswordFile == "" {
		return c.invalid("hub.cluster.password_file", "", "a file holding the routes' shared secret, the same on every node: routes open to anyone are refused")
	}
	return nil
}

func (c *Config) validateNodes() error {
	cl := c.Hub.Cluster
	seen := map[string]bool{}
	for _, n := range cl.Nodes {
		if !plainName(n) || seen[n] {
			return c.invalid("hub.cluster.nodes", n, "each node's publish name once: letters, digits, - and _")
		}
		seen[n] = true
	}
	if len(cl.Nodes) < 2 {
		return c.invalid("hub.cluster.nodes", strings.Join(cl.Nodes, ","), `every node's publish name, this one's included, such as ["nas1", "nas2", "nas3"]`)
	}
	if name := c.Publish.Name; name != "" && !seen[name] {
		return c.invalid("hub.cluster.nodes", strings.Join(cl.Nodes, ","), "a list naming this node, publish.name = "+strconv.Quote(name))
	}
	return nil
}

// plainName reports whether s is a non-empty run of letters, digits, -
// and _, which NATS takes in server, cluster and consumer names.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
