package hubcopy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/hubwire"
)

// maxAttempts bounds the reads of one object after broken links.
const maxAttempts = 5

// Fetch writes a verified copy of key's content to w, a temporary file
// the caller owns, and returns the host it came from. It returns nil
// only once the bytes written match the key's digest and size. ErrNoCopy
// when no other host holds a verified copy, with ErrUnanswered when a
// holder could not be asked; ErrDigest when a copy came
// and failed its check (w then holds bytes to throw away).
func (c *Copier) Fetch(ctx context.Context, keyName string, w io.Writer) (string, error) {
	want, err := parseWanted(keyName)
	if err != nil {
		return "", err
	}
	if !hasher.Supported(want.backend) {
		return "", fmt.Errorf("hubcopy: backend %s", want.backend)
	}
	nc, err := c.conn()
	if err != nil {
		return "", err
	}
	content, err := c.cfg.Index.Whereis(ctx, want.backend.Base().String(), hex.EncodeToString(want.digest), want.size)
	if err != nil {
		return "", fmt.Errorf("hubcopy: whereis %s: %w", keyName, err)
	}
	out := &counter{w: w}
	var notes []string
	checked, healthy, unanswered := 0, 0, 0
	for _, h := range content.Holders {
		if h.Host == c.cfg.Name {
			continue
		}
		err := c.fetchFrom(ctx, nc, h.Host, want, out)
		var none *noneError
		switch {
		case err == nil:
			c.fetched.Add(1)
			return h.Host, nil
		case errors.As(err, &none):
			checked += none.checked
			healthy += none.healthy
			notes = append(notes, fmt.Sprintf("%s: %d of %d healthy", h.Host, none.healthy, none.checked))
		case out.n > 0 || errors.Is(err, ErrDigest) || ctx.Err() != nil:
			return "", err // w holds bytes of a copy that cannot be used
		default:
			unanswered++
			notes = append(notes, fmt.Sprintf("%s: %v", h.Host, err))
		}
	}
	if len(notes) == 0 {
		return "", fmt.Errorf("%w of %s: no other host holds it", ErrNoCopy, keyName)
	}
	err = fmt.Errorf("%w of %s: %d of %d copies healthy (%s)", ErrNoCopy, keyName, healthy, checked, strings.Join(notes, "; "))
	if unanswered > 0 {
		err = fmt.Errorf("%w (%w)", err, ErrUnanswered)
	}
	return "", err
}

// noneError: a holder has no verified copy.
type noneError struct{ checked, healthy int }

