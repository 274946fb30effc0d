package config

import (
	"fmt"
	"net"
	"net/url"
	"time"
)

// Defaults of the [hub] and [publish] sections.
const (
	DefaultStaleAfter     = 72 * time.Hour
	DefaultMaxStreamBytes = Size(1 << 30)
	DefaultPublishBatch   = 4096
	DefaultHeartbeat      = time.Minute
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
	// Hosts are the machines that may publish, each with its credentials.
	Hosts []HubHost `toml:"host"`
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
	// Hub is the hub's URL: tls://nas:4222, or nats:// on a loopback or VPN.
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
	if p.Batch == 0 {
		p.Batch = DefaultPublishBatch
	}
	if p.Heartbeat == 0 {
		p.Heartbeat = DefaultHeartbeat
	}
	for _, f := range []*string{&h.Dir, &h.TLSCert, &h.TLSKey, &p.NkeySeedFile, &p.PasswordFile, &p.CAFile} {
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
	u, err := url.Parse(p.Hub)
	if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" || u.User != nil {
		return c.invalid("publish.hub", p.Hub, `a URL such as "tls://nas.local:4222" (nats:// only on a loopback or VPN), without credentials`)
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
	return nil
}
