package hublink

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/hub"
)

// hubConfig turns [hub] into the hub's configuration; self is the name
// this machine's own annexd publishes under.
func hubConfig(h config.Hub, self string, log *slog.Logger) (hub.Config, error) {
	hc := hub.Config{Listen: h.Listen, Dir: h.Dir, Plaintext: h.Plaintext, Self: self, StaleAfter: h.StaleAfter,
		MaxStreamBytes: int64(h.MaxStreamBytes), CopyMaxBytes: int64(h.CopyMaxBytes), CopyTTL: h.CopyTTL, Logger: log}
	for _, host := range h.Hosts {
		hc.Hosts = append(hc.Hosts, hub.Host{Name: host.Name, Password: host.PasswordHash, Nkey: host.Nkey})
	}
	if h.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(h.TLSCert, h.TLSKey)
		if err != nil {
			return hc, fmt.Errorf("tls_cert, tls_key: %w", err)
		}
		hc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if h.Cluster.On() {
		cl, err := clusterConfig(h.Cluster, hc.TLS, log)
		if err != nil {
			return hc, err
		}
		hc.Cluster = cl
	}
	return hc, nil
}

// clusterConfig turns [hub.cluster] into the hub's: the routes' secret,
// and the hub's certificate with the roots that sign the other nodes'.
func clusterConfig(c config.HubCluster, hubTLS *tls.Config, log *slog.Logger) (*hub.Cluster, error) {
	secret, err := readSecret(c.PasswordFile, log)
	if err != nil {
		return nil, fmt.Errorf("cluster.password_file: %w", err)
	}
	cl := &hub.Cluster{Name: c.Name, Listen: c.Listen, Routes: c.Routes, Nodes: c.Nodes, Secret: secret}
	if hubTLS != nil {
		cl.TLS = hubTLS.Clone()
		if c.CAFile != "" {
			if cl.TLS.RootCAs, err = readCA(c.CAFile); err != nil {
				return nil, fmt.Errorf("cluster.ca_file: %w", err)
			}
		}
	}
	return cl, nil
}

// readSecret reads a one-line secret, and warns when others may read it.
func readSecret(path string, log *slog.Logger) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	warnReadable(path, log)
	return s, nil
}

func warnReadable(path string, log *slog.Logger) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the hub credentials can be read by other users; run chmod 600", "path", path, "mode", fi.Mode().Perm().String())
	}
}

func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// credentials reads this host's secret and the hub's CA.
func credentials(p config.Publish, name string, log *slog.Logger) ([]nats.Option, error) {
	var opts []nats.Option
	secret := p.NkeySeedFile
	if secret != "" {
		o, err := nats.NkeyOptionFromSeed(secret)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file: %w", err)
		}
		opts = append(opts, o)
		warnReadable(secret, log)
	} else {
		pw, err := readSecret(p.PasswordFile, log)
		if err != nil {
			return nil, fmt.Errorf("password_file: %w", err)
		}
		opts = append(opts, nats.UserInfo(name, pw))
	}
	if p.CAFile != "" {
		pool, err := readCA(p.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return opts, nil
}