func (e *noneError) Error() string {
	return fmt.Sprintf("no verified copy: %d of %d copies healthy", e.healthy, e.checked)
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// fetchFrom fetches want from holder: the copy already in the bucket
// from an earlier request, else one the holder puts there now.
func (c *Copier) fetchFrom(ctx context.Context, nc *nats.Conn, holder string, want wanted, w *counter) error {
	bucket := hubwire.CopyBucket(holder, c.cfg.Name)
	info, err := c.objectInfo(ctx, nc, holder, want)
	if err != nil {
		return fmt.Errorf("hubcopy: bucket from %s: %w", holder, err)
	}
	switch {
	case info.Error != "":
		// The holder's put replaces it.
		c.log.Info("hubcopy: stored copy unusable; asking the holder", "holder", holder, "key", want.name, "err", info.Error)
	case info.Found:
		err = c.fetchObject(ctx, nc, holder, bucket, want, w)
		if err == nil || w.n > 0 || ctx.Err() != nil {
			return err
		}
		c.log.Info("hubcopy: stored copy unusable; asking the holder", "holder", holder, "key", want.name, "err", err)
	}
	ans, err := c.ask(ctx, holder, want)
	if err != nil {
		return err
	}
	switch ans.Status {
	case hubwire.CopySent:
		return c.fetchObject(ctx, nc, holder, bucket, want, w)
	case hubwire.CopyNone:
		return &noneError{checked: ans.Checked, healthy: ans.Healthy}
	case hubwire.CopyBusy:
		return fmt.Errorf("hubcopy: %s is busy", holder)
	}
	return fmt.Errorf("hubcopy: %s could not send it: %s", holder, ans.Error)
}

// ask asks holder to put want in its bucket and waits for the answer.
func (c *Copier) ask(ctx context.Context, holder string, want wanted) (hubwire.CopyAnswer, error) {
	nc, err := c.conn()
	if err != nil {
		return hubwire.CopyAnswer{}, err
	}
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	req := hubwire.CopyRequest{ID: hex.EncodeToString(id), Key: want.name}
	ch := make(chan hubwire.CopyAnswer, 1)
	slot := holder + "\x00" + req.ID
	c.mu.Lock()
	c.waiting[slot] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, slot)
		c.mu.Unlock()
	}()
	data, _ := jsonMarshal(req)
	if err := nc.Publish(hubwire.CopyAskSubject(c.cfg.Name, holder), data); err != nil {
		return hubwire.CopyAnswer{}, fmt.Errorf("hubcopy: ask %s: %w", holder, err)
	}
	// The holder reads its copy twice, the second time at Rate.
	wait := c.cfg.Answer
	if c.cfg.Rate > 0 {
		wait += time.Duration(float64(want.size) / float64(c.cfg.Rate) * float64(time.Second))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case ans := <-ch:
			if ans.Key != want.name {
				continue
			}
			return ans, nil
		case <-t.C:
			return hubwire.CopyAnswer{}, fmt.Errorf("hubcopy: %s did not answer within %v", holder, wait)
		case <-ctx.Done():
			return hubwire.CopyAnswer{}, ctx.Err()
		}
	}
}

// fetchObject reads the object want from the bucket into w and checks
// it; it deletes the object once read, good or not. A read that breaks
// is started again after the last chunk w has.
func (c *Copier) fetchObject(ctx context.Context, nc *nats.Conn, holder, bucket string, want wanted, w *counter) error {
	h := want.hash()
	dst := io.MultiWriter(w, h)
	pace := newPacer(c.cfg.Rate)
	start := w.n
	r := objectRead{holder: holder, want: want}
	var last error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			c.resumed.Add(1)
			c.log.Info("hubcopy: reading the copy again", "bucket", bucket, "key", want.name, "have", w.n-start, "err", last)
			if !sleep(ctx, time.Duration(attempt)*200*time.Millisecond) {
				return ctx.Err()
			}
		}
		done, err := c.readObject(ctx, nc, &r, dst, pace)
		last = err
		if done {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if last != nil && w.n > start && errors.Is(last, errNotYet) {
		last = fmt.Errorf("%w: %v", ErrDigest, last) // short for every try
	}
	if last == nil && (w.n-start != want.size || !bytes.Equal(h.Sum(nil), want.digest)) {
		last = fmt.Errorf("%w: %d bytes of %d from %s do not match %s", ErrDigest, w.n-start, want.size, bucket, want.name)
	}
	if errors.Is(last, ErrDigest) {
		c.rejected.Add(1)
	}
	if r.nuid != "" && (last == nil || errors.Is(last, ErrDigest)) {
		if err := purge(ctx, nc, bucket, want.name, r.nuid); err != nil {
			c.log.Warn("hubcopy: delete the fetched copy", "bucket", bucket, "key", want.name, "err", err)
		}
	}
	return last
}

// objectRead is a read of one object through the hub, across windows
// and broken links: the chunks are its, and after is the stream
// sequence of the last one written.
type objectRead struct {
	holder    string
	want      wanted
	nuid      string
	chunkSize int64 // of every chunk but the last
	after     uint64
	read      int64 // bytes written
}

