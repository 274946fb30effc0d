package hubcopy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubcopy"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/loopfs"
)

// twoHosts starts a hub, desktop holding files on an ext4 image and
// laptop asking, its copier dialling copyURL when not empty.
func twoHosts(t testing.TB, rate int64, proxied bool) (*world, *host, *host, *loopfs.FS, *proxy) {
	t.Helper()
	w := newWorld(t)
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: max(64<<20, 3*copyMaxBytes)})
	desktop := w.addHost("desktop", fs.Dir, "", rate)
	var px *proxy
	url := ""
	if proxied {
		px = newProxy(t, w.url)
		url = px.url()
	}
	laptop := w.addHost("laptop", t.TempDir(), url, rate)
	return w, desktop, laptop, fs, px
}

// stored reports whether the bucket from holder to asker still holds
// an object named k, as the asker sees it through the hub.
func stored(t testing.TB, w *world, holder, asker, k string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := hubcopy.Stored(ctx, w.connect(t, asker), asker, holder, k)
	if err != nil {
		t.Fatal(err)
	}
	return info.Found || info.Error != "" // metadata the hub cannot read is there too
}

// putBytes puts data into the bucket from holder to asker as object k,
// as the holder would.
func putBytes(t testing.TB, w *world, holder, asker, k string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hubcopy.PutBytes(ctx, w.connect(t, holder), hubwire.CopyBucket(holder, asker), k, data); err != nil {
		t.Fatal(err)
	}
}

func TestFetchVerifiedCopy(t *testing.T) {
	w, desktop, laptop, _, _ := twoHosts(t, -1, false)
	k, data := desktop.put(t, "photo.jpg", 3<<20+17)
	var got bytes.Buffer
	from, err := laptop.fetch(t, k, &got)
	if err != nil {
		t.Fatal(err)
	}
	if from != "desktop" || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("fetched %d bytes from %q; want the %d bytes of desktop's copy", got.Len(), from, len(data))
	}
	if s := laptop.cp.Stats(); s.Fetched != 1 || s.Rejected != 0 {
		t.Fatalf("laptop's stats: %+v", s)
	}
	if stored(t, w, "desktop", "laptop", k) {
		t.Fatal("the object is still in the bucket after a good fetch")
	}
}

func TestRottenCopyIsNotSent(t *testing.T) {
	w, desktop, laptop, fs, _ := twoHosts(t, -1, false)
	k, _ := desktop.put(t, "photo.jpg", 1<<20)
	// The disk rots under the page cache, which still holds the good
	// bytes: only a read from the device sees it.
	fs.FlipByteUnderCache(t, filepath.Join(fs.Dir, "photo.jpg"), 4097)
	var got bytes.Buffer
	_, err := laptop.fetch(t, k, &got)
	if !errors.Is(err, hubcopy.ErrNoCopy) || errors.Is(err, hubcopy.ErrUnanswered) || !strings.Contains(err.Error(), "0 of 1 copies healthy") {
		t.Fatalf("fetch of a rotten copy: %v; want no verified copy, 0 of 1 healthy, the holder answered", err)
	}
	if got.Len() != 0 {
		t.Fatalf("%d bytes written of a rotten copy", got.Len())
	}
	if s := desktop.cp.Stats(); s.Served != 0 || s.Refused != 1 {
		t.Fatalf("desktop's stats: %+v", s)
	}
	if stored(t, w, "desktop", "laptop", k) {
		t.Fatal("a rotten copy is in the bucket")
	}
}

