package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
	"github.com/annexd/annexd/key"
)

// The tests here attack the hub as a host with valid credentials would:
// a stolen laptop, or malware on one machine, with a raw NATS client and
// the laptop's nkey. Whatever it sends, the other hosts' records, acks
// and freshness stay theirs.

// refusalWait bounds the wait for the server's refusal of an operation,
// which comes in milliseconds: its absence fails the test.
const refusalWait = 10 * time.Second

// attacker is a raw NATS client with one host's valid credentials.
type attacker struct {
	t    *testing.T
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error         // the server's refusals
	acks chan hubwire.State // the hub's acks on this host's subject
}

func (c *cluster) attacker(t *testing.T, name string) *attacker {
	t.Helper()
	a := &attacker{t: t, name: name, errs: make(chan error, 1000), acks: make(chan hubwire.State, 1000)}
	opts := append(slices.Clone(c.creds[name]), nats.CustomInboxPrefix(hubwire.InboxPrefix+name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case a.errs <- err:
			default:
			}
		}))
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a.nc = nc
	if a.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(hubwire.AckPrefix+name, func(m *nats.Msg) {
		var st hubwire.State
		if json.Unmarshal(m.Data, &st) == nil {
			select {
			case a.acks <- st:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// publish stores data on the attacker's own changes subject under id.
func (a *attacker) publish(data []byte, id string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg := &nats.Msg{Subject: hubwire.ChangesPrefix + a.name, Data: data}
	if _, err := a.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id)); err != nil {
		a.t.Fatalf("publish %s: %v", id, err)
	}
}

// batch publishes b under a random message id.
func (a *attacker) batch(b hubwire.Batch) {
	a.t.Helper()
	a.publish(b.Marshal(), fmt.Sprintf("attack-%x", rand.Uint64()))
}

// aim publishes data on subject with reply subject reply, and waits for
// nothing: whatever answers goes there.
func (a *attacker) aim(subject, reply string, data []byte) {
	a.t.Helper()
	if err := a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: data}); err != nil {
		a.t.Fatal(err)
	}
}

// state asks the hub for the attacker's own state, the honest way.
func (a *attacker) state() hubwire.State {
	a.t.Helper()
	m, err := a.nc.Request(hubwire.StatePrefix+a.name, nil, waitFor)
	if err != nil {
		a.t.Fatalf("state: %v", err)
	}
	var st hubwire.State
	if err := json.Unmarshal(m.Data, &st); err != nil {
		a.t.Fatal(err)
	}
	return st
}

// hostState is what the hosts query tells any host of host name.
func (a *attacker) hostState(name string) hubwire.State {
	a.t.Helper()
	hosts, err := hub.NewClient(a.nc, a.name).Hosts(context.Background())
	if err != nil {
		a.t.Fatal(err)
	}
	for _, st := range hosts {
		if st.Name == name {
			return st
		}
	}
	a.t.Fatalf("the hub knows no %s: %+v", name, hosts)
	return hubwire.State{}
}

// barrier returns once the hub has handled everything the attacker sent
// before it. A batch of its own through the stream, acked once applied:
// the stream delivers in order. A state request, answered: the hub
// handles requests in order, and the stream's replies to what the
// attacker published came before the batch's own.
func (a *attacker) barrier() {
	a.t.Helper()
	epoch := rand.Uint64() | 1
	a.batch(hubwire.Batch{Kind: hubwire.SnapBegin, Epoch: epoch})
	a.state()
	deadline := time.After(waitFor)
	for {
		select {
		case st := <-a.acks:
			if st.Resending == epoch {
				return
			}
		case <-deadline:
			a.t.Fatalf("the hub did not apply the barrier batch in %s", waitFor)
		}
	}
}