// objectInfo asks the hub whether the asker's bucket from holder has
// want, and what it is; the info's Error says why the hub cannot read
// what is there.
func (c *Copier) objectInfo(ctx context.Context, nc *nats.Conn, holder string, want wanted) (hubwire.CopyReadInfo, error) {
	r := objectRead{holder: holder, want: want}
	var info hubwire.CopyReadInfo
	err := c.window(ctx, nc, &r, 0, func(part string, m *nats.Msg) error {
		if part == "info" {
			return json.Unmarshal(m.Data, &info)
		}
		return nil
	})
	return info, err
}

// readObject reads the rest of r's object into dst, a window of chunks at
// a time. done says whether to stop: the read ended, well or with an
// error that another read would not mend.
func (c *Copier) readObject(ctx context.Context, nc *nats.Conn, r *objectRead, dst io.Writer, pace *pacer) (done bool, err error) {
	for r.read < r.want.size || r.nuid == "" {
		var eof bool
		var fatal error
		err := c.window(ctx, nc, r, hubwire.CopyReadWindow, func(part string, m *nats.Msg) error {
			switch part {
			case "info":
				fatal = r.checkInfo(m.Data)
				return fatal
			case "chunk":
				seq, err := strconv.ParseUint(m.Header.Get(hubwire.CopyReadSeq), 10, 64)
				if err != nil || seq <= r.after {
					fatal = fmt.Errorf("hubcopy: a chunk of %s out of order", r.want.name)
					return fatal
				}
				if n := int64(len(m.Data)); n != r.chunkSize && r.read+n != r.want.size {
					fatal = fmt.Errorf("%w: a chunk of %d bytes where the metadata says %d", ErrDigest, n, r.chunkSize)
					return fatal
				}
				if err := pace.wait(ctx, len(m.Data)); err != nil {
					fatal = err
					return err
				}
				if r.read+int64(len(m.Data)) > r.want.size {
					fatal = fmt.Errorf("%w: the object holds more than the %d bytes of its key", ErrDigest, r.want.size)
					return fatal
				}
				if _, err := dst.Write(m.Data); err != nil {
					fatal = err
					return err
				}
				r.read += int64(len(m.Data))
				r.after = seq
			case "end":
				eof = string(m.Data) == "eof"
			}
			return nil
		})
		switch {
		case fatal != nil && errors.Is(fatal, errNotYet):
			return false, fatal
		case fatal != nil:
			return true, fatal
		case err != nil:
			return false, err
		case eof && r.read < r.want.size:
			return false, fmt.Errorf("%w: the object ended after %d bytes of %d", errNotYet, r.read, r.want.size)
		}
	}
	return true, nil
}

// errNotYet: the object, or its end, was not in the bucket. On a hub
// cluster a read may be answered by a replica of the bucket that is a
// moment behind, so the read is tried again; an object still short after
// the last try is no copy (ErrDigest).
var errNotYet = errors.New("hubcopy: not in the bucket (yet)")

// checkInfo checks the object's info in an answer: the object the read
// began with, of the key's size.
func (r *objectRead) checkInfo(data []byte) error {
	var info hubwire.CopyReadInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return fmt.Errorf("hubcopy: the hub's answer: %w", err)
	}
	switch {
	case info.Error != "":
		return fmt.Errorf("hubcopy: read %s: %s", r.want.name, info.Error)
	case !info.Found:
		return fmt.Errorf("%w: %s", errNotYet, r.want.name)
	case r.nuid != "" && info.NUID != r.nuid:
		return fmt.Errorf("hubcopy: the copy of %s changed in the bucket during the fetch", r.want.name)
	case info.Size != r.want.size:
		return fmt.Errorf("%w: the object holds %d bytes, the key says %d", ErrDigest, info.Size, r.want.size)
	case info.ChunkSize < minChunk && info.Size > info.ChunkSize:
		// The read's work is bound by the chunks' size.
		return fmt.Errorf("%w: chunks of %d bytes", ErrDigest, info.ChunkSize)
	}
	r.nuid, r.chunkSize = info.NUID, info.ChunkSize
	return nil
}

// minChunk is the least chunk size the asker reads: the object store's
// default is 128 KiB, hubcopy's 1 MiB.
const minChunk = 64 << 10

