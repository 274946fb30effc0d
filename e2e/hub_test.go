package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/testutil"
)

// hubWait bounds how long a hub test waits for the hosts to catch up:
// long enough for a loaded machine, never part of what is asserted.
const hubWait = 3 * time.Minute

// hubHost is one machine of a hub test: its own tree, index, socket and
// config, and its annexd while it runs.
type hubHost struct {
	t    testing.TB
	name string
	base string
	root string
	cfg  string
	d    *daemon // nil while stopped
	// slowStart: the first scan may take long (a benchmark's large tree).
	slowStart bool
}

// newHubHost makes the host's directories; files maps paths under its
// root to their content.
func newHubHost(t testing.TB, dir, name string, files map[string]string) *hubHost {
	t.Helper()
	h := &hubHost{t: t, name: name, base: filepath.Join(dir, name)}
	h.root = filepath.Join(h.base, "root")
	h.cfg = filepath.Join(h.base, "annexd.toml")
	if err := os.MkdirAll(h.root, 0o755); err != nil {
		t.Fatal(err)
	}
	h.write(files)
	return h
}

func (h *hubHost) write(files map[string]string) {
	h.t.Helper()
	for rel, data := range files {
		write(h.t, filepath.Join(h.root, rel), data)
	}
}

func (h *hubHost) path(rel string) string { return filepath.Join(h.root, rel) }

