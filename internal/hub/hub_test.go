package hub_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
)

// TestThreeHosts follows three hosts through the life the hub must
// survive: a file added on one shows on the others; a host offline while
// its files change catches up exactly; a rebuilt index replaces its old
// records. Every step compares the hub's answers with digests of the
// trees.
func TestThreeHosts(t *testing.T) {
	c := newCluster(t)
	nas, laptop, desktop := c.addHost("nas"), c.addHost("laptop"), c.addHost("desktop")
	nas.write(t, map[string]string{"photos/a.jpg": "A", "photos/b.jpg": "B", "docs/x.txt": "X"})
	laptop.write(t, map[string]string{"photos/a.jpg": "A", "notes/n.txt": "N"})
	desktop.write(t, map[string]string{"backup/a.jpg": "A", "backup/x.txt": "X", "only.txt": "D"})
	for _, h := range []*host{nas, laptop, desktop} {
		h.index(t, c)
		h.caughtUp(t)
	}
	c.matchTrees(t, "desktop")

	t.Run("added on one host, seen from the others", func(t *testing.T) {
		laptop.write(t, map[string]string{"new/fresh.bin": "fresh content"})
		laptop.index(t, c)
		laptop.caughtUp(t)
		for _, asker := range []string{"nas", "desktop"} {
			c.matchTrees(t, asker)
		}
	})

	t.Run("offline host catches up exactly", func(t *testing.T) {
		laptop.stopPublisher(t)
		laptop.write(t, map[string]string{"notes/n.txt": "N changed", "notes/m.txt": "M", "photos/c.jpg": "B"})
		if err := os.Remove(filepath.Join(laptop.root, "new/fresh.bin")); err != nil {
			t.Fatal(err)
		}
		oldDir, newDir := filepath.Join(laptop.root, "photos"), filepath.Join(laptop.root, "pictures")
		if err := os.Rename(oldDir, newDir); err != nil {
			t.Fatal(err)
		}
		// The indexer moves a renamed directory's records in one store move.
		if _, err := laptop.st.Move(context.Background(), []byte(oldDir), []byte(newDir)); err != nil {
			t.Fatal(err)
		}
		for i := range 300 { // more than one batch
			laptop.write(t, map[string]string{fmt.Sprintf("many/f%03d", i): fmt.Sprintf("many %d", i)})
		}
		laptop.index(t, c)
		// The rename as the store sees it: the old directory's records
		// moved, the rest put or removed by index.
		c.matchTreesExcept(t, "nas", "laptop")
		c.startPublisher(laptop)
		s := laptop.caughtUp(t)
		if s.Resends != 0 {
			t.Fatalf("the laptop resent its index whole (%d times) instead of its log", s.Resends)
		}
		c.matchTrees(t, "nas")
	})

	t.Run("rebuilt index replaces its old records", func(t *testing.T) {
		desktop.stopPublisher(t)
		desktop.closeStore(t)
		if err := os.Remove(desktop.dbPath); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(desktop.root, "only.txt")); err != nil {
			t.Fatal(err)
		}
		desktop.write(t, map[string]string{"after/rebuild.txt": "R"})
		desktop.openStore(t)
		desktop.index(t, c)
		c.startPublisher(desktop)
		s := desktop.caughtUp(t)
		if s.Resends != 1 {
			t.Fatalf("the rebuilt index was resent %d times, want once", s.Resends)
		}
		c.matchTrees(t, "laptop")
	})
}

// matchTreesExcept checks that the hub still holds what host stale had
// before it went offline: asking is fine, it just is not current.
func (c *cluster) matchTreesExcept(t *testing.T, asker, offline string) {
	t.Helper()
	for _, s := range c.hostStates(t, asker) {
		if s.Name == offline && !s.Complete {
			t.Fatalf("%s lost its records while offline: %+v", offline, s)
		}
	}
}

