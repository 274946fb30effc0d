package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
)

// TestHubForeignClaim: the laptop is stolen. With its nkey seed, a raw
// NATS client claims the content of a file on the desktop and the nas
// with another size, then withdraws the claim. Through it all, the real
// annexctl on the desktop finds its file's holders, and dups lists the
// content once.
func TestHubForeignClaim(t *testing.T) {
	t.Parallel()
	s := newHubSetup(t, "")
	s.nas.start()
	s.desktop.start()
	for _, h := range []*hubHost{s.nas, s.desktop} {
		h.caughtUp()
	}
	nc, js, acks := stolenLaptop(t, s)
	sum := sha256.Sum256([]byte("the beach"))
	claim := hubwire.Entry{Path: []byte("/stolen/beach.jpg"), Backend: key.SHA256, Digest: sum[:], Size: 999}
	index, epoch := [16]byte{0x5e}, rand.Uint64()|1
	for _, b := range []hubwire.Batch{
		{Kind: hubwire.SnapBegin, IndexID: index, Epoch: epoch},
		{Kind: hubwire.SnapChunk, IndexID: index, Epoch: epoch, First: 1, Entries: []hubwire.Entry{claim}},
		{Kind: hubwire.SnapEnd, IndexID: index, Epoch: epoch, First: 1, Last: 1},
	} {
		publishAs(t, js, b)
	}
	waitAck(t, acks, func(st hubwire.State) bool { return st.Complete && st.Seq == 1 })
	check := func(label string) {
		t.Helper()
		beach := s.desktop.path("beach.jpg")
		r := s.desktop.ctl("whereis", "--hosts", beach)
		if r.code != 0 || !strings.Contains(r.stdout, "  "+beach+"\n") || !strings.Contains(r.stdout, "  "+s.nas.path("photos/beach.jpg")+"\n") {
			t.Errorf("%s: whereis --hosts %s: exit %d, want the desktop's and the nas's copies\n%s%s", label, beach, r.code, r.stdout, r.stderr)
		}
		r = s.desktop.ctl("dups", "--across-hosts")
		if r.code != 0 || strings.Count(r.stdout, "SHA256-s9--") != 1 || !strings.Contains(r.stdout, "on 2 hosts  SHA256-s9--") {
			t.Errorf("%s: dups --across-hosts: exit %d, want the beach once, on two hosts\n%s%s", label, r.code, r.stdout, r.stderr)
		}
	}
	check("while the stolen laptop claims another size")
	publishAs(t, js, hubwire.Batch{Kind: hubwire.Log, IndexID: index, First: 1, Last: 2, Entries: []hubwire.Entry{{Path: claim.Path}}})
	waitAck(t, acks, func(st hubwire.State) bool { return st.Seq == 2 })
	check("after the claim was withdrawn")
	nc.Close()
}

// stolenLaptop connects with the laptop's seed as a plain NATS client,
// and hears the hub's acks to the laptop.
func stolenLaptop(t *testing.T, s *hubSetup) (*nats.Conn, jetstream.JetStream, chan hubwire.State) {
	t.Helper()
	seed, err := nats.NkeyOptionFromSeed(filepath.Join(s.laptop.base, "hub.seed"))
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(s.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	nc, err := nats.Connect(s.url, seed, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		nats.CustomInboxPrefix(hubwire.InboxPrefix+"laptop"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	acks := make(chan hubwire.State, 100)
	if _, err := nc.Subscribe(hubwire.AckPrefix+"laptop", func(m *nats.Msg) {
		var st hubwire.State
		if json.Unmarshal(m.Data, &st) == nil {
			acks <- st
		}
	}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, acks
}

func publishAs(t *testing.T, js jetstream.JetStream, b hubwire.Batch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hubWait)
	defer cancel()
	msg := &nats.Msg{Subject: hubwire.ChangesPrefix + "laptop", Data: b.Marshal()}
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(time.Now().String())); err != nil {
		t.Fatal(err)
	}
}

func waitAck(t *testing.T, acks chan hubwire.State, ok func(hubwire.State) bool) {
	t.Helper()
	deadline := time.After(hubWait)
	for {
		select {
		case st := <-acks:
			if ok(st) {
				return
			}
		case <-deadline:
			t.Fatalf("the hub did not apply the stolen laptop's batches in %s", hubWait)
		}
	}
}
