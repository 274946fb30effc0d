package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A page beyond loopback without TLS is refused before anything
// listens, with the config key named.
func TestPageBeyondLoopbackRefused(t *testing.T) {
	cfg := Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}, Socket: filepath.Join(shortDir(t), "s"),
		Page: PageConfig{Listen: "0.0.0.0:0", ListenKey: "ui.listen"}}
	_, err := NewServer(cfg)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ui.listen") || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("NewServer with the page on 0.0.0.0 without TLS: %v", err)
	}
}

// Over TLS the page answers https, only with the token; the socket's
// POST /v1/ui says where it is, the same address every time, and it is
// refused over TCP.
func TestPageTLS(t *testing.T) {
	cert, key := selfSigned(t)
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())},
		Page: PageConfig{Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: key, ListenKey: "ui.listen"}}, nil)
	pg, err := ts.client.UI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	again, err := ts.client.UI(context.Background())
	if err != nil || again != pg {
		t.Fatalf("a second POST /v1/ui: %+v, %v; the first %+v", again, err, pg)
	}
	u, err := url.Parse(pg.URL)
	if err != nil || u.Scheme != "https" || !pg.TLS || len(u.Query().Get("token")) < 32 {
		t.Fatalf("page %+v", pg)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", "https://"+u.Host+path, nil)
		if tok != "" {
			req.Header.Set(pageTokenHeader, tok)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tok := u.Query().Get("token")
	if code, _ := get("/v1/ping", ""); code != 403 {
		t.Errorf("no token: %d", code)
	}
	if code, body := get("/", tok); code != 200 || !strings.Contains(body, `content="`+tok+`"`) || strings.Contains(body, "{{TOKEN}}") {
		t.Errorf("the page with the token: %d %q", code, body)
	}
	if code, _ := get("/assets/app.js", tok); code != 200 {
		t.Errorf("app.js: %d", code)
	}
	// The page's own listener may not start pages.
	req, _ := http.NewRequest("POST", "https://"+u.Host+"/v1/ui", nil)
	req.Header.Set(pageTokenHeader, tok)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("POST /v1/ui over the page: %d, want 403", resp.StatusCode)
	}
	// Plain HTTP on the TLS port gets no page.
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /v1/ping?token="+tok+" HTTP/1.1\r\nHost: "+u.Host+"\r\n\r\n")
	b, _ := io.ReadAll(c)
	if strings.Contains(string(b), `"ok":true`) {
		t.Errorf("plain HTTP on the TLS listener answered: %q", b)
	}
}

// selfSigned writes a certificate and key for 127.0.0.1.
func selfSigned(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "annexd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