// window asks the hub for up to chunks chunks of r's object after
// r.after, and hands each part of the answer to part, in order, until
// the end or an error part returns. A hub busy with other copies is
// asked again a moment later, for Config.Stall at most.
func (c *Copier) window(ctx context.Context, nc *nats.Conn, r *objectRead, chunks int, part func(string, *nats.Msg) error) error {
	wait := 100 * time.Millisecond
	deadline := time.Now().Add(c.cfg.Stall)
	for {
		busy, err := c.windowOnce(ctx, nc, r, chunks, part)
		switch {
		case err != nil || !busy:
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("hubcopy: the hub stayed busy with other copies for %v", c.cfg.Stall)
		case !sleep(ctx, wait):
			return ctx.Err()
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// windowOnce is one request of window; busy says the hub answered only
// that it is busy. It fails when a part does not come within
// Config.Stall.
func (c *Copier) windowOnce(ctx context.Context, nc *nats.Conn, r *objectRead, chunks int, part func(string, *nats.Msg) error) (busy bool, err error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := hubwire.CopyReadRequest{Holder: r.holder, Name: r.want.name, NUID: r.nuid, After: r.after, Chunks: chunks}
	data, _ := json.Marshal(req)
	if err := nc.PublishRequest(hubwire.QuerySubject(c.cfg.Name, hubwire.QueryCopyRead), inbox, data); err != nil {
		return false, err
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, c.cfg.Stall)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return false, fmt.Errorf("hubcopy: no bytes of %s for %v", r.want.name, c.cfg.Stall)
			}
			return false, err
		}
		p := m.Header.Get(hubwire.CopyReadPart)
		if p == "info" && isBusy(m.Data) {
			busy = true
		}
		if !busy {
			if err := part(p, m); err != nil {
				return false, err
			}
		}
		if p == "end" {
			if how := string(m.Data); strings.HasPrefix(how, "error: ") {
				return false, errors.New("hubcopy: the hub: " + strings.TrimPrefix(how, "error: "))
			}
			return busy, nil
		}
	}
}

func isBusy(data []byte) bool {
	var info hubwire.CopyReadInfo
	return json.Unmarshal(data, &info) == nil && info.Busy
}

// purge deletes an object: its chunks and its metadata. The asker may
// purge its incoming buckets but not publish into them, so it cannot
// leave the delete marker the object store's Delete writes.
func purge(ctx context.Context, nc *nats.Conn, bucket, name, nuid string) error {
	if err := purgeSubject(ctx, nc, bucket, "$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(name))); err != nil {
		return err
	}
	return purgeSubject(ctx, nc, bucket, "$O."+bucket+".C."+nuid)
}

// purgeSubject purges subject from bucket's stream: a call whose answer
// is a few dozen bytes, which a host may make.
func purgeSubject(ctx context.Context, nc *nats.Conn, bucket, subject string) error {
	req, _ := json.Marshal(map[string]string{"filter": subject})
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+hubwire.CopyStream(bucket), req)
	if err != nil {
		return err
	}
	var res struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &res); err != nil {
		return err
	}
	if res.Error != nil {
		return errors.New(res.Error.Description)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Holders returns the other hosts the hub lists as holding key, in the
// order Fetch asks them. It reads nothing of theirs: their copies are
// read and checked only by a Fetch.
func (c *Copier) Holders(ctx context.Context, keyName string) ([]string, error) {
	want, err := parseWanted(keyName)
	if err != nil {
		return nil, err
	}
	if _, err := c.conn(); err != nil {
		return nil, err
	}
	content, err := c.cfg.Index.Whereis(ctx, want.backend.Base().String(), hex.EncodeToString(want.digest), want.size)
	if err != nil {
		return nil, fmt.Errorf("hubcopy: whereis %s: %w", keyName, err)
	}
	var hosts []string
	for _, h := range content.Holders {
		if h.Host != c.cfg.Name {
			hosts = append(hosts, h.Host)
		}
	}
	return hosts, nil
}
