package hub

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/internal/hubwire"
)

// Config configures a hub. Dir and at least one host's credentials are
// required; the zero value of everything else works.
type Config struct {
	// Listen is the host:port hosts connect to ("0" as the port picks
	// one). Empty: no listener, only in-process connections.
	Listen string
	// Dir holds JetStream's file storage (Dir/jetstream) and the view
	// (Dir/view.db).
	Dir string
	// Hosts are the machines that may connect, each with its own
	// credentials.
	Hosts []Host
	// TLS is the server's certificate. It is required when Listen is not
	// a loopback address, unless Plaintext is set.
	TLS *tls.Config
	// Plaintext allows a non-loopback Listen without TLS, for a network
	// that encrypts already (a VPN). Paths and digests then travel in clear.
	Plaintext bool
	// Self names the hub machine's own annexd, which publishes in process
	// (SelfOptions) with credentials made at start. Empty: none.
	Self string
	// StaleAfter is how long a host may stay silent before its copies
	// count as stale. Default 72 h.
	StaleAfter time.Duration
	// MaxStreamBytes bounds the batches waiting to be applied; a host
	// publishing beyond it is refused and retries. Default 1 GiB.
	MaxStreamBytes int64
	// CopyMaxBytes bounds each object bucket of copies from one host to
	// another (one per ordered pair of hosts); a copy larger than it
	// cannot travel. Default 1 GiB.
	CopyMaxBytes int64
	// CopyTTL is how long a copy stays in its bucket when its asker does
	// not fetch it. Default 24 h.
	CopyTTL time.Duration
	// SyncInterval is how often JetStream syncs its files. Default: the
	// server's (2 min). Nothing acknowledged depends on it: hosts keep a
	// change until the view, which syncs every commit, has applied it.
	SyncInterval time.Duration
	// Cluster makes the hub one node of several. Nil: a single hub.
	Cluster *Cluster
	// Logger receives the hub's problems. Default: discard.
	Logger *slog.Logger
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
	// claimLease is how long a publisher holds its host's name after its
	// last word in the stream (claim.go); tests shorten it. Default
	// hubwire.ClaimLease.
	claimLease time.Duration
}

// Host is one machine's credentials: a bcrypt password hash, or the
// public half of a user nkey.
type Host struct {
	Name     string
	Password string // bcrypt hash ("$2a$…", "$2b$…")
	Nkey     string // public user nkey ("U…")
}

// Errors of the configuration.
var (
	// ErrOpen: a hub with no host credentials would be open to anyone.
	ErrOpen = errors.New("hub: no host credentials configured; refusing to run an open hub")
	// ErrConfig: a configuration that cannot work.
	ErrConfig = errors.New("hub: bad configuration")
	// ErrListen: the hub cannot listen where it was told (a port in use).
	ErrListen = errors.New("hub: cannot listen")
)

// internalUser is the hub's own connection, in process only.
const internalUser = "annexd-hub"