// resend makes the attacker's whole index, under indexID, the entries es
// reflecting changes through last.
func (a *attacker) resend(indexID [16]byte, last uint64, es ...hubwire.Entry) {
	a.t.Helper()
	epoch := rand.Uint64() | 1
	a.batch(hubwire.Batch{Kind: hubwire.SnapBegin, IndexID: indexID, Epoch: epoch})
	a.batch(hubwire.Batch{Kind: hubwire.SnapChunk, IndexID: indexID, Epoch: epoch, First: 1, Entries: es})
	a.batch(hubwire.Batch{Kind: hubwire.SnapEnd, IndexID: indexID, Epoch: epoch, First: 1, Last: last})
}

// TestForgedMessageIDsBlockNoHost: a host reads another host's host id,
// index id and last change from the hosts query, and publishes on its own
// subject under every message id the other's next batches could carry as
// far as those facts tell. The stream's duplicate window spans all
// subjects; the other host's changes must still arrive at once.
func TestForgedMessageIDsBlockNoHost(t *testing.T) {
	c := newCluster(t)
	desktop := c.addHost("desktop")
	desktop.write(t, map[string]string{"keep.txt": "kept", "gone.txt": "removed after the forgery"})
	desktop.index(t, c)
	desktop.caughtUp(t)
	a := c.attacker(t, "laptop")
	st := a.hostState("desktop")
	hostID, err := publish.ParseHostID(st.HostID)
	if err != nil {
		t.Fatal(err)
	}
	var indexID [16]byte
	if _, err := hex.Decode(indexID[:], []byte(st.IndexID)); err != nil {
		t.Fatal(err)
	}
	forged := 0
	for first := st.Seq; first < st.Seq+4; first++ {
		for last := first + 1; last <= first+8; last++ {
			b := hubwire.Batch{Kind: hubwire.Log, HostID: hostID, IndexID: indexID, First: first, Last: last}
			// The id as it was made from public facts, and ids keyed by
			// whatever else is public.
			ids := []string{fmt.Sprintf("%x.%x.%s.%d.%d.%d", hostID, indexID, b.Kind, 0, first, last)}
			for _, k := range [][]byte{nil, hostID[:], indexID[:], []byte("desktop")} {
				ids = append(ids, b.MsgID(k))
			}
			for _, id := range ids {
				a.publish([]byte("forged"), id)
				forged++
			}
		}
	}
	a.barrier()
	desktop.write(t, map[string]string{"new.txt": "added after the forgery"})
	if err := os.Remove(filepath.Join(desktop.root, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	desktop.index(t, c)
	desktop.caughtUpWithin(t, time.Minute, false)
	c.matchTrees(t, "desktop")
	t.Logf("%d forged message ids; the desktop's changes arrived", forged)
}

// TestRepliesGoOnlyToTheAsker aims the hub's answers, and the stream's,
// at other hosts' subjects: acks, state requests, change subjects,
// JetStream's API. None lands there.
func TestRepliesGoOnlyToTheAsker(t *testing.T) {
	c := newCluster(t)
	nas, desktop := c.addHost("nas"), c.addHost("desktop")
	nas.write(t, map[string]string{"n.txt": "on the nas"})
	desktop.write(t, map[string]string{"d.txt": "on the desktop"})
	for _, h := range []*host{nas, desktop} {
		h.index(t, c)
		h.caughtUp(t)
	}
	a := c.attacker(t, "laptop")

	t.Run("a forged ack trims nothing", func(t *testing.T) {
		// The laptop's own state made to look like the desktop's, with
		// a thousand changes more.
		st := a.hostState("desktop")
		var indexID [16]byte
		if _, err := hex.Decode(indexID[:], []byte(st.IndexID)); err != nil {
			t.Fatal(err)
		}
		a.resend(indexID, st.Seq+1000)
		a.barrier()
		if own := a.state(); !own.Complete || own.IndexID != st.IndexID || own.Seq != st.Seq+1000 {
			t.Fatalf("the laptop's state is not the forgery: %+v", own)
		}
		a.aim(hubwire.StatePrefix+"laptop", hubwire.AckPrefix+"desktop", nil)
		a.aim(hubwire.QuerySubject("laptop", hubwire.QueryHosts), hubwire.AckPrefix+"desktop", []byte("{}"))
		a.aim(hubwire.ChangesPrefix+"laptop", hubwire.AckPrefix+"desktop", []byte("the stream's reply"))
		a.barrier()
		desktop.write(t, map[string]string{"after.txt": "written after the forged acks"})
		desktop.index(t, c)
		desktop.caughtUpWithin(t, time.Minute, true)
		c.matchTrees(t, "nas")
	})

	t.Run("a stopped host stays silent", func(t *testing.T) {
		nas.stopPublisher(t)
		before := a.hostState("nas").LastSeen
		for range 10 {
			a.aim(hubwire.StatePrefix+"laptop", hubwire.StatePrefix+"nas", nil)
		}
		a.aim(hubwire.QuerySubject("laptop", hubwire.QueryHosts), hubwire.StatePrefix+"nas", []byte("{}"))
		a.aim(hubwire.ChangesPrefix+"laptop", hubwire.StatePrefix+"nas", []byte("the stream's reply"))
		a.barrier()
		if after := a.hostState("nas").LastSeen; !after.Equal(before) {
			t.Fatalf("the stopped nas was last seen %s, then %s after replies aimed at its state subject", before, after)
		}
	})

	t.Run("no answer lands in another host's subjects", func(t *testing.T) {
		before := c.hub.Stats()
		a.aim(hubwire.StatePrefix+"laptop", hubwire.ChangesPrefix+"desktop", nil)
		a.aim(hubwire.QuerySubject("laptop", hubwire.QueryHosts), hubwire.ChangesPrefix+"desktop", []byte("{}"))
		for _, api := range []string{"PURGE", "DELETE"} {
			a.aim(hubwire.StatePrefix+"laptop", "$JS.API.STREAM."+api+"."+hubwire.Stream, nil)
		}
		a.barrier()
		after := c.hub.Stats()
		for r, n := range after.Dropped {
			if r.Host == "desktop" && n != before.Dropped[r] {
				t.Errorf("the hub's answers landed on the desktop's subject: %d dropped (%s)", n-before.Dropped[r], r.Reason)
			}
		}
		refused := hub.Refusal{Host: "laptop", Reason: hub.RefuseReplyElsewhere}
		if n := after.Refused[refused] - before.Refused[refused]; n != 4 {
			t.Errorf("%d requests refused for their reply subject, want 4", n)
		}
		desktop.write(t, map[string]string{"still.txt": "the stream is still there"})
		desktop.index(t, c)
		desktop.caughtUpWithin(t, time.Minute, false)
	})

	t.Run("no claim but the hub's", func(t *testing.T) {
		// The stream takes what reaches a claims subject: a reply aimed
		// there, or anything else that gets there, takes no name, not
		// even one that no publisher holds (the laptop's: the attacker
		// names no instance).
		nc, err := nats.Connect("", c.hub.InternalOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		before := c.hub.Stats().Dropped
		forged := []byte(`{"instance":4660,"mac":"00000000000000000000000000000000"}`)
		if _, err := js.Publish(context.Background(), hubwire.ClaimPrefix+"laptop", forged, jetstream.WithMsgID("claim forged")); err != nil {
			t.Fatal(err)
		}
		a.aim(hubwire.ChangesPrefix+"laptop", hubwire.ClaimPrefix+"desktop", []byte("the stream's reply"))
		a.barrier()
		waitUntil(t, "both dropped", func() bool {
			after := c.hub.Stats().Dropped
			return after[hub.Refusal{Host: "laptop", Reason: hub.DropBadClaim}] > before[hub.Refusal{Host: "laptop", Reason: hub.DropBadClaim}] &&
				after[hub.Refusal{Host: "desktop", Reason: hub.DropBadClaim}] > before[hub.Refusal{Host: "desktop", Reason: hub.DropBadClaim}]
		})
		if got := a.hostState("laptop").Instance; got != 0 {
			t.Fatalf("a forged claim took the laptop's name for %x", got)
		}
	})

	t.Run("no phantom hosts", func(t *testing.T) {
		for i := range 50 {
			a.aim(hubwire.StatePrefix+"laptop", hubwire.StatePrefix+fmt.Sprintf("ghost-%d", i), nil)
		}
		a.aim(hubwire.StatePrefix+"laptop", hubwire.StatePrefix+"ghost-\xff\xfe", nil)
		a.aim(hubwire.ChangesPrefix+"laptop", hubwire.StatePrefix+"ghost-js", []byte("the stream's reply"))
		a.aim(hubwire.ChangesPrefix+"laptop", hubwire.ChangesPrefix+"ghost-js", []byte("the stream's reply"))
		a.barrier()
		// The hub writes last-seen times when it stops.
		c.stopHub()
		c.startHub()
		for _, st := range c.hostStates(t, "desktop") {
			if st.Name != "nas" && st.Name != "desktop" && st.Name != "laptop" {
				t.Errorf("a phantom host: %+v", st)
			}
		}
	})
}

// TestAClaimOfAnotherSizeHidesNothing: a host claims the digest of
// another host's file with another size. Whereis of the file still finds
// its holders, while the claim stands and after it is withdrawn, and dups
// lists the content once.
func TestAClaimOfAnotherSizeHidesNothing(t *testing.T) {
	c := newCluster(t)
	nas, desktop := c.addHost("nas"), c.addHost("desktop")
	desktop.write(t, map[string]string{"photo.jpg": "the photo"})
	nas.write(t, map[string]string{"backup/photo.jpg": "the photo", "other.txt": "other"})
	for _, h := range []*host{nas, desktop} {
		h.index(t, c)
		h.caughtUp(t)
	}
	sum := sha256.Sum256([]byte("the photo"))
	d := hex.EncodeToString(sum[:])
	want := holders{"desktop": {filepath.Join(desktop.root, "photo.jpg")}, "nas": {filepath.Join(nas.root, "backup/photo.jpg")}}
	check := func(label string) {
		t.Helper()
		for _, asker := range []string{"desktop", "nas"} {
			cl := c.client(t, asker)
			for _, size := range []int64{9, -1} {
				got, err := cl.Whereis(context.Background(), "SHA256", d, size)
				if err != nil {
					t.Fatal(err)
				}
				if got.Size != 9 || !equalHolders(fromReply(t, got), want) {
					t.Errorf("%s: whereis through %s (size %d): size %d, %v; want size 9, %v", label, asker, size, got.Size, fromReply(t, got), want)
				}
			}
			r, err := cl.Dups(context.Background(), hubwire.DupsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, it := range r.Items {
				if it.Digest == d {
					listed = append(listed, fmt.Sprintf("%d:%v", it.Size, fromReply(t, it)))
				}
			}
			if len(listed) != 1 || listed[0] != fmt.Sprintf("9:%v", want) {
				t.Errorf("%s: dups through %s lists the photo as %q, want once on the desktop and the nas", label, asker, listed)
			}
		}
	}
	a := c.attacker(t, "laptop")
	index := [16]byte{0xe1}
	claim := hubwire.Entry{Path: []byte("/claims/photo.jpg"), Backend: key.SHA256, Digest: sum[:], Size: 123456}
	a.resend(index, 1, claim)
	a.barrier()
	check("while another size is claimed")
	// Withdrawn: the claim's path removed.
	a.batch(hubwire.Batch{Kind: hubwire.Log, IndexID: index, First: 1, Last: 2, Entries: []hubwire.Entry{{Path: claim.Path}}})
	a.barrier()
	check("after the claim was withdrawn")
}

// expanding is a batch of about n bytes whose entries each repeat the
// path before and add one byte: small on the wire, paths without bound
// once decoded.
func expanding(n int) []byte {
	var entries []byte
	count := 0
	for prev := 0; len(entries) < n; count++ {
		shared, add := prev, []byte("x")
		if count == 0 {
			add = []byte("/")
		}
		entries = binary.AppendUvarint(entries, uint64(shared))
		entries = binary.AppendUvarint(entries, uint64(len(add)))
		entries = append(append(entries, add...), byte(key.Unknown))
		prev += len(add)
	}
	out := append([]byte{1, byte(hubwire.SnapChunk)}, make([]byte, 32)...)
	for _, v := range []uint64{1, 1, 0, uint64(count)} {
		out = binary.AppendUvarint(out, v)
	}
	return append(out, entries...)
}

// TestBatchesThatCannotBeAppliedBlockNoOne: a path longer than bbolt's
// largest key, and entries whose paths expand without bound, are dropped
// with a count; the other hosts' changes go on.
func TestBatchesThatCannotBeAppliedBlockNoOne(t *testing.T) {
	c := newCluster(t)
	desktop := c.addHost("desktop")
	desktop.write(t, map[string]string{"a.txt": "A"})
	desktop.index(t, c)
	desktop.caughtUp(t)
	a := c.attacker(t, "laptop")
	epoch := rand.Uint64() | 1
	a.batch(hubwire.Batch{Kind: hubwire.SnapBegin, Epoch: epoch})
	long := hubwire.Entry{Path: []byte("/" + strings.Repeat("x", 39999)), Backend: key.SHA256, Digest: make([]byte, 32), Size: 1}
	a.batch(hubwire.Batch{Kind: hubwire.SnapChunk, Epoch: epoch, First: 1, Entries: []hubwire.Entry{long}})
	a.publish(expanding(40<<10), "expanding")
	desktop.write(t, map[string]string{"b.txt": "B, after the bad batches"})
	desktop.index(t, c)
	desktop.caughtUpWithin(t, time.Minute, false)
	c.matchTrees(t, "desktop")
	a.barrier()
	if n := c.hub.Stats().Dropped[hub.Refusal{Host: "laptop", Reason: hub.DropUndecodable}]; n != 2 {
		t.Errorf("%d of the laptop's batches dropped as undecodable, want 2", n)
	}
	if !strings.Contains(c.logs.tail(1000), `msg="hub: batch dropped" host=laptop why=undecodable`) {
		t.Error("no log line says the batches were dropped")
	}
}

// TestRemovedHostIsForgotten: a host taken out of [[hub.host]] is gone at
// the hub's next start: from hosts, from whereis, and from the counts.
func TestRemovedHostIsForgotten(t *testing.T) {
	c := newCluster(t)
	laptop, desktop := c.addHost("laptop"), c.addHost("desktop")
	laptop.write(t, map[string]string{"shared.txt": "on both", "own.txt": "laptop only"})
	desktop.write(t, map[string]string{"shared.txt": "on both", "mine.txt": "desktop only"})
	for _, h := range []*host{laptop, desktop} {
		h.index(t, c)
		h.caughtUp(t)
	}
	desktop.stopPublisher(t)
	c.stopHub()
	c.cfg.Hosts = slices.DeleteFunc(c.cfg.Hosts, func(h hub.Host) bool { return h.Name == "desktop" })
	c.startHub()
	for _, st := range c.hostStates(t, "laptop") {
		if st.Name == "desktop" {
			t.Fatalf("the removed desktop is still a host: %+v", st)
		}
	}
	desktop.closeStore(t)
	delete(c.hosts, "desktop")
	c.matchTrees(t, "laptop")
	r, err := c.client(t, "laptop").Copies(context.Background(), hubwire.CopiesRequest{FewerThan: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 2 {
		t.Fatalf("with the desktop removed, %d contents are on fewer than 2 hosts, want 2 (the laptop's)", len(r.Items))
	}
	if !strings.Contains(c.logs.tail(100), `host=desktop records=2`) {
		t.Error("no log line says the desktop's records were removed")
	}
}

// TestHostsCannotReachEachOther: a host may not read or write another
// host's subjects, nor touch JetStream's or the server's API beyond
// what its changes and copies need, and nothing there whose answer it
// could aim elsewhere.
func TestHostsCannotReachEachOther(t *testing.T) {
	c := newCluster(t)
	a := c.attacker(t, "laptop")
	st := hubwire.Stream
	subs := []string{">", "annexd.>", hubwire.ChangesPrefix + "desktop", hubwire.ChangesPrefix + "*",
		hubwire.AckPrefix + "desktop", hubwire.AckPrefix + "*", hubwire.StatePrefix + "desktop", hubwire.StatePrefix + "laptop",
		hubwire.QuerySubject("desktop", "*"), hubwire.QuerySubject("laptop", "*"),
		hubwire.InboxPrefix + "desktop.>", "_INBOX.>", "$JS.API.>", "$JS.ACK.>", "$KV.>", "$SYS.>"}
	pubs := []string{hubwire.ChangesPrefix + "desktop", hubwire.ChangesPrefix + "nas", hubwire.StatePrefix + "desktop",
		hubwire.QuerySubject("desktop", hubwire.QueryHosts), hubwire.QueryPrefix + hubwire.QueryHosts,
		hubwire.AckPrefix + "desktop", hubwire.AckPrefix + "laptop", hubwire.InboxPrefix + "desktop.x", "_INBOX.x",
		"$JS.API.INFO", "$JS.API.STREAM.LIST", "$JS.API.STREAM.INFO." + st, "$JS.API.STREAM.PURGE." + st,
		"$JS.API.STREAM.DELETE." + st, "$JS.API.STREAM.MSG.DELETE." + st, "$JS.API.STREAM.MSG.GET." + st,
		"$JS.API.CONSUMER.CREATE." + st + ".mine", "$JS.API.CONSUMER.DELETE." + st + ".view",
		"$JS.API.CONSUMER.MSG.NEXT." + st + ".view", "$KV.hosts.desktop", "$SYS.REQ.SERVER.PING"}
	// Nothing whose answer goes where the caller says, on its copy
	// buckets: it could aim their bytes at another host.
	in, out := hubwire.CopyStream(hubwire.CopyBucket("desktop", "laptop")), hubwire.CopyStream(hubwire.CopyBucket("laptop", "desktop"))
	for _, s := range []string{in, out} {
		pubs = append(pubs, "$JS.API.CONSUMER.CREATE."+s, "$JS.API.CONSUMER.CREATE."+s+".c",
			"$JS.API.CONSUMER.CREATE."+s+".c.$O.x.C.>", "$JS.API.CONSUMER.DURABLE.CREATE."+s+".c",
			"$JS.API.STREAM.MSG.GET."+s, "$JS.API.DIRECT.GET."+s, "$JS.API.STREAM.INFO."+s)
	}
	refused := func(what, subject string) {
		t.Helper()
		select {
		case err := <-a.errs:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+subject+`"`) {
				t.Errorf("%s %s: %v, want a permission violation", what, subject, err)
			}
		case <-time.After(refusalWait):
			t.Errorf("%s %s: allowed", what, subject)
		}
	}
	for _, s := range subs {
		sub, err := a.nc.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.nc.Flush()
		refused("subscribe", s)
		_ = sub.Unsubscribe()
	}
	for _, s := range pubs {
		if err := a.nc.Publish(s, []byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = a.nc.Flush()
		refused("publish", s)
	}
	if !t.Failed() {
		t.Logf("%d operations refused", len(subs)+len(pubs))
	}
}

// TestHubConnectionIsConfined: the hub's own connection may answer only
// into the known hosts' inboxes and acks, and use only the JetStream
// calls its stream needs; even a bug cannot publish elsewhere.
func TestHubConnectionIsConfined(t *testing.T) {
	c := newCluster(t)
	errs := make(chan error, 100)
	opts := append(c.hub.InternalOptions(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	nc, err := nats.Connect("", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st := hubwire.Stream
	allowed := []string{hubwire.InboxPrefix + "desktop.x", hubwire.InboxPrefix + "nas.x.y", hubwire.AckPrefix + "laptop"}
	forbidden := []string{hubwire.ChangesPrefix + "desktop", hubwire.StatePrefix + "desktop",
		hubwire.QuerySubject("desktop", hubwire.QueryHosts), hubwire.AckPrefix + "ghost", hubwire.InboxPrefix + "ghost.x",
		"_INBOX_desktop", "$JS.API.STREAM.PURGE." + st, "$JS.API.STREAM.DELETE." + st, "$JS.API.STREAM.MSG.DELETE." + st,
		"$JS.API.CONSUMER.DELETE." + st + ".view", "$JS.API.STREAM.CREATE.OTHER", "$KV.x.y", "$SYS.REQ.SERVER.PING", "anything"}
	for _, s := range forbidden {
		for _, ok := range allowed {
			if err := nc.Publish(ok, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Publish(s, []byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+s+`"`) {
				t.Errorf("publish %s: %v, want a permission violation for it alone", s, err)
			}
		case <-time.After(refusalWait):
			t.Errorf("the hub's connection may publish to %s", s)
		}
	}
	if !t.Failed() {
		t.Logf("the hub's connection: %d operations refused, %d allowed", len(forbidden), len(allowed))
	}
}

// TestStaleAfterHoldsUnderAttack: with replies aimed at its state
// subject, a stopped host still turns stale after stale_after.
func TestStaleAfterHoldsUnderAttack(t *testing.T) {
	c := newCluster(t)
	nas := c.addHost("nas")
	nas.write(t, map[string]string{"n.txt": "N"})
	nas.index(t, c)
	nas.caughtUp(t)
	nas.stopPublisher(t)
	c.stopHub()
	c.cfg.StaleAfter = 3 * time.Second
	c.startHub()
	a := c.attacker(t, "laptop")
	deadline := time.Now().Add(waitFor)
	for {
		a.aim(hubwire.StatePrefix+"laptop", hubwire.StatePrefix+"nas", nil)
		a.aim(hubwire.ChangesPrefix+"laptop", hubwire.StatePrefix+"nas", []byte("the stream's reply"))
		if st := a.hostState("nas"); st.Stale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped nas never turned stale under replies aimed at its state subject")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestBadBatchesKeepTheHubSmall runs the hub in a process of its own and
// sends it, as one host, the batches that once took its memory from 42
// to 352 MB (116 KB of entries reusing the path before) and past a 1 GiB
// cap (762 KB), and one with a 40,000-byte path. Its peak memory stays
// where it was, and another host's changes go on.
func TestBadBatchesKeepTheHubSmall(t *testing.T) {
	c := startChild(t, "hub", []string{"laptop", "desktop"})
	h := newBenchHost(t, "desktop")
	h.submit(t, synthetic(1, 100, 0))
	h.startPublisher(t, c.url)
	h.caughtUp(t)
	rss0, peak0 := c.memory(t)
	nc, err := nats.Connect(c.url, nats.UserInfo("laptop", benchPass), nats.CustomInboxPrefix(hubwire.InboxPrefix+"laptop"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	long := hubwire.Batch{Kind: hubwire.SnapChunk, Epoch: 1, First: 1,
		Entries: []hubwire.Entry{{Path: []byte("/" + strings.Repeat("x", 39999)), Backend: key.SHA256, Digest: make([]byte, 32), Size: 1}}}
	bad := [][]byte{expanding(116 << 10), expanding(762 << 10), long.Marshal()}
	for i, data := range bad {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: hubwire.ChangesPrefix + "laptop", Data: data}, jetstream.WithMsgID(fmt.Sprint("bad-", i)))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Applied after the bad batches: the stream delivers in order.
	h.submit(t, synthetic(2, 100, 0))
	h.caughtUp(t)
	rss1, peak1 := c.memory(t)
	t.Logf("hub memory before the bad batches: %.0f MB resident, %.0f MB peak; after: %.0f MB, %.0f MB peak",
		rss0/1e6, peak0/1e6, rss1/1e6, peak1/1e6)
	if peak1-peak0 > 64<<20 {
		t.Fatalf("the bad batches raised the hub's peak memory by %.0f MB", (peak1-peak0)/1e6)
	}
}
