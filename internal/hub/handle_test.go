package hub

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// TestHandleDropsWhatItCannotApply: a batch the view cannot apply (here
// a view that cannot write) is dropped from the stream and counted, not
// delivered again and again ahead of every other host's batches.
func TestHandleDropsWhatItCannotApply(t *testing.T) {
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(time.Minute) {
		t.Fatal("the server did not start")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: hubwire.Stream, Subjects: []string{hubwire.ChangesPrefix + "*"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: consumerName,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Dir: t.TempDir(), Hosts: []Host{{Name: "a", Password: "$2a$04$abcdefghijklmnopqrstuuJk9n1zlK5l2ckfyMkVdX3l7C1r2Ppui"}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "view.db")
	v, err := openView(path, viewConfig{stale: time.Hour, now: time.Now, known: h.known})
	if err != nil {
		t.Fatal(err)
	}
	_ = v.db.Close()
	if v.db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer v.close()
	b := hubwire.Batch{Kind: hubwire.SnapBegin, Epoch: 1}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: hubwire.ChangesPrefix + "a", Data: b.Marshal()}, jetstream.WithMsgID("1")); err != nil {
		t.Fatal(err)
	}
	got, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for m := range got.Messages() {
		h.handle(nc, v, m)
	}
	// A batch given back is delivered again within its delay (5 s).
	again, err := cons.Fetch(1, jetstream.FetchMaxWait(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range again.Messages() {
		t.Fatalf("the batch was delivered again: %s", m.Subject())
	}
	if n := h.Stats().Dropped[Refusal{Host: "a", Reason: DropUnappliable}]; n != 1 {
		t.Fatalf("%d batches counted as unappliable, want 1", n)
	}
}

// TestViewUpgradeFromDigestOnly opens a view of layout 1, which grouped
// records by digest alone, where one host claimed another's digest with
// another size: the content index is rebuilt, and every answer about the
// real content is right again.
func TestViewUpgradeFromDigestOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view.db")
	d := dig("the photo")
	dk := codec.DigestKey(nil, key.SHA256, d)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketHosts, bucketFiles, bucketDigest, bucketDigests, bucketXDups} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		put := func(b []byte, k, v []byte) {
			if err == nil {
				err = tx.Bucket(b).Put(k, v)
			}
		}
		for _, h := range []hostRec{{Num: 1, Name: "a", Complete: true, Records: 1, Bytes: 9, LastSeen: time.Now()},
			{Num: 2, Name: "b", Complete: true, Records: 2, Bytes: 123465, LastSeen: time.Now()}} {
			j, _ := json.Marshal(h)
			put(bucketHosts, []byte(h.Name), j)
		}
		for _, f := range []struct {
			num  uint32
			path string
			size int64
		}{{1, "/a/photo.jpg", 9}, {2, "/b/photo.jpg", 9}, {2, "/b/claim", 123456}} {
			fk := append(binary.BigEndian.AppendUint32(nil, f.num), f.path...)
			put(bucketFiles, fk, encodeFile(key.SHA256, d, f.size, 0))
			put(bucketDigest, append(clone(dk), fk...), nil)
		}
		// What layout 1 made of it: one summary, the last size written,
		// and the content listed twice among the duplicates.
		put(bucketDigests, dk, binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(nil, 123456), 3), 2))
		put(bucketXDups, append(binary.BigEndian.AppendUint64(nil, ^uint64(9)), dk...), nil)
		put(bucketXDups, append(binary.BigEndian.AppendUint64(nil, ^uint64(123456)), dk...), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	v, err := openView(path, viewConfig{stale: time.Hour, now: time.Now, known: map[string]bool{"a": true, "b": true}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	c, err := v.whereis("a", hubwire.WhereisRequest{Backend: "SHA256", Digest: hexd("the photo")})
	if err != nil || c.Size != 9 || len(c.Holders) != 2 {
		t.Fatalf("whereis after the upgrade: %+v %v, want size 9 on a and b", c, err)
	}
	r, err := v.dups(hubwire.DupsRequest{})
	if err != nil || len(r.Items) != 1 || r.Items[0].Size != 9 {
		t.Fatalf("dups after the upgrade: %+v %v, want the photo once", r.Items, err)
	}
	r, err = v.copies(hubwire.CopiesRequest{FewerThan: 2})
	if err != nil || len(r.Items) != 1 || r.Items[0].Size != 123456 || r.Items[0].Holders[0].Host != "b" {
		t.Fatalf("copies after the upgrade: %+v %v, want b's claim alone", r.Items, err)
	}
	var version uint64
	_ = v.db.View(func(tx *bolt.Tx) error { version = readVersion(tx); return nil })
	if version != viewVersion {
		t.Fatalf("layout %d after the upgrade, want %d", version, viewVersion)
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// TestWarningsAreSpaced: a host sending garbage as fast as it can gets
// one warning a minute for each reason, which counts what came since the
// last; every batch and request is still counted.
func TestWarningsAreSpaced(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	h, err := New(Config{Dir: t.TempDir(), Now: clk.now, Hosts: []Host{{Name: "a", Password: "$2a$04$abcdefghijklmnopqrstuuJk9n1zlK5l2ckfyMkVdX3l7C1r2Ppui"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for range 3 {
		got = append(got, h.countDrop("a", DropUndecodable))
	}
	got = append(got, h.countRefusal("a", RefuseReplyElsewhere), h.countDrop("a", DropNoID))
	clk.add(time.Minute)
	got = append(got, h.countDrop("a", DropUndecodable), h.countDrop("a", DropUndecodable))
	if want := []int64{1, 0, 0, 1, 1, 3, 0}; !slices.Equal(got, want) {
		t.Fatalf("warnings due: %v, want %v", got, want)
	}
	if n := h.Stats().Dropped[Refusal{Host: "a", Reason: DropUndecodable}]; n != 5 {
		t.Fatalf("%d batches counted, want 5", n)
	}
}