// writeConfig writes the host's config file.
func (h *hubHost) writeConfig(body string) {
	h.t.Helper()
	if err := os.WriteFile(h.cfg, []byte(body), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// start runs the host's annexd and waits until its first scan is done.
func (h *hubHost) start() {
	t := h.t
	t.Helper()
	d := spawn(t, annexdRun{base: h.base, roots: []string{h.root}, extra: []string{"-c", h.cfg}})
	h.d = d
	start := time.Now()
	if h.slowStart {
		for r := d.ctl("", "status", "--wait", "--timeout", "30m"); r.code != 0; r = d.ctl("", "status", "--wait", "--timeout", "30m") {
			if r.code != 3 || time.Since(start) > 30*time.Minute {
				t.Fatalf("%s: status --wait: exit %d\n%s%s\n%s", h.name, r.code, r.stdout, r.stderr, d.log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		d.waitIdle()
	}
	t.Logf("%s: annexd up and idle after %v", h.name, time.Since(start).Round(time.Millisecond))
}

// stop ends the host's annexd with SIGTERM.
func (h *hubHost) stop() {
	h.t.Helper()
	h.d.stop()
	h.d = nil
}

func (h *hubHost) ctl(args ...string) result {
	h.t.Helper()
	return h.d.ctl("", args...)
}

func (h *hubHost) client() *api.Client { return api.Dial(h.d.socket) }

func (h *hubHost) status() api.HubStatus {
	h.t.Helper()
	c := h.client()
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		h.t.Fatalf("%s: status: %v", h.name, err)
	}
	if st.Hub == nil {
		h.t.Fatalf("%s: status without a hub link", h.name)
	}
	return *st.Hub
}

// hubHosts asks the hub, through h's daemon, what it knows of each host,
// waiting for h's link to the hub to be up.
func (h *hubHost) hubHosts() map[string]api.HubHost {
	h.t.Helper()
	deadline := time.Now().Add(hubWait)
	for {
		c := h.client()
		hosts, err := c.HubHosts(context.Background())
		c.Close()
		if err == nil {
			out := map[string]api.HubHost{}
			for _, x := range hosts {
				out[x.Name] = x
			}
			return out
		}
		if !errors.Is(err, api.ErrHubUnreachable) || time.Now().After(deadline) {
			h.t.Fatalf("%s: hub hosts: %v", h.name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// caughtUp waits until every change of h's index, as of now, is applied
// at the hub: its daemon is idle and has seen every earlier change, and
// the hub holds its whole index through its last change.
func (h *hubHost) caughtUp() {
	t := h.t
	t.Helper()
	start := time.Now()
	if r := h.ctl("status", "--wait", "--timeout", "2m"); r.code != 0 {
		t.Fatalf("%s: status --wait: exit %d\n%s%s", h.name, r.code, r.stdout, r.stderr)
	}
	idle := time.Since(start)
	deadline := time.Now().Add(hubWait)
	for {
		st := h.status()
		if st.Connected && !st.Resending && st.IndexID != "" && st.Lag == 0 && st.Acked == st.Seq {
			if x, ok := h.tryHubHosts()[h.name]; ok && x.Complete && x.IndexID == st.IndexID && x.Seq == st.Seq {
				t.Logf("%s: idle after %v, caught up at the hub through change %d after %v", h.name,
					idle.Round(time.Millisecond), st.Seq, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the hub has not caught up after %v: %+v\nlog:\n%s", h.name, hubWait, st, h.d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *hubHost) tryHubHosts() map[string]api.HubHost {
	c := h.client()
	defer c.Close()
	hosts, err := c.HubHosts(context.Background())
	out := map[string]api.HubHost{}
	if err == nil {
		for _, x := range hosts {
			out[x.Name] = x
		}
	}
	return out
}

// truth is path → hex SHA-256 of every file under h's root, from the files.
func (h *hubHost) truth() map[string]string {
	h.t.Helper()
	return testutil.TreeDigests(h.t, h.root)
}

// hubView is every record the hub holds, asked through h's daemon: host →
// path → hex digest. A path listed twice fails the test.
func (h *hubHost) hubView() map[string]map[string]string {
	t := h.t
	t.Helper()
	c := h.client()
	defer c.Close()
	view := map[string]map[string]string{}
	_, err := c.HubCopies(context.Background(), api.HubCopiesQuery{FewerThan: 1 << 20, AllHosts: true}, func(hc api.HubContent) error {
		for _, holder := range hc.Holders {
			if int64(len(holder.Paths)) != holder.Count {
				return fmt.Errorf("%s holds %s at %d paths, %d listed", holder.Host, hc.Key(), holder.Count, len(holder.Paths))
			}
			m := view[holder.Host]
			if m == nil {
				m = map[string]string{}
				view[holder.Host] = m
			}
			for _, p := range holder.Paths {
				if d, dup := m[string(p)]; dup {
					return fmt.Errorf("%s: %s listed twice (%s and %s)", holder.Host, p, d, hex.EncodeToString(hc.Digest))
				}
				m[string(p)] = hex.EncodeToString(hc.Digest)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: the hub's view: %v", h.name, err)
	}
	return view
}

// sameRecords fails the test unless got and want hold the same paths
// with the same digests.
func sameRecords(t *testing.T, label string, got, want map[string]string) {
	t.Helper()
	var diff []string
	for p, d := range want {
		if got[p] != d {
			diff = append(diff, fmt.Sprintf("%s: hub %q, tree %q", p, got[p], d))
		}
	}
	for p, d := range got {
		if _, ok := want[p]; !ok {
			diff = append(diff, fmt.Sprintf("%s: hub %q, not in the tree", p, d))
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		t.Fatalf("%s: the hub's records differ from the tree (%d wrong of %d):\n%s", label, len(diff), len(want), strings.Join(diff, "\n"))
	}
}

// matchAll compares the hub's view, asked through via, with every host's
// tree (want overrides the tree of a host, for one that is offline).
func matchAll(t *testing.T, label string, via *hubHost, hosts []*hubHost, want map[string]map[string]string) {
	t.Helper()
	view := via.hubView()
	for _, h := range hosts {
		w, ok := want[h.name]
		if !ok {
			w = h.truth()
		}
		sameRecords(t, label+": "+h.name, view[h.name], w)
	}
}

// annexd runs annexd with args (the hub helper commands) and returns its
// standard output.
func runAnnexd(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin.annexd, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("annexd %v: %v\n%s", args, err, errb.String())
	}
	return strings.TrimSpace(string(out))
}

// freePort returns a loopback port nothing listens on now.
func freePort(t testing.TB) int { return testutil.FreePort(t) }

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "annexd hub test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "hub.crt"), filepath.Join(dir, "hub.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// hubSetup is a hub on "nas" over TLS on loopback, "laptop" with an nkey
// and "desktop" with a password, their credentials made by annexd hub
// nkey and annexd hub passwd.
type hubSetup struct {
	dir                  string
	url, ca              string
	nas, laptop, desktop *hubHost
}

func newHubSetup(t testing.TB, hubExtra string) *hubSetup {
	t.Helper()
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	s := &hubSetup{dir: dir}
	port := freePort(t)
	cert, key := selfSigned(t, dir)
	s.url, s.ca = fmt.Sprintf("tls://127.0.0.1:%d", port), cert
	s.nas = newHubHost(t, dir, "nas", map[string]string{"photos/beach.jpg": "the beach", "notes.txt": "nas notes"})
	s.laptop = newHubHost(t, dir, "laptop", map[string]string{"docs/beach copy.jpg": "the beach", "only-laptop.txt": "laptop only"})
	s.desktop = newHubHost(t, dir, "desktop", map[string]string{"music/song.mp3": "a song", "beach.jpg": "the beach"})

	seed := filepath.Join(s.laptop.base, "hub.seed")
	nkey := runAnnexd(t, "", "hub", "nkey", seed)
	pwFile := filepath.Join(s.desktop.base, "hub.password")
	hash := runAnnexd(t, "", "hub", "passwd", "--generate", pwFile, "--cost", "4")
	s.nas.writeConfig(fmt.Sprintf(`
[hub]
enabled = true
listen = "127.0.0.1:%d"
tls_cert = %q
tls_key = %q
%s
[[hub.host]]
name = "laptop"
nkey = %q
[[hub.host]]
name = "desktop"
password_hash = %q
[publish]
name = "nas"
heartbeat = "2s"
`, port, cert, key, hubExtra, nkey, hash))
	s.laptop.writeConfig(s.publishConfig("laptop", "nkey_seed_file", seed))
	s.desktop.writeConfig(s.publishConfig("desktop", "password_file", pwFile))
	return s
}

func (s *hubSetup) publishConfig(name, secretKey, secretFile string) string {
	return fmt.Sprintf(`
[publish]
hub = %q
name = %q
%s = %q
ca_file = %q
heartbeat = "2s"
batch = 64
`, s.url, name, secretKey, secretFile, s.ca)
}

func (s *hubSetup) hosts() []*hubHost { return []*hubHost{s.nas, s.laptop, s.desktop} }

// annexKey is the SHA256E key of content stored under a name with ext.
func annexKey(content, ext string) string {
	sum := sha256.Sum256([]byte(content))
	return fmt.Sprintf("SHA256E-s%d--%x%s", len(content), sum, ext)
}

// TestHubAcrossHosts runs three annexd with their own trees and indexes,
// one of them the hub, and checks what the hub knows against the trees
// through a host's offline week, a rebuilt index, a hub restarted while
// changes flow, and a host with wrong credentials.
func TestHubAcrossHosts(t *testing.T) {
	t.Parallel()
	s := newHubSetup(t, "")
	// The laptop starts before the hub exists and catches up once it does.
	s.laptop.start()
	s.desktop.start()
	s.nas.start()
	for _, h := range s.hosts() {
		h.caughtUp()
	}
	matchAll(t, "first sync", s.nas, s.hosts(), nil)

	// One cluster for every step (each step's daemons are the test's).
	for _, step := range []struct {
		name string
		fn   func(*testing.T, *hubSetup)
	}{
		{"a file added on one host shows up on the others", hubAddedFile},
		{"a host offline while its files change catches up", hubOffline},
		{"a rebuilt index replaces its records", hubRebuilt},
		{"the hub restarted mid-stream loses nothing acknowledged", hubRestarted},
		{"wrong credentials are refused", hubWrongCredentials},
	} {
		t.Logf("== %s", step.name)
		step.fn(t, s)
	}
	if strings.Contains(s.nas.d.log.String(), "level=ERROR") {
		t.Errorf("the hub's daemon logged errors:\n%s", s.nas.d.log)
	}
}

func hubAddedFile(t *testing.T, s *hubSetup) {
	s.laptop.write(map[string]string{"new/added.txt": "added on the laptop"})
	s.laptop.caughtUp()
	added := s.laptop.path("new/added.txt")
	k := calckey(t, added)
	for _, h := range []*hubHost{s.nas, s.desktop} {
		r := h.ctl("whereis", "--hosts", k)
		if r.code != 0 || !strings.Contains(r.stdout, "laptop  last seen") || !strings.Contains(r.stdout, "  "+added+"\n") {
			t.Errorf("%s: whereis --hosts %s: exit %d\n%s%s", h.name, k, r.code, r.stdout, r.stderr)
		}
	}
	// The beach is on all three: whereis --hosts of a FILE, in JSON.
	r := s.desktop.ctl("whereis", "--hosts", "--json", s.desktop.path("beach.jpg"))
	var hc api.HubContent
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &hc) != nil {
		t.Fatalf("whereis --hosts --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var holders []string
	for _, x := range hc.Holders {
		holders = append(holders, x.Host+":"+string(x.Paths[0]))
	}
	sort.Strings(holders)
	want := []string{"desktop:" + s.desktop.path("beach.jpg"), "laptop:" + s.laptop.path("docs/beach copy.jpg"), "nas:" + s.nas.path("photos/beach.jpg")}
	if strings.Join(holders, " ") != strings.Join(want, " ") {
		t.Errorf("whereis --hosts beach.jpg: %v, want %v", holders, want)
	}
	if r := s.nas.ctl("whereis", "--hosts", annexKey("held by nobody", ".txt")); r.code != 1 || !strings.Contains(r.stderr, "no host the hub knows holds") {
		t.Errorf("whereis --hosts of unknown content: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.nas.ctl("whereis", "--hosts"); r.code != 2 {
		t.Errorf("whereis --hosts without an argument: exit %d, want 2\n%s", r.code, r.stderr)
	}
	if r := s.laptop.ctl("dups", "--across-hosts"); r.code != 0 || !strings.Contains(r.stdout, "on 3 hosts  SHA256-s9--") {
		t.Errorf("dups --across-hosts: exit %d, want the beach on three hosts\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.laptop.ctl("dups", "--across-hosts", "--min-size", "1M"); r.code != 1 {
		t.Errorf("dups --across-hosts with nothing that large: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	// What only the laptop holds is at risk; copies exits 1 and lists it.
	r = s.laptop.ctl("copies")
	if r.code != 1 || !strings.Contains(r.stdout, s.laptop.path("only-laptop.txt")) || !strings.Contains(r.stdout, added) ||
		strings.Contains(r.stdout, "beach") || !strings.Contains(r.stdout, "2 contents") {
		t.Errorf("copies: exit %d, want 1 listing the laptop's two single copies\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.laptop.ctl("copies", s.laptop.path("docs")); r.code != 0 || !strings.Contains(r.stdout, "0 contents") {
		t.Errorf("copies DIR with every content on three hosts: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.laptop.ctl("copies", "--fewer-than", "4", "--all-hosts", "--json"); r.code != 1 || strings.Count(r.stdout, "\n") != 5 {
		t.Errorf("copies --fewer-than 4 --all-hosts: exit %d, want 5 contents\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func hubOffline(t *testing.T, s *hubSetup) {
	d := s.desktop
	before := d.truth()
	d.stop()
	// A week away: new files, a rewrite, a rename, a removal.
	files := map[string]string{"music/new.mp3": "a new song", "music/song.mp3": "the song, remixed"}
	for i := range 300 {
		files[fmt.Sprintf("photos/%03d.jpg", i)] = fmt.Sprintf("photo %d taken offline", i)
	}
	d.write(files)
	if err := os.Rename(d.path("music/song.mp3"), d.path("music/renamed.mp3")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d.path("beach.jpg")); err != nil {
		t.Fatal(err)
	}
	// While it is away the hub keeps what it had, neither more nor less.
	matchAll(t, "desktop away", s.nas, s.hosts(), map[string]map[string]string{"desktop": before})
	d.start()
	d.caughtUp()
	matchAll(t, "desktop back", s.nas, s.hosts(), nil)
	if st := d.status(); st.Resends != 0 {
		t.Errorf("the desktop resent its index whole %d times; its change log should have been enough", st.Resends)
	}
}

func hubRebuilt(t *testing.T, s *hubSetup) {
	l := s.laptop
	old := s.nas.hubHosts()["laptop"]
	l.stop()
	for _, f := range []string{"index.db"} {
		if err := os.Remove(filepath.Join(l.base, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(l.path("only-laptop.txt")); err != nil {
		t.Fatal(err)
	}
	l.write(map[string]string{"rebuilt.txt": "after the rebuild"})
	l.start()
	l.caughtUp()
	matchAll(t, "laptop rebuilt", s.nas, s.hosts(), nil)
	now := s.nas.hubHosts()["laptop"]
	if now.IndexID == old.IndexID || now.HostID != old.HostID || now.HostID == "" {
		t.Errorf("after the rebuild the hub has index %s host %s; before, index %s host %s: want a new index, the same host",
			now.IndexID, now.HostID, old.IndexID, old.HostID)
	}
	if st := l.status(); st.Resends < 1 {
		t.Errorf("the rebuilt index was not resent whole: %+v", st)
	}
}

func hubRestarted(t *testing.T, s *hubSetup) {
	l := s.laptop
	base := l.status()
	// The laptop writes bursts of files until the hub is caught between
	// two of its batches, then one more burst while the hub is down.
	hubDown := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n := 0
		burst := func() bool {
			for range 300 {
				p := filepath.Join(l.root, "stream", fmt.Sprintf("d%02d", n%20), fmt.Sprintf("f%05d.txt", n))
				n++
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Error(err)
					return false
				}
				if err := os.WriteFile(p, []byte(fmt.Sprintf("streamed %d", n)), 0o644); err != nil {
					t.Error(err)
					return false
				}
			}
			return true
		}
		for range 20 {
			if !burst() {
				return
			}
			select {
			case <-hubDown:
				burst()
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
		<-hubDown
		burst()
	}()
	// Stop the hub once it has applied part of the stream, but not all the
	// laptop has logged: batches are in flight.
	deadline := time.Now().Add(hubWait)
	st := l.status()
	for st.Acked <= base.Acked || st.Seq <= st.Acked {
		if time.Now().After(deadline) {
			t.Logf("never saw the hub part-way through the stream; stopping it at %+v", st)
			break
		}
		time.Sleep(5 * time.Millisecond)
		st = l.status()
	}
	acked := st.Acked
	t.Logf("stopping the hub with the laptop at change %d, %d acknowledged", st.Seq, st.Acked)
	s.nas.stop()
	close(hubDown)
	wg.Wait()
	if r := l.ctl("status", "--wait", "--timeout", "2m"); r.code != 0 {
		t.Fatalf("laptop: status --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := l.status(); st.Connected || st.Lag == 0 {
		t.Fatalf("with the hub down the laptop is connected or has nothing to send: %+v", st)
	}
	s.nas.start()
	if got := s.nas.hubHosts()["laptop"]; got.Seq < acked {
		t.Fatalf("after the restart the hub has the laptop's changes through %d; %d were acknowledged", got.Seq, acked)
	}
	l.caughtUp()
	s.nas.caughtUp()
	matchAll(t, "hub restarted", s.nas, s.hosts(), nil)
	if st := l.status(); st.Resends != base.Resends {
		t.Errorf("the laptop resent its index whole after the hub's restart (%d resends, %d before)", st.Resends, base.Resends)
	}
}

func hubWrongCredentials(t *testing.T, s *hubSetup) {
	bad := newHubHost(t, s.dir, "intruder", map[string]string{"secret.txt": "the intruder's file"})
	pw := filepath.Join(bad.base, "pw")
	if err := os.WriteFile(pw, []byte("not the desktop's password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad.writeConfig(s.publishConfig("desktop", "password_file", pw))
	bad.start()
	defer bad.stop()
	wantRefused(t, bad, "secret.txt")
	if !bad.d.waitLog("refused this host's credentials") {
		t.Errorf("the daemon's log does not say the hub refused it:\n%s", bad.d.log)
	}
	if r := s.nas.ctl("whereis", "--hosts", annexKey("the intruder's file", ".txt")); r.code != 1 {
		t.Errorf("the intruder's file reached the hub: exit %d\n%s", r.code, r.stdout)
	}
	matchAll(t, "after the intruder", s.nas, s.hosts(), nil)
	hubOtherHostsCredentials(t, s)
}

// hubOtherHostsCredentials: valid credentials under another host's name
// (the laptop's seed named the desktop) connect, and the hub refuses all
// they send and subscribe to. The host says so, as for a wrong password:
// not connected, refused, and queries fail saying why, not after a
// timeout as if the hub were away.
func hubOtherHostsCredentials(t *testing.T, s *hubSetup) {
	bad := newHubHost(t, s.dir, "borrowed", map[string]string{"borrowed.txt": "under another name"})
	bad.writeConfig(s.publishConfig("desktop", "nkey_seed_file", filepath.Join(s.laptop.base, "hub.seed")))
	bad.start()
	defer bad.stop()
	wantRefused(t, bad, "borrowed.txt")
	matchAll(t, "after the borrowed credentials", s.nas, s.hosts(), nil)
}

// wantRefused waits until the host bad says the hub refused its
// credentials (not connected), and fails unless its status says so and a
// whereis --hosts of its file (a name in its tree) fails saying why.
func wantRefused(t *testing.T, bad *hubHost, file string) {
	t.Helper()
	deadline := time.Now().Add(hubWait)
	for st := bad.status(); st.Connected || !strings.Contains(st.LastError, "refused this host's credentials"); st = bad.status() {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal after %v: %+v\n%s", hubWait, st, bad.d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := bad.ctl("status"); !strings.Contains(r.stdout, "NOT CONNECTED") || !strings.Contains(r.stdout, "refused this host's credentials") {
		t.Errorf("status does not say the hub refused the credentials:\n%s", r.stdout)
	}
	r := bad.ctl("whereis", "--hosts", bad.path(file))
	if r.code != 1 || !strings.Contains(r.stderr, "refused this host's credentials") {
		t.Errorf("whereis --hosts with refused credentials: exit %d, want 1 saying why\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestHubStaleHost: a host not heard from for stale_after is shown as
// stale, and copies no longer counts its copies.
func TestHubStaleHost(t *testing.T) {
	t.Parallel()
	s := newHubSetup(t, `stale_after = "4s"`)
	s.nas.start()
	s.laptop.start()
	s.nas.caughtUp()
	s.laptop.caughtUp()
	s.laptop.stop()
	k := annexKey("the beach", ".jpg")
	deadline := time.Now().Add(hubWait)
	for {
		var hc api.HubContent
		r := s.nas.ctl("whereis", "--hosts", "--json", k)
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &hc) != nil {
			t.Fatalf("whereis --hosts: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if stale(hc, "laptop") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the laptop is not stale %v after it stopped: %s", hubWait, r.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := s.nas.ctl("whereis", "--hosts", k); !strings.Contains(r.stdout, "laptop  last seen") || !strings.Contains(r.stdout, "STALE") {
		t.Errorf("whereis --hosts does not mark the laptop stale:\n%s", r.stdout)
	}
	r := s.nas.ctl("copies", "--json")
	if r.code != 1 || !strings.Contains(r.stdout, `"host":"laptop","stale":true`) {
		t.Errorf("copies with the laptop stale: exit %d, want 1 listing the beach with the laptop's copy stale\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := s.nas.ctl("hosts"); !strings.Contains(r.stdout, "laptop") || !strings.Contains(r.stdout, "STALE") {
		t.Errorf("hosts does not mark the laptop stale:\n%s", r.stdout)
	}
}

func stale(hc api.HubContent, host string) bool {
	for _, h := range hc.Holders {
		if h.Host == host {
			return h.Stale
		}
	}
	return false
}