func TestTamperedObjectIsRejected(t *testing.T) {
	w, desktop, laptop, _, _ := twoHosts(t, -1, false)
	k, data := desktop.put(t, "photo.jpg", 1<<20)
	// A copy in the bucket with other bytes of the same size, its own
	// SHA-256 in order: only the key's digest tells.
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 1
	putBytes(t, w, "desktop", "laptop", k, bad)
	var got bytes.Buffer
	_, err := laptop.fetch(t, k, &got)
	if !errors.Is(err, hubcopy.ErrDigest) {
		t.Fatalf("fetch of a tampered copy: %v; want ErrDigest", err)
	}
	if s := laptop.cp.Stats(); s.Rejected != 1 || s.Fetched != 0 {
		t.Fatalf("laptop's stats: %+v", s)
	}
	if stored(t, w, "desktop", "laptop", k) {
		t.Fatal("the tampered object is still in the bucket")
	}
	// The next fetch asks the holder, whose copy is good.
	got.Reset()
	if _, err := laptop.fetch(t, k, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("fetch after the tampered copy went: %v, %d bytes", err, got.Len())
	}
}

func TestOtherHostsObjectsAreRefused(t *testing.T) {
	w, desktop, _, _, _ := twoHosts(t, -1, false)
	k, _ := desktop.put(t, "photo.jpg", 64<<10)
	// desktop puts a copy for laptop, as it would when asked.
	putBytes(t, w, "desktop", "laptop", k, []byte("laptop's"))
	denied := make(chan string, 100)
	nc := w.connect(t, "intruder", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		denied <- err.Error()
	}))
	ijs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	try := func(what string, fn func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := fn(ctx); err == nil {
			t.Errorf("intruder could %s", what)
		}
	}
	bucket := hubwire.CopyBucket("desktop", "laptop")
	try("bind laptop's bucket", func(ctx context.Context) error { _, err := ijs.ObjectStore(ctx, bucket); return err })
	try("read laptop's object", func(ctx context.Context) error {
		_, err := ijs.Stream(ctx, hubwire.CopyStream(bucket))
		return err
	})
	try("write into laptop's bucket", func(ctx context.Context) error {
		_, err := ijs.Publish(ctx, "$O."+bucket+".C.x", []byte("x"))
		return err
	})
	try("make a bucket of its own", func(ctx context.Context) error {
		_, err := ijs.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "mine"})
		return err
	})
	// Asking as laptop is refused by the server; the publish itself
	// returns nothing, the violation comes below.
	if err := nc.Publish(hubwire.CopyAskSubject("laptop", "desktop"), []byte(`{"id":"1","key":"`+k+`"}`)); err != nil {
		t.Fatal(err)
	}
	// The violations come asynchronously; each try above made one.
	deadline := time.After(10 * time.Second)
	for n := 0; n < 5; n++ {
		select {
		case msg := <-denied:
			if !strings.Contains(msg, "Permissions Violation") {
				t.Errorf("intruder: %s", msg)
			}
		case <-deadline:
			t.Fatalf("%d permission violations; want 5", n)
		}
	}
	if !stored(t, w, "desktop", "laptop", k) {
		t.Fatal("laptop's object is gone")
	}
	if s := desktop.cp.Stats(); s.Served != 0 || s.Refused != 0 {
		t.Fatalf("desktop answered a request made as laptop: %+v", s)
	}
}

func TestFetchResumesAfterBrokenLink(t *testing.T) {
	const size, rate = 8 << 20, 8 << 20
	w, desktop, laptop, _, px := twoHosts(t, rate, true)
	k, data := desktop.put(t, "video.mkv", size)
	// Down for longer than a read of the object waits (5 s): the read
	// fails, and Fetch reads the stored object again once the link is
	// back. (A shorter break the object store's ordered consumer mends
	// on its own, carrying on after the last chunk it delivered.)
	cut := &cutter{after: 1 << 20, cut: func() { px.block(6 * time.Second) }}
	from, err := laptop.fetch(t, k, cut)
	if err != nil {
		t.Fatal(err)
	}
	if from != "desktop" || !bytes.Equal(cut.buf.Bytes(), data) {
		t.Fatalf("fetched %d bytes from %q; want %d", cut.buf.Len(), from, len(data))
	}
	if !cut.done {
		t.Fatal("the link was never cut")
	}
	if s := desktop.cp.Stats(); s.Served != 1 {
		t.Fatalf("desktop served %d copies; want 1 (a resume does not ask the holder again)", s.Served)
	}
	if stored(t, w, "desktop", "laptop", k) {
		t.Fatal("the object is still in the bucket after a good fetch")
	}
	if s := laptop.cp.Stats(); s.Resumed == 0 || s.Fetched != 1 {
		t.Fatalf("laptop's stats: %+v; want a read started again", s)
	}
}

