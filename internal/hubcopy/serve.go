package hubcopy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// wanted is a key parsed for a copy: its backend, digest and size.
type wanted struct {
	name    string
	backend key.Backend
	digest  []byte
	size    int64
}

func parseWanted(s string) (wanted, error) {
	k, err := key.Parse(s)
	if err != nil {
		return wanted{}, err
	}
	d, err := k.Digest()
	if err != nil {
		return wanted{}, err
	}
	size, ok := k.Size()
	if !ok {
		return wanted{}, fmt.Errorf("hubcopy: key %s has no size, which a copy is checked against", s)
	}
	if _, chunked := k.ChunkSize(); chunked {
		return wanted{}, fmt.Errorf("hubcopy: key %s names a chunk", s)
	}
	return wanted{name: s, backend: k.Backend(), digest: d, size: size}, nil
}

func (w wanted) hash() hash.Hash {
	h, _ := hasher.Policy{}.NewHash(w.backend)
	return h
}

// serve answers one request: it puts a verified copy in the asker's
// bucket, or says why not.
func (c *Copier) serve(ctx context.Context, nc *nats.Conn, r request) hubwire.CopyAnswer {
	ans := hubwire.CopyAnswer{ID: r.req.ID, Key: r.req.Key}
	w, err := parseWanted(r.req.Key)
	if err == nil && !hasher.Supported(w.backend) {
		err = fmt.Errorf("hubcopy: backend %s", w.backend)
	}
	if err != nil {
		ans.Status, ans.Error = hubwire.CopyFailed, err.Error()
		return ans
	}
	paths, err := c.cfg.Store.ByDigest(w.backend, w.digest)
	if err != nil {
		ans.Status, ans.Error = hubwire.CopyFailed, err.Error()
		return ans
	}
	seen := map[[2]uint64]bool{}
	for _, p := range paths {
		rec, ok, err := c.cfg.Store.Get(p)
		if err != nil || !ok || !rec.Indexed() || rec.Size != w.size || seen[[2]uint64{rec.Dev, rec.Ino}] {
			continue
		}
		seen[[2]uint64{rec.Dev, rec.Ino}] = true
		ans.Checked++
		// Read it once to know it is good before a byte leaves.
		if err := readCopy(ctx, string(p), rec, w.hash(), w.digest, w.size, io.Discard, nil); err != nil {
			c.log.Warn("hubcopy: copy not sent", "path", string(p), "key", w.name, "err", err)
			continue
		}
		ans.Healthy++
		err = c.put(ctx, nc, r.asker, w, string(p), rec)
		if err == nil {
			c.served.Add(1)
			ans.Status = hubwire.CopySent
			return ans
		}
		c.log.Warn("hubcopy: put", "path", string(p), "key", w.name, "asker", r.asker, "err", err)
		if !errors.Is(err, errRot) && !errors.Is(err, errChanged) {
			ans.Status, ans.Error = hubwire.CopyFailed, err.Error()
			return ans
		}
		ans.Healthy--
	}
	c.refused.Add(1)
	ans.Status = hubwire.CopyNone
	return ans
}

var errPutEnded = errors.New("hubcopy: the put ended")

// chunkSize is the object store's chunk of a copy: one read of the disk
// (readSize), a message the hub takes (its max_payload is 8 MiB). The
// object store's default, 128 KiB, costs a message, a stored record and
// an acknowledgement per 128 KiB. A copy across the hub is bound by CPU
// (copies and hashes); 1 MiB chunks cost it about 10% less CPU
// (bench/heal_hub.sh). A var for the benchmark.
var chunkSize uint32 = readSize

// put reads the file at path into the asker's bucket, hashing it again:
// bytes that no longer match fail the put, which then leaves no object.
func (c *Copier) put(ctx context.Context, nc *nats.Conn, asker string, w wanted, path string, rec store.Record) error {
	// Acks bounded in time; the publisher's reply subscription removed
	// once the put ends.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer js.CleanupPublisher()
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := readCopy(ctx, path, rec, w.hash(), w.digest, w.size, pw, newPacer(c.cfg.Rate))
		pw.CloseWithError(err) // nil: EOF
		read <- err
	}()
	meta := jetstream.ObjectMeta{Name: w.name, Description: "from " + c.cfg.Name,
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}}
	err = putObject(ctx, js, nc, hubwire.CopyBucket(c.cfg.Name, asker), meta, pr)
	pr.CloseWithError(errPutEnded)
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errPutEnded) {
		return rerr
	}
	return err
}

// chunksInFlight bounds the chunks of a put published and not yet
// acknowledged.
const chunksInFlight = 8

// putObject writes what r reads into bucket as object meta, in the
// object store's layout: chunks of meta's chunk size, then the metadata,
// which replaces the object's earlier one. A holder may publish into its
// outgoing buckets and purge them, and make no other JetStream call
// (the hub's copyPermissions), so it writes the layout itself. On an
// error it purges the chunks it published: without metadata they are no
// object.
func putObject(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, bucket string, meta jetstream.ObjectMeta, r io.Reader) error {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	nuid := hex.EncodeToString(id)
	chunks := "$O." + bucket + ".C." + nuid
	sum := sha256.New()
	buf := make([]byte, meta.Opts.ChunkSize)
	var size uint64
	var n uint32
	var acks []jetstream.PubAckFuture
	wait := func() error {
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks = acks[:0]
		return nil
	}
	err := func() error {
		for {
			k, err := io.ReadFull(r, buf)
			if k > 0 {
				sum.Write(buf[:k])
				// Copied into the connection's buffer when sent; no retry,
				// which would send buf again after it was reused.
				a, perr := js.PublishAsync(chunks, buf[:k], jetstream.WithRetryAttempts(0))
				if perr != nil {
					return perr
				}
				acks = append(acks, a)
				size += uint64(k)
				n++
				if len(acks) == chunksInFlight {
					if err := wait(); err != nil {
						return err
					}
				}
			}
			switch {
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				return wait()
			case err != nil:
				return err
			}
		}
	}()
	if err == nil {
		info := jetstream.ObjectInfo{ObjectMeta: meta, Bucket: bucket, NUID: nuid, Size: size, ModTime: time.Now().UTC(),
			Chunks: n, Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum.Sum(nil))}
		data, _ := json.Marshal(info)
		msg := &nats.Msg{Subject: "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(meta.Name)), Data: data,
			Header: nats.Header{jetstream.MsgRollup: []string{jetstream.MsgRollupSubject}}}
		_, err = js.PublishMsg(ctx, msg)
	}
	if err != nil && n > 0 {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if perr := purgeSubject(pctx, nc, bucket, chunks); perr != nil {
			return fmt.Errorf("%w (and its chunks stay in the bucket until they expire: %v)", err, perr)
		}
	}
	return err
}