// TestHubRestartLosesNothingAcknowledged stops the hub while a host
// publishes a large change set and starts it again on the same files: what
// the host saw acknowledged before is still there, and the rest arrives.
func TestHubRestartLosesNothingAcknowledged(t *testing.T) {
	c := newCluster(t)
	laptop := c.addHost("laptop")
	laptop.batch = 20
	laptop.stopPublisher(t)
	c.startPublisher(laptop)
	laptop.write(t, map[string]string{"seed.txt": "seed"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	files := map[string]string{}
	// Enough that the hub stops with most of them unsent (it stops at 200
	// acknowledged), few enough that the rest is sent in seconds.
	for i := range 2000 {
		files[fmt.Sprintf("d%02d/f%05d", i%40, i)] = fmt.Sprintf("content %d", i%700)
	}
	laptop.stopPublisher(t)
	laptop.write(t, files)
	laptop.index(t, c)
	first := laptop.pub.Status().Acked
	c.startPublisher(laptop)
	// Stop the hub once some of the new changes are acknowledged.
	deadline := time.Now().Add(waitFor)
	for laptop.pub.Status().Acked < first+200 {
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %+v", laptop.pub.Status())
		}
		time.Sleep(time.Millisecond)
	}
	c.stopHub()
	acked := laptop.pub.Status().Acked
	local, _ := laptop.st.ChangeLog()
	if acked >= local.Seq {
		t.Logf("the hub took everything before it stopped (acked %d of %d); the restart still must keep it", acked, local.Seq)
	}
	c.startHub()
	for _, s := range c.hostStates(t, "laptop") {
		if s.Name == "laptop" && s.Seq < acked {
			t.Fatalf("after the restart the hub has the laptop's changes through %d; %d were acknowledged", s.Seq, acked)
		}
	}
	laptop.caughtUp(t)
	c.matchTrees(t, "laptop")
	if s := laptop.pub.Status(); s.Resends != 0 {
		t.Fatalf("the laptop resent its index whole %d times after the restart; its log was enough", s.Resends)
	}
}

// TestWrongCredentialsRefused: a bad password, a bad nkey, and a host
// publishing on another host's subject get nothing in.
func TestWrongCredentialsRefused(t *testing.T) {
	c := newCluster(t)
	c.addHost("desktop")
	for name, opt := range map[string]nats.Option{
		"bad password": nats.UserInfo("desktop", "wrong"),
		"no password":  nats.UserInfo("desktop", ""),
		"unknown user": nats.UserInfo("mallory", "x"),
	} {
		nc, err := nats.Connect(c.url, opt, nats.Timeout(5*time.Second))
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
	// The hub's own in-process user cannot be used from the network.
	if nc, err := nats.Connect(c.url, nats.UserInfo("nas", "anything")); err == nil {
		nc.Close()
		t.Error("connected as the hub's own host over TCP")
	}
	// desktop may not publish as laptop.
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	nc, err := nats.Connect(c.url, append(c.creds["desktop"], quiet, nats.CustomInboxPrefix(hubwire.InboxPrefix+"desktop"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b := hubwire.Batch{Kind: hubwire.SnapBegin, Epoch: 1}
	if _, err := js.Publish(ctx, hubwire.ChangesPrefix+"laptop", b.Marshal()); err == nil {
		t.Fatal("desktop published on laptop's subject")
	}
	hosts, err := hub.NewClient(nc, "desktop").Hosts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range hosts {
		if s.Name == "laptop" {
			t.Fatalf("the hub took a batch for laptop from desktop: %+v", s)
		}
	}
}

func TestRefusesToStartOpen(t *testing.T) {
	dir := t.TempDir()
	if _, err := hub.New(hub.Config{Dir: dir, Listen: "127.0.0.1:0"}); !errors.Is(err, hub.ErrOpen) {
		t.Errorf("no hosts: %v, want ErrOpen", err)
	}
	hosts := []hub.Host{{Name: "a", Password: "$2a$04$abcdefghijklmnopqrstuuJk9n1zlK5l2ckfyMkVdX3l7C1r2Ppui"}}
	for name, cfg := range map[string]hub.Config{
		"plain password":  {Dir: dir, Hosts: []hub.Host{{Name: "a", Password: "secret"}}},
		"both":            {Dir: dir, Hosts: []hub.Host{{Name: "a", Password: hosts[0].Password, Nkey: "UABC"}}},
		"bad nkey":        {Dir: dir, Hosts: []hub.Host{{Name: "a", Nkey: "UABC"}}},
		"bad name":        {Dir: dir, Hosts: []hub.Host{{Name: "a.b", Password: hosts[0].Password}}},
		"no tls on a lan": {Dir: dir, Hosts: hosts, Listen: "0.0.0.0:4222"},
		"twice":           {Dir: dir, Hosts: append(hosts, hosts[0])},
		"no dir":          {Hosts: hosts},
	} {
		if _, err := hub.New(cfg); !errors.Is(err, hub.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if _, err := hub.New(hub.Config{Dir: dir, Hosts: hosts, Listen: "0.0.0.0:4222", Plaintext: true}); err != nil {
		t.Errorf("plaintext allowed: %v", err)
	}
}

// TestPasswordOverTLS runs the hub with a certificate: a host with the
// CA and its password publishes; a client without TLS, or not trusting
// the certificate, is refused.
func TestPasswordOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	c := newClusterTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	c.creds["desktop"] = append(c.creds["desktop"], nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	desktop := c.addHost("desktop")
	desktop.write(t, map[string]string{"a": "over tls"})
	desktop.index(t, c)
	desktop.caughtUp(t)
	c.matchTrees(t, "desktop")
	if nc, err := nats.Connect(c.url, nats.UserInfo("desktop", "desktop-secret"), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Error("connected without TLS")
	}
	if nc, err := nats.Connect(c.url, nats.UserInfo("desktop", "desktop-secret"), nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Error("connected without trusting the certificate")
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "annexd test hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}, pool
}

// TestRestoredIndexIsResentWhole: an index restored from a backup has
// fewer changes than the hub applied under its id; the host must not
// reuse those numbers, and resends itself whole under a new id.
func TestRestoredIndexIsResentWhole(t *testing.T) {
	c := newCluster(t)
	laptop := c.addHost("laptop")
	laptop.write(t, map[string]string{"a": "A", "b": "B"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	laptop.stopPublisher(t)
	laptop.closeStore(t)
	data, err := os.ReadFile(laptop.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	laptop.openStore(t)
	c.startPublisher(laptop)
	laptop.write(t, map[string]string{"c": "C", "d": "D"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	laptop.stopPublisher(t)
	laptop.closeStore(t)
	// Back to the backup, index and tree alike.
	if err := os.WriteFile(laptop.dbPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"c", "d"} {
		if err := os.Remove(filepath.Join(laptop.root, f)); err != nil {
			t.Fatal(err)
		}
	}
	laptop.openStore(t)
	before, _ := laptop.st.ChangeLog()
	c.startPublisher(laptop)
	s := laptop.caughtUp(t)
	if s.Resends != 1 || s.IndexID == before.IndexID.String() {
		t.Fatalf("after the restore: %+v, want one whole resend under a new id (was %s)", s, before.IndexID)
	}
	c.matchTrees(t, "laptop")
}

// TestHubDownDoesNotBlockTheIndex: with the hub gone, the index takes
// changes and answers as before, status says the link is down and counts
// the lag; when the hub is back, the changes arrive.
func TestHubDownDoesNotBlockTheIndex(t *testing.T) {
	c := newCluster(t)
	desktop := c.addHost("desktop")
	desktop.write(t, map[string]string{"a": "A"})
	desktop.index(t, c)
	desktop.caughtUp(t)
	c.stopHub()
	for i := range 500 {
		desktop.write(t, map[string]string{fmt.Sprintf("d/f%03d", i): fmt.Sprintf("%d", i)})
	}
	desktop.index(t, c) // every change commits with the hub away
	if _, ok, err := desktop.st.Get([]byte(filepath.Join(desktop.root, "d/f007"))); !ok || err != nil {
		t.Fatalf("lookup with the hub away: %v %v", ok, err)
	}
	local, _ := desktop.st.ChangeLog()
	deadline := time.Now().Add(waitFor)
	for s := desktop.pub.Status(); s.Connected || s.Seq != local.Seq; s = desktop.pub.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("status with the hub away: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := desktop.pub.Status(); s.Lag != 500 {
		t.Fatalf("lag with the hub away: %+v, want 500 changes", s)
	}
	c.startHub()
	desktop.caughtUp(t)
	c.matchTrees(t, "desktop")
}

// TestRefusedHostRetries: a host whose credentials the hub refuses says
// so in its status, and is taken without a restart of its own once the
// hub's configuration knows them.
func TestRefusedHostRetries(t *testing.T) {
	c := newCluster(t)
	c.creds["desktop"] = []nats.Option{nats.UserInfo("desktop", "the new secret")}
	desktop := c.addHost("desktop")
	desktop.write(t, map[string]string{"a.txt": "A"})
	desktop.index(t, c)
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(desktop.pub.Status().LastError, publish.ErrRefused.Error()) {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal in the status: %+v", desktop.pub.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := desktop.pub.Status(); st.Connected || st.Acked != 0 {
		t.Fatalf("a refused host is connected or acknowledged: %+v", st)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("the new secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	c.stopHub()
	for i, h := range c.cfg.Hosts {
		if h.Name == "desktop" {
			c.cfg.Hosts[i].Password = string(hash)
		}
	}
	c.startHub()
	desktop.caughtUp(t)
	c.matchTrees(t, "desktop")
}

// TestListenInUse: a hub whose port is taken fails at once, saying so.
func TestListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hosts := []hub.Host{{Name: "a", Password: "$2a$04$abcdefghijklmnopqrstuuJk9n1zlK5l2ckfyMkVdX3l7C1r2Ppui"}}
	h, err := hub.New(hub.Config{Dir: t.TempDir(), Hosts: hosts, Listen: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	// "in use" comes from the server's fatal error, not from the wait
	// for it to listen running out.
	err = h.Run(context.Background())
	if !errors.Is(err, hub.ErrListen) || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Run on a port in use: %v, want ErrListen naming the address and why", err)
	}
}