// cutter keeps what is written and breaks the link once after some bytes.
type cutter struct {
	buf   bytes.Buffer
	after int
	cut   func()
	done  bool
}

func (c *cutter) Write(p []byte) (int, error) {
	n, _ := c.buf.Write(p)
	if !c.done && c.buf.Len() >= c.after {
		c.done = true
		c.cut()
	}
	return n, nil
}

func TestRateLimitHolds(t *testing.T) {
	const size, rate = 3 << 20, 2 << 20
	_, desktop, laptop, _, _ := twoHosts(t, rate, false)
	k, data := desktop.put(t, "song.flac", size)
	var got bytes.Buffer
	began := time.Now()
	if _, err := laptop.fetch(t, k, &got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatal("wrong bytes")
	}
	// The holder's read into the bucket and the asker's read out of it
	// are each paced: two passes over the bytes at the rate.
	want := 2 * float64(size) / float64(rate)
	t.Logf("%d bytes twice at %d B/s took %v (the rate alone: %.2fs)", size, rate, took, want)
	if took.Seconds() < 0.8*want {
		t.Fatalf("%v for two passes of %d bytes at %d B/s: faster than the rate", took, size, rate)
	}
	if took.Seconds() > 10*want {
		t.Fatalf("%v for two passes of %d bytes at %d B/s: far slower than the rate", took, size, rate)
	}
}

