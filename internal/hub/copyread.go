package hub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubwire"
)

// A host reads the copies in its incoming buckets through the hub
// (hubwire.QueryCopyRead), which answers only into the host's own inbox:
// the hub reads the object's metadata and chunks with its own
// connection and sends them on. A host may make no JetStream call whose
// answer goes where it says (copybuckets.go, copyPermissions). A request
// asks for a window of chunks (hubwire.CopyReadWindow at most), and the
// asker asks for the next once it has them: the hub keeps no state of a
// read between requests, so any node of a cluster answers any of them.

// A node reads copyReadsAtOnce windows at once, copyReadsPerHost of
// them for one asker; a request beyond either is answered busy, and the
// asker asks again a moment later. So no host's requests hold every
// read back.
const (
	copyReadsAtOnce  = 8
	copyReadsPerHost = 2
)

// Time bounds: the reading of one window, and each JetStream call in it.
const (
	copyReadTimeout = time.Minute
	copyCallTimeout = 10 * time.Second
)

// maxObjectName bounds an object's name: a key.
const maxObjectName = 1024

// copyReader serves the copy reads of one node.
type copyReader struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	known map[string]bool

	mu      sync.Mutex
	reading map[string]int // windows being read, by asker
	total   int
	streams map[string]jetstream.Stream
}

func newCopyReader(nc *nats.Conn, js jetstream.JetStream, known map[string]bool) *copyReader {
	return &copyReader{nc: nc, js: js, known: known, reading: map[string]int{}, streams: map[string]jetstream.Stream{}}
}

// serve answers the read request m of asker, whose reply subject is in
// the asker's inbox (Hub.asked), on a goroutine of its own.
func (r *copyReader) serve(ctx context.Context, asker string, m *nats.Msg) {
	var req hubwire.CopyReadRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		r.fail(m.Reply, fmt.Errorf("%w: %v", ErrQuery, err))
		return
	}
	if req.Name == "" || len(req.Name) > maxObjectName {
		r.fail(m.Reply, fmt.Errorf("%w: an object name of %d bytes", ErrQuery, len(req.Name)))
		return
	}
	if !r.take(asker) {
		_ = r.send(m.Reply, "info", nil, mustJSON(hubwire.CopyReadInfo{Busy: true}))
		r.end(m.Reply, "eof")
		return
	}
	go func() {
		defer r.release(asker)
		ctx, cancel := context.WithTimeout(ctx, copyReadTimeout)
		defer cancel()
		if err := r.read(ctx, asker, req, m.Reply); err != nil {
			r.end(m.Reply, "error: "+err.Error())
		}
	}()
}

// take takes a read slot for asker, if one is free.
func (r *copyReader) take(asker string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total >= copyReadsAtOnce || r.reading[asker] >= copyReadsPerHost {
		return false
	}
	r.total++
	r.reading[asker]++
	return true
}

func (r *copyReader) release(asker string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total--
	if r.reading[asker]--; r.reading[asker] == 0 {
		delete(r.reading, asker)
	}
}

// read sends the object's info, then up to req.Chunks of its chunks after
// req.After, then the end.
func (r *copyReader) read(ctx context.Context, asker string, req hubwire.CopyReadRequest, reply string) error {
	if req.Holder == asker || !r.known[req.Holder] {
		r.fail(reply, fmt.Errorf("%w: no copies come from %q", ErrQuery, req.Holder))
		return nil
	}
	bucket := hubwire.CopyBucket(req.Holder, asker)
	st, err := r.stream(ctx, hubwire.CopyStream(bucket))
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, copyCallTimeout)
	info, err := objectInfo(cctx, st, bucket, req.Name)
	cancel()
	if err != nil {
		return err
	}
	if err := r.send(reply, "info", nil, mustJSON(info)); err != nil {
		return err
	}
	if !info.Found || (req.NUID != "" && req.NUID != info.NUID) {
		r.end(reply, "eof")
		return nil
	}
	subject := "$O." + bucket + ".C." + info.NUID
	seq := req.After + 1
	for range min(max(req.Chunks, 0), hubwire.CopyReadWindow) {
		cctx, cancel := context.WithTimeout(ctx, copyCallTimeout)
		m, err := st.GetMsg(cctx, seq, jetstream.WithGetMsgSubject(subject))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			r.end(reply, "eof")
			return nil
		}
		if err != nil {
			return err
		}
		if len(m.Data) == 0 {
			// The holder wrote it: no chunk is empty.
			return fmt.Errorf("an empty chunk at %d", m.Sequence)
		}
		h := nats.Header{hubwire.CopyReadSeq: []string{strconv.FormatUint(m.Sequence, 10)}}
		if err := r.send(reply, "chunk", h, m.Data); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	r.end(reply, "more")
	return nil
}

// objectInfo reads the metadata of object name in bucket.
func objectInfo(ctx context.Context, st jetstream.Stream, bucket, name string) (hubwire.CopyReadInfo, error) {
	m, err := st.GetLastMsgForSubject(ctx, "$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(name)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return hubwire.CopyReadInfo{}, nil
	}
	if err != nil {
		return hubwire.CopyReadInfo{}, err
	}
	var oi jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &oi); err != nil {
		return hubwire.CopyReadInfo{Error: "metadata: " + err.Error()}, nil
	}
	if oi.Deleted || oi.NUID == "" {
		return hubwire.CopyReadInfo{}, nil
	}
	if strings.ContainsAny(oi.NUID, ".*> \t\r\n") {
		// The holder wrote it: a subject token, or chunks of other objects
		// would be read for this one.
		return hubwire.CopyReadInfo{Error: fmt.Sprintf("metadata: chunks named %q", oi.NUID)}, nil
	}
	info := hubwire.CopyReadInfo{Found: true, NUID: oi.NUID, Size: int64(oi.Size), Chunks: int(oi.Chunks)}
	if oi.Opts != nil {
		info.ChunkSize = int64(oi.Opts.ChunkSize)
	}
	return info, nil
}

// stream returns the stream name, looked up once.
func (r *copyReader) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	r.mu.Lock()
	st, ok := r.streams[name]
	r.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := r.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.streams[name] = st
	r.mu.Unlock()
	return st, nil
}

// send publishes one part of an answer.
func (r *copyReader) send(reply, part string, h nats.Header, data []byte) error {
	if h == nil {
		h = nats.Header{}
	}
	h.Set(hubwire.CopyReadPart, part)
	return r.nc.PublishMsg(&nats.Msg{Subject: reply, Header: h, Data: data})
}

// fail answers with an info that says why, and the end.
func (r *copyReader) fail(reply string, err error) {
	_ = r.send(reply, "info", nil, mustJSON(hubwire.CopyReadInfo{Error: err.Error()}))
	r.end(reply, "eof")
}

func (r *copyReader) end(reply, how string) { _ = r.send(reply, "end", nil, []byte(how)) }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
