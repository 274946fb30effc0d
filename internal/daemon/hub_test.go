package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// A [hub] or [publish] section that cannot work stops New, naming the
// section and the file.
func TestLinkConfigErrors(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed")
	if err := os.WriteFile(seed, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	hosts := []config.HubHost{{Name: "laptop", Nkey: pub}}
	for name, tc := range map[string]struct {
		hub     config.Hub
		publish config.Publish
		section string
	}{
		"missing password file": {publish: config.Publish{Hub: "nats://127.0.0.1:4222", PasswordFile: filepath.Join(dir, "none")}, section: "[publish]"},
		"empty password file":   {publish: config.Publish{Hub: "nats://127.0.0.1:4222", PasswordFile: empty}, section: "[publish]"},
		"bad seed":              {publish: config.Publish{Hub: "nats://127.0.0.1:4222", NkeySeedFile: seed}, section: "[publish]"},
		"bad ca":                {publish: config.Publish{Hub: "tls://nas:4222", NkeySeedFile: seed, CAFile: empty}, section: "[publish]"},
		"bad name":              {publish: config.Publish{Hub: "nats://127.0.0.1:4222", Name: "my.laptop", PasswordFile: empty}, section: "[publish]"},
		"plain password":        {hub: config.Hub{Enabled: true, Listen: "127.0.0.1:0", Hosts: []config.HubHost{{Name: "a", PasswordHash: "secret"}}}, section: "[hub]"},
		"lan without tls":       {hub: config.Hub{Enabled: true, Listen: "0.0.0.0:4222", Hosts: hosts}, section: "[hub]"},
		"missing certificate":   {hub: config.Hub{Enabled: true, Listen: "0.0.0.0:4222", Hosts: hosts, TLSCert: seed, TLSKey: seed}, section: "[hub]"},
		"missing route secret": {hub: config.Hub{Enabled: true, Listen: "127.0.0.1:0", Hosts: hosts, Cluster: config.HubCluster{Name: "c",
			Listen: "127.0.0.1:0", Routes: []string{"nats-route://127.0.0.1:6222"}, Nodes: []string{"nas1", "nas2"}, PasswordFile: filepath.Join(dir, "none")}},
			publish: config.Publish{Name: "nas1"}, section: "[hub]"},
		"not a node": {hub: config.Hub{Enabled: true, Listen: "127.0.0.1:0", Hosts: hosts, Cluster: config.HubCluster{Name: "c",
			Listen: "127.0.0.1:0", Routes: []string{"nats-route://127.0.0.1:6222"}, Nodes: []string{"nas1", "nas2"}, PasswordFile: seed}},
			publish: config.Publish{Name: "nas3"}, section: "[hub]"},
	} {
		cfg := testConfig(t, t.TempDir())
		cfg.File = "/etc/annexd.toml"
		cfg.Hub, cfg.Publish = tc.hub, tc.publish
		if err := cfg.Fill(); err != nil {
			t.Fatal(err)
		}
		_, err := New(cfg, nil, Options{})
		if !errors.Is(err, ErrHubConfig) || !strings.Contains(err.Error(), tc.section) || !strings.Contains(err.Error(), cfg.File) {
			t.Errorf("%s: %v, want ErrHubConfig naming %s and the file", name, err, tc.section)
		}
	}
}

// waitStatus polls the daemon's status until ok says it is as wanted.
func waitStatus(t *testing.T, c *api.Client, what string, ok func(api.Status) bool) api.Status {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := c.Status(context.Background())
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v %+v %v", what, st, st.Hub, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A daemon running the hub publishes its own index to it in process: the
// status and the metrics show the link, the hub answers whereis, and the
// hub's files beside an index under the root are not indexed. Without
// the hub the next start drops the change log.
func TestHubInDaemon(t *testing.T) {
	root := t.TempDir()
	writeOld(t, filepath.Join(root, "photo.jpg"), "the photo")
	hash, err := bcrypt.GenerateFromPassword([]byte("laptop password"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, root)
	cfg.Index = filepath.Join(root, ".state", "index.db")
	cfg.Hub = config.Hub{Enabled: true, Listen: "127.0.0.1:0", Hosts: []config.HubHost{{Name: "laptop", PasswordHash: string(hash)}}}
	cfg.Publish.Name = "nas"
	if err := cfg.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, end := runApp(t, cfg, nil)
	c := api.Dial(cfg.Socket)
	defer c.Close()
	st := waitStatus(t, c, "caught up", func(st api.Status) bool {
		h := st.Hub
		return st.Idle && h != nil && h.Connected && h.Seq > 0 && h.Acked == h.Seq && h.IndexID != ""
	})
	if h := st.Hub; !h.Serving || h.Name != "nas" || !strings.HasPrefix(h.Listen, "nats://127.0.0.1:") || h.Hosts != 1 || h.Lag != 0 {
		t.Errorf("hub status: %+v", h)
	}
	if st.Files != 1 {
		t.Errorf("%d files indexed, want the photo alone (not the hub's files under the root)", st.Files)
	}
	k, err := key.Parse("SHA256E-s9--" + sha256Hex("the photo") + ".jpg")
	if err != nil {
		t.Fatal(err)
	}
	hc, err := c.HubWhereisKey(context.Background(), k)
	if err != nil || len(hc.Holders) != 1 || hc.Holders[0].Host != "nas" || string(hc.Holders[0].Paths[0]) != filepath.Join(root, "photo.jpg") {
		t.Errorf("hub whereis: %+v %v", hc, err)
	}
	m, err := c.Metrics(context.Background())
	for _, want := range []string{"annexd_hub_connected 1", "annexd_hub_lag_changes 0", `annexd_hub_host_records{host="nas"} 1`,
		`annexd_hub_host_stale{host="nas"} 0`, "annexd_hub_resends_total 1"} {
		if err != nil || !bytes.Contains(m, []byte(want)) {
			t.Errorf("metrics lack %q: %v", want, err)
		}
	}
	refusedInMetrics(t, c, st.Hub.Listen)
	if err := end(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	before := st.Hub.IndexID

	// Without the hub the change log goes; with it again, the index has
	// a new id, which the hub takes as a whole resend.
	cfg.Hub.Enabled = false
	app, err := New(cfg, nil, Options{ExitWhenIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(cfg.Index, store.Options{Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l, err := s.ChangeLog(); err != nil || l.IndexID.String() == before {
		t.Errorf("after a run without the hub the change log is %+v (%v); it had index id %s", l, err, before)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// refusedInMetrics sends the hub at url, as the laptop, a batch it
// cannot decode and a state request answered elsewhere, and waits for
// the metrics to count both.
func refusedInMetrics(t *testing.T, c *api.Client, url string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo("laptop", "laptop password"), nats.CustomInboxPrefix(hubwire.InboxPrefix+"laptop"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	garbage := &nats.Msg{Subject: hubwire.ChangesPrefix + "laptop", Data: []byte("not a batch")}
	if _, err := js.PublishMsg(ctx, garbage, jetstream.WithMsgID("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: hubwire.StatePrefix + "laptop", Reply: hubwire.AckPrefix + "nas"}); err != nil {
		t.Fatal(err)
	}
	want := []string{`annexd_hub_batches_dropped_total{host="laptop",reason="undecodable"} 1`,
		`annexd_hub_requests_refused_total{host="laptop",reason="reply_elsewhere"} 1`}
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := c.Metrics(context.Background())
		if err == nil && bytes.Contains(m, []byte(want[0])) && bytes.Contains(m, []byte(want[1])) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %q: %v", want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