// TestBucketCannotBeAimedAtAcks: NATS lets a consumer deliver to any
// subject, and sends a stream read's answer to any reply subject. Laptop
// asks desktop for a file whose bytes are a state naming desktop, then
// tries to have its bucket deliver it onto desktop's acks: through a
// consumer, or a read aimed there. The server refuses both (laptop reads
// its bucket through the hub, which answers only into its inbox), and
// desktop takes no forged ack.
func TestBucketCannotBeAimedAtAcks(t *testing.T) {
	w, desktop, _, _, _ := twoHosts(t, -1, false)
	desktop.put(t, "seed.txt", 100)
	local, err := desktop.st.ChangeLog()
	if err != nil {
		t.Fatal(err)
	}
	forged := fmt.Sprintf(`{"name":"desktop","index_id":%q,"seq":1000,"complete":true}`, local.IndexID.String())
	k := desktop.putBytes(t, "state.json", []byte(forged))
	denied := make(chan string, 100)
	nc := w.connect(t, "laptop", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		denied <- err.Error()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ans := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(hubwire.CopySentSubject("desktop", "laptop"), ans)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Publish(hubwire.CopyAskSubject("laptop", "desktop"), []byte(`{"id":"1","key":"`+k+`"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ans:
		if !strings.Contains(string(m.Data), hubwire.CopySent) {
			t.Fatalf("desktop answered %s", m.Data)
		}
	case <-ctx.Done():
		t.Fatal("no answer")
	}
	bucket := hubwire.CopyBucket("desktop", "laptop")
	stream := hubwire.CopyStream(bucket)
	consumer := fmt.Sprintf(`{"stream_name":%q,"config":{"name":"aim","deliver_subject":%q,"filter_subject":%q,"ack_policy":"none"}}`,
		stream, hubwire.AckPrefix+"desktop", "$O."+bucket+".C.>")
	for _, aim := range []struct{ subject, reply, body string }{
		{"$JS.API.CONSUMER.CREATE." + stream + ".aim", "", consumer},
		{"$JS.API.CONSUMER.CREATE." + stream, "", consumer},
		{"$JS.API.STREAM.MSG.GET." + stream, hubwire.AckPrefix + "desktop", `{"seq":1}`},
		{"$JS.API.DIRECT.GET." + stream, hubwire.AckPrefix + "desktop", `{"seq":1}`},
	} {
		if err := nc.PublishMsg(&nats.Msg{Subject: aim.subject, Reply: aim.reply, Data: []byte(aim.body)}); err != nil {
			t.Fatal(err)
		}
		select {
		case msg := <-denied:
			if !strings.Contains(msg, "Permissions Violation") || !strings.Contains(msg, aim.subject) {
				t.Errorf("%s: %s", aim.subject, msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no permission violation", aim.subject)
		}
	}
	// The copy is laptop's to read, through the hub.
	if !stored(t, w, "desktop", "laptop", k) {
		t.Error("the copy desktop sent is not in laptop's bucket")
	}
	time.Sleep(200 * time.Millisecond)
	if s := desktop.pub.Status(); s.Acked > local.Seq+1 {
		t.Fatalf("desktop took a forged ack: acknowledged %d of %d changes", s.Acked, local.Seq+1)
	}
}

// A holder that does not answer (its daemon stopped, the host asleep)
// is not a holder without a healthy copy: the fetch says no copy came,
// names the holder, and marks it worth trying again (ErrUnanswered).
func TestHolderNotAnswering(t *testing.T) {
	w := newWorld(t)
	w.answer = 2 * time.Second
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	desktop := w.addHost("desktop", fs.Dir, "", -1)
	laptop := w.addHost("laptop", t.TempDir(), "", -1)
	k, _ := desktop.put(t, "photo.jpg", 1<<20)
	desktop.stopCopier()
	var got bytes.Buffer
	_, err := laptop.fetch(t, k, &got)
	if !errors.Is(err, hubcopy.ErrNoCopy) || !errors.Is(err, hubcopy.ErrUnanswered) || !strings.Contains(err.Error(), "desktop") {
		t.Fatalf("fetch from a holder that does not answer: %v; want no copy, unanswered, naming desktop", err)
	}
}

// TestLyingMetadataIsRefused: a holder writes its bucket's metadata
// itself, and may lie in it. Metadata whose chunks name other objects'
// (a wildcard, several tokens) is refused by the hub; a size that is
// not the key's, or chunks that are not the bytes, by the asker. No
// lie makes a copy the asker accepts.
func TestLyingMetadataIsRefused(t *testing.T) {
	w, desktop, laptop, _, _ := twoHosts(t, -1, false)
	k, data := desktop.put(t, "photo.jpg", 256<<10)
	bucket := hubwire.CopyBucket("desktop", "laptop")
	nc := w.connect(t, "desktop")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Good chunks of the key under another name, whose chunks a
	// wildcard in k's metadata would read.
	putBytes(t, w, "desktop", "laptop", "decoy", data)
	// Chunks the metadata below can name: empty ones, and ones of a byte.
	chunk := func(nuid string, data []byte, n int) {
		for range n {
			if err := nc.Publish("$O."+bucket+".C."+nuid, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	chunk("empty", nil, 3)
	chunk("tiny", []byte{1}, 3)
	for _, lie := range []struct {
		name, nuid string
		size       int
		chunkSize  int
		want       string
	}{
		{"chunks of every object", ">", len(data), 1 << 20, "chunks named"},
		{"chunks under two tokens", "a.b", len(data), 1 << 20, "chunks named"},
		{"a size that is not the key's", "x", len(data) - 1, 1 << 20, "the key says"},
		{"empty chunks", "empty", len(data), 1 << 20, "an empty chunk"},
		{"chunks of a byte", "tiny", len(data), 1, "chunks of 1 bytes"},
		{"chunks smaller than it says", "tiny", len(data), 1 << 20, "a chunk of 1 bytes where the metadata says 1048576"},
	} {
		t.Run(lie.name, func(t *testing.T) {
			meta, _ := json.Marshal(map[string]any{"name": k, "bucket": bucket, "nuid": lie.nuid, "size": lie.size, "chunks": 1,
				"options": map[string]any{"max_chunk_size": lie.chunkSize}})
			msg := &nats.Msg{Subject: "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(k)), Data: meta,
				Header: nats.Header{"Nats-Rollup": []string{"sub"}}}
			if err := nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
			if err := nc.FlushWithContext(ctx); err != nil {
				t.Fatal(err)
			}
			if !stored(t, w, "desktop", "laptop", k) {
				t.Fatal("the lie is not in the bucket")
			}
			// The lie is refused, and the holder asked for a good copy.
			var got bytes.Buffer
			if _, err := laptop.fetch(t, k, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("fetch with a lie in the bucket: %v, %d bytes", err, got.Len())
			}
			if log := w.logs.String(); !strings.Contains(log, "stored copy unusable") || !strings.Contains(log, lie.want) {
				t.Errorf("the lie was not refused as %q:\n%s", lie.want, log)
			}
		})
	}
}

// A read of no object (an empty name) is refused at once: it held a read
// slot of the hub until its minute ran out.
func TestReadOfNoObjectIsRefused(t *testing.T) {
	w, _, _, _, _ := twoHosts(t, -1, false)
	nc := w.connect(t, "laptop")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"", strings.Repeat("k", 2000)} {
		info, err := hubcopy.Stored(ctx, nc, "laptop", "desktop", name)
		if err != nil || !strings.Contains(info.Error, "object name") {
			t.Errorf("a read of %d-byte name: %+v %v; want refused at once", len(name), info, err)
		}
	}
}

// TestAReadOfABucketBehindGoesOn: on a hub cluster a read may be answered
// by a replica of the bucket a moment behind, which has the metadata and
// not yet every chunk. The read is tried again, and goes on after the
// chunks it has.
func TestAReadOfABucketBehindGoesOn(t *testing.T) {
	w, desktop, laptop, _, _ := twoHosts(t, -1, false)
	k, data := desktop.put(t, "photo.jpg", 2<<20+5)
	bucket := hubwire.CopyBucket("desktop", "laptop")
	nc := w.connect(t, "desktop")
	chunk := func(b []byte) {
		if err := nc.Publish("$O."+bucket+".C.behind", b); err != nil {
			t.Error(err)
		}
	}
	chunk(data[:1<<20])
	meta, _ := json.Marshal(map[string]any{"name": k, "bucket": bucket, "nuid": "behind", "size": len(data), "chunks": 3,
		"options": map[string]any{"max_chunk_size": 1 << 20}})
	if err := nc.Publish("$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(k)), meta); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		chunk(data[1<<20 : 2<<20])
		chunk(data[2<<20:])
		_ = nc.Flush()
	}()
	var got bytes.Buffer
	if _, err := laptop.fetch(t, k, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("fetch from a bucket behind: %v, %d bytes of %d", err, got.Len(), len(data))
	}
	if s := laptop.cp.Stats(); s.Resumed == 0 || s.Rejected != 0 {
		t.Errorf("laptop's stats: %+v; want the read tried again, nothing rejected", s)
	}
	if s := desktop.cp.Stats(); s.Served != 0 {
		t.Errorf("desktop was asked for a copy: %+v", s)
	}
}

// A read that nothing answers (a hub node that does not serve yet, so
// the server says no one listens) fails at once, not after a stall: the
// subscription's next message is nats.ErrNoResponders.
func TestAReadNobodyAnswersFailsAtOnce(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = hubcopy.Stored(ctx, nc, "laptop", "desktop", "SHA256-s1--00")
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a read nobody answers: %v after %v; want no responders at once", err, time.Since(start))
	}
}
