package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHubDefaults(t *testing.T) {
	c := Config{Index: "/state/index.db", Hub: Hub{Enabled: true, Listen: "127.0.0.1:4222", Hosts: []HubHost{{Name: "a", Nkey: "U"}}}}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	h, p := c.Hub, c.Publish
	if h.Dir != "/state/index.db-hub" || h.StaleAfter != 72*time.Hour || h.MaxStreamBytes != 1<<30 {
		t.Errorf("hub defaults: %+v", h)
	}
	if p.Batch != 4096 || p.Heartbeat != time.Minute {
		t.Errorf("publish defaults: %+v", p)
	}
	if !c.Linked() {
		t.Error("an enabled hub is not a link")
	}
	var off Config
	if err := off.Fill(); err != nil {
		t.Fatal(err)
	}
	if off.Linked() {
		t.Error("the zero config links to a hub")
	}
}

func TestHubUnknownKeyNamesKeyAndFile(t *testing.T) {
	p := writeFile(t, "[hub]\nlisen = \"0.0.0.0:4222\"\n[publish]\nhub = \"tls://nas:4222\"\nseed = \"x\"\n")
	_, err := Load(p)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"hub.lisen"`) ||
		!strings.Contains(err.Error(), `"publish.seed"`) || !strings.Contains(err.Error(), p) {
		t.Fatalf("got %v, want ErrUnknownKey naming hub.lisen, publish.seed and %s", err, p)
	}
}

func TestHubValidateRejects(t *testing.T) {
	host := []HubHost{{Name: "laptop", Nkey: "UABC"}}
	secret := Publish{Hub: "tls://nas:4222", PasswordFile: "/p"}
	for name, tc := range map[string]struct {
		hub  Hub
		pub  Publish
		want string
	}{
		"no listen":      {hub: Hub{Enabled: true, Hosts: host}, want: "hub.listen"},
		"no hosts":       {hub: Hub{Enabled: true, Listen: ":4222"}, want: "hub.host"},
		"half the tls":   {hub: Hub{Enabled: true, Listen: ":4222", Hosts: host, TLSCert: "/c"}, want: "hub.tls_key"},
		"two secrets":    {hub: Hub{Enabled: true, Listen: ":4222", Hosts: []HubHost{{Name: "a", Nkey: "U", PasswordHash: "$2a$"}}}, want: "hub.host.nkey"},
		"no secret":      {hub: Hub{Enabled: true, Listen: ":4222", Hosts: []HubHost{{Name: "a"}}}, want: "hub.host.nkey"},
		"http url":       {pub: Publish{Hub: "http://nas:4222", PasswordFile: "/p"}, want: "publish.hub"},
		"no host in url": {pub: Publish{Hub: "tls://", PasswordFile: "/p"}, want: "publish.hub"},
		"user in url":    {pub: Publish{Hub: "tls://a:b@nas:4222", PasswordFile: "/p"}, want: "publish.hub"},
		"no pub secret":  {pub: Publish{Hub: "tls://nas:4222"}, want: "publish.nkey_seed_file"},
		"both secrets":   {pub: Publish{Hub: "tls://nas:4222", PasswordFile: "/p", NkeySeedFile: "/s"}, want: "publish.nkey_seed_file"},
		"hub publishes":  {hub: Hub{Enabled: true, Listen: ":4222", Hosts: host}, pub: secret, want: "publish.hub"},
	} {
		c := Config{Index: "/i.db", Hub: tc.hub, Publish: tc.pub, File: "/etc/annexd.toml"}
		if err := c.Fill(); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/etc/annexd.toml") {
			t.Errorf("%s: %v, want ErrInvalid naming %s and the file", name, err, tc.want)
		}
	}
}

func TestHubLoadFull(t *testing.T) {
	p := writeFile(t, `
index = "/i.db"
[hub]
enabled = true
listen = "0.0.0.0:4222"
dir = "/srv/hub"
tls_cert = "/c.pem"
tls_key = "/k.pem"
stale_after = "24h"
max_stream_bytes = "512MiB"
[[hub.host]]
name = "laptop"
nkey = "UABC"
[[hub.host]]
name = "desktop"
password_hash = "$2a$10$x"
[publish]
name = "nas"
batch = 100
heartbeat = "30s"
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	h := c.Hub
	if h.Dir != "/srv/hub" || h.StaleAfter != 24*time.Hour || h.MaxStreamBytes != 512<<20 || len(h.Hosts) != 2 ||
		h.Hosts[0] != (HubHost{Name: "laptop", Nkey: "UABC"}) || h.Hosts[1].PasswordHash != "$2a$10$x" {
		t.Errorf("hub: %+v", h)
	}
	if c.Publish.Name != "nas" || c.Publish.Batch != 100 || c.Publish.Heartbeat != 30*time.Second {
		t.Errorf("publish: %+v", c.Publish)
	}
}

