package hubcopy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"

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
// bytes that no longer match fail the Put, which then publishes no object.
func (c *Copier) put(ctx context.Context, nc *nats.Conn, asker string, w wanted, path string, rec store.Record) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	obs, err := js.ObjectStore(ctx, hubwire.CopyBucket(c.cfg.Name, asker))
	if err != nil {
		return fmt.Errorf("hubcopy: bucket to %s: %w", asker, err)
	}
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := readCopy(ctx, path, rec, w.hash(), w.digest, w.size, pw, newPacer(c.cfg.Rate))
		pw.CloseWithError(err) // nil: EOF
		read <- err
	}()
	meta := jetstream.ObjectMeta{Name: w.name, Description: "from " + c.cfg.Name,
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}}
	_, err = obs.Put(ctx, meta, pr)
	pr.CloseWithError(errPutEnded)
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errPutEnded) {
		return rerr
	}
	return err
}