func (c *Config) fill() error {
	if c.Dir == "" {
		return fmt.Errorf("%w: no directory", ErrConfig)
	}
	if len(c.Hosts) == 0 {
		return ErrOpen
	}
	seen := map[string]bool{c.Self: c.Self != ""}
	if c.Self != "" {
		if err := hubwire.CheckName(c.Self); err != nil {
			return fmt.Errorf("%w: self: %v", ErrConfig, err)
		}
	}
	for _, h := range c.Hosts {
		if err := checkHost(h); err != nil {
			return err
		}
		if seen[h.Name] || h.Name == internalUser {
			return fmt.Errorf("%w: host %q named twice (or the hub's own name)", ErrConfig, h.Name)
		}
		seen[h.Name] = true
	}
	if c.Listen != "" {
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("%w: listen %q: %v", ErrConfig, c.Listen, err)
		}
		if c.TLS == nil && !c.Plaintext && !loopback(host) {
			return fmt.Errorf("%w: listen %q is not a loopback address: give a TLS certificate, or allow plaintext on a network that encrypts already", ErrConfig, c.Listen)
		}
	}
	if err := c.checkCluster(); err != nil {
		return err
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 72 * time.Hour
	}
	if c.MaxStreamBytes <= 0 {
		c.MaxStreamBytes = 1 << 30
	}
	if c.CopyMaxBytes <= 0 {
		c.CopyMaxBytes = 1 << 30
	}
	if c.CopyTTL <= 0 {
		c.CopyTTL = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

func checkHost(h Host) error {
	if err := hubwire.CheckName(h.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch {
	case (h.Password == "") == (h.Nkey == ""):
		return fmt.Errorf("%w: host %q needs exactly one of a password hash or an nkey", ErrConfig, h.Name)
	case h.Password != "" && !isBcrypt(h.Password):
		return fmt.Errorf("%w: host %q: the password must be a bcrypt hash, not the password itself", ErrConfig, h.Name)
	case h.Nkey != "" && !nkeys.IsValidPublicUserKey(h.Nkey):
		return fmt.Errorf("%w: host %q: %q is not a public user nkey", ErrConfig, h.Name, h.Nkey)
	}
	return nil
}

func isBcrypt(s string) bool {
	for _, p := range []string{"$2a$", "$2b$", "$2y$"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// known lists the hosts the hub answers for: the configured hosts, its
// own machine's annexd and a cluster's nodes, which publish in process.
func (c *Config) known() map[string]bool {
	out := map[string]bool{}
	for _, h := range c.Hosts {
		out[h.Name] = true
	}
	if c.Self != "" {
		out[c.Self] = true
	}
	if c.Cluster != nil {
		for _, n := range c.Cluster.Nodes {
			out[n] = true
		}
	}
	return out
}

// hostPermissions lets a host publish its own changes and its own
// requests, and read only its own replies and acks. A host's requests
// name it in their subject: the hub answers only there.
func hostPermissions(name string, known map[string]bool) *server.Permissions {
	p := &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			hubwire.ChangesPrefix + name, hubwire.StatePrefix + name, hubwire.QuerySubject(name, "*"),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			hubwire.InboxPrefix + name + ".>", hubwire.AckPrefix + name,
		}},
	}
	copyPermissions(p, name, known)
	return p
}

// hubPermissions are the hub's own connection's: the JetStream calls its
// stream and consumers need, acks of the batches it applied, answers
// into the inboxes and ack subjects of the known hosts, and the copy
// buckets' calls (copyHubPermissions). Nothing else, so that not even a
// bug can publish into a host's changes or requests, or ask JetStream to
// purge, or delete anything but the bucket of a host no longer
// configured.
func hubPermissions(known map[string]bool, stale []string) *server.Permissions {
	st := hubwire.Stream
	pub := []string{
		"$JS.API.STREAM.CREATE." + st, "$JS.API.STREAM.UPDATE." + st, "$JS.API.STREAM.INFO." + st,
		"$JS.API.CONSUMER.CREATE." + st + ".>", "$JS.API.CONSUMER.DURABLE.CREATE." + st + ".>",
		"$JS.API.CONSUMER.INFO." + st + ".>", "$JS.API.CONSUMER.MSG.NEXT." + st + ".>",
		"$JS.ACK." + st + ".>", hubwire.ClaimPrefix + "*",
	}
	pub = append(pub, copyHubPermissions(known, stale)...)
	for name := range known {
		pub = append(pub, hubwire.InboxPrefix+name+".>", hubwire.AckPrefix+name)
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{
			hubwire.StatePrefix + "*", hubwire.QuerySubject("*", "*"), internalInbox + ".>",
		}},
	}
}

// internalInbox is the inbox prefix of the hub's own connection.
const internalInbox = "_INBOX"

// inProcHash is the bcrypt hash the server keeps of an in-process user's
// password, a random secret: at the least cost, as nothing can guess it.
// A plaintext one made the server warn "Plaintext passwords detected".
func inProcHash(secret string) string {
	h, err := bcrypt.GenerateFromPassword([]byte(secret), bcrypt.MinCost)
	if err != nil {
		return secret // longer than bcrypt takes: randomSecret's never is
	}
	return string(h)
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// serverOptions builds the embedded server's options.
func (c *Config) serverOptions(internalPass, selfPass string, stale []string) (*server.Options, error) {
	o := &server.Options{
		ServerName: "annexd-hub", JetStream: true, StoreDir: c.storeDir(),
		NoSigs: true, NoLog: true, DontListen: c.Listen == "", SyncInterval: c.SyncInterval,
		AuthTimeout: 5, MaxPayload: 8 << 20, JetStreamMaxStore: 2*c.MaxStreamBytes + c.copyReserve(),
		JetStreamMaxMemory: 64 << 20,
	}
	if c.Listen != "" {
		host, port, _ := net.SplitHostPort(c.Listen)
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("%w: listen port %q", ErrConfig, port)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		o.Host, o.Port = host, p
	}
	if c.TLS != nil {
		o.TLSConfig, o.TLS, o.TLSTimeout = c.TLS, true, 5
	}
	if c.Cluster != nil {
		if err := c.clusterOptions(o); err != nil {
			return nil, err
		}
	}
	known := c.known()
	inProc := map[string]struct{}{jwt.ConnectionTypeInProcess: {}}
	remote := map[string]struct{}{jwt.ConnectionTypeStandard: {}}
	o.Users = []*server.User{{Username: internalUser, Password: inProcHash(internalPass), Permissions: hubPermissions(known, stale),
		AllowedConnectionTypes: inProc}}
	if c.Self != "" {
		o.Users = append(o.Users, &server.User{Username: c.Self, Password: inProcHash(selfPass),
			Permissions: hostPermissions(c.Self, known), AllowedConnectionTypes: inProc})
	}
	for _, h := range c.Hosts {
		if h.Nkey != "" {
			o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: h.Nkey, Permissions: hostPermissions(h.Name, known), AllowedConnectionTypes: remote})
			continue
		}
		o.Users = append(o.Users, &server.User{Username: h.Name, Password: h.Password,
			Permissions: hostPermissions(h.Name, known), AllowedConnectionTypes: remote})
	}
	return o, nil
}

// storeDir is JetStream's directory. A node keeps its clustered store
// apart from a single hub's, which a cluster cannot take over.
func (c *Config) storeDir() string {
	if c.Cluster != nil {
		return filepath.Join(c.Dir, "jetstream-cluster")
	}
	return filepath.Join(c.Dir, "jetstream")
}