func clusterHub() Hub {
	return Hub{Enabled: true, Listen: "127.0.0.1:4222", Hosts: []HubHost{{Name: "laptop", Nkey: "UABC"}},
		Cluster: HubCluster{Name: "annexd", Listen: "127.0.0.1:6222", Routes: []string{"nats-route://127.0.0.1:6223"},
			Nodes: []string{"nas1", "nas2", "nas3"}, PasswordFile: "/etc/annexd/route-secret"}}
}

func TestHubClusterLoad(t *testing.T) {
	p := writeFile(t, `
index = "/i.db"
[hub]
enabled = true
listen = "0.0.0.0:4222"
tls_cert = "/c.pem"
tls_key = "/k.pem"
[[hub.host]]
name = "laptop"
nkey = "UABC"
[hub.cluster]
name = "annexd"
listen = "0.0.0.0:6222"
routes = ["nats-route://nas2.lan:6222", "nats-route://nas3.lan:6222"]
nodes = ["nas1", "nas2", "nas3"]
password_file = "route-secret"
ca_file = "/ca.pem"
[publish]
name = "nas1"
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cl := c.Hub.Cluster
	if !cl.On() || cl.Name != "annexd" || cl.Listen != "0.0.0.0:6222" || len(cl.Routes) != 2 || len(cl.Nodes) != 3 ||
		cl.CAFile != "/ca.pem" || !filepath.IsAbs(cl.PasswordFile) {
		t.Errorf("cluster: %+v", cl)
	}
	var off Hub
	if off.Cluster.On() {
		t.Error("an empty [hub.cluster] is on")
	}
}

func TestHubClusterValidateRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(h *Hub, p *Publish)
		want string
	}{
		"no name":        {func(h *Hub, _ *Publish) { h.Cluster.Name = "" }, "hub.cluster.name"},
		"dotted name":    {func(h *Hub, _ *Publish) { h.Cluster.Name = "a.b" }, "hub.cluster.name"},
		"no listen":      {func(h *Hub, _ *Publish) { h.Cluster.Listen = "" }, "hub.cluster.listen"},
		"open routes":    {func(h *Hub, _ *Publish) { h.Cluster.Listen = "0.0.0.0:6222" }, "hub.cluster.listen"},
		"no routes":      {func(h *Hub, _ *Publish) { h.Cluster.Routes = nil }, "hub.cluster.routes"},
		"client url":     {func(h *Hub, _ *Publish) { h.Cluster.Routes = []string{"nats://nas2:4222"} }, "hub.cluster.routes"},
		"no port":        {func(h *Hub, _ *Publish) { h.Cluster.Routes = []string{"nats-route://nas2"} }, "hub.cluster.routes"},
		"secret in url":  {func(h *Hub, _ *Publish) { h.Cluster.Routes = []string{"nats-route://u:p@nas2:6222"} }, "hub.cluster.routes"},
		"one node":       {func(h *Hub, _ *Publish) { h.Cluster.Nodes = []string{"nas1"} }, "hub.cluster.nodes"},
		"node twice":     {func(h *Hub, _ *Publish) { h.Cluster.Nodes = []string{"nas1", "nas1"} }, "hub.cluster.nodes"},
		"not this node":  {func(_ *Hub, p *Publish) { p.Name = "nas4" }, "hub.cluster.nodes"},
		"no secret file": {func(h *Hub, _ *Publish) { h.Cluster.PasswordFile = "" }, "hub.cluster.password_file"},
	} {
		h, p := clusterHub(), Publish{}
		tc.edit(&h, &p)
		c := Config{Index: "/i.db", Hub: h, Publish: p, File: "/etc/annexd.toml"}
		if err := c.Fill(); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/etc/annexd.toml") {
			t.Errorf("%s: %v, want ErrInvalid naming %s and the file", name, err, tc.want)
		}
	}
	ok := Config{Index: "/i.db", Hub: clusterHub()}
	ok.Hub.Cluster.Listen, ok.Hub.Plaintext = "0.0.0.0:6222", true
	if err := ok.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("routes in plaintext, allowed: %v", err)
	}
}

func TestPublishHubList(t *testing.T) {
	for list, valid := range map[string]bool{
		"tls://nas1:4222,tls://nas2:4222, tls://nas3:4222": true,
		"tls://nas1:4222,":                 false,
		"tls://nas1:4222,http://nas2:4222": false,
	} {
		c := Config{Index: "/i.db", Publish: Publish{Hub: list, PasswordFile: "/p"}}
		if err := c.Fill(); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); (err == nil) != valid {
			t.Errorf("publish.hub = %q: %v, want valid %v", list, err, valid)
		}
	}
}
