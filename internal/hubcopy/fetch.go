package hubcopy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	out := &counter{w: w}
	var notes []string
	checked, healthy, unanswered := 0, 0, 0
	for _, h := range content.Holders {
		if h.Host == c.cfg.Name {
			continue
		}
		err := c.fetchFrom(ctx, js, h.Host, want, out)
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
func (c *Copier) fetchFrom(ctx context.Context, js jetstream.JetStream, holder string, want wanted, w *counter) error {
	bucket := hubwire.CopyBucket(holder, c.cfg.Name)
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return fmt.Errorf("hubcopy: bucket from %s: %w", holder, err)
	}
	if _, err := obs.GetInfo(ctx, want.name); err == nil {
		err = c.fetchObject(ctx, js, obs, bucket, want, w)
		if err == nil || w.n > 0 || ctx.Err() != nil {
			return err
		}
		c.log.Info("hubcopy: stored copy unusable; asking the holder", "holder", holder, "key", want.name, "err", err)
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("hubcopy: bucket from %s: %w", holder, err)
	}
	ans, err := c.ask(ctx, holder, want)
	if err != nil {
		return err
	}
	switch ans.Status {
	case hubwire.CopySent:
		return c.fetchObject(ctx, js, obs, bucket, want, w)
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
// is started again from the stored object, skipping what w has.
func (c *Copier) fetchObject(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, bucket string, want wanted, w *counter) error {
	h := want.hash()
	dst := io.MultiWriter(w, h)
	pace := newPacer(c.cfg.Rate)
	start := w.n
	var nuid string
	var last error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			c.resumed.Add(1)
			c.log.Info("hubcopy: reading the copy again", "bucket", bucket, "key", want.name, "have", w.n-start, "err", last)
			if !sleep(ctx, time.Duration(attempt)*200*time.Millisecond) {
				return ctx.Err()
			}
		}
		done, err := c.readObject(ctx, obs, want, &nuid, w.n-start, dst, pace)
		if done {
			last = err
			break
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if last == nil && (w.n-start != want.size || !bytes.Equal(h.Sum(nil), want.digest)) {
		last = fmt.Errorf("%w: %d bytes of %d from %s do not match %s", ErrDigest, w.n-start, want.size, bucket, want.name)
	}
	if last != nil && (errors.Is(last, ErrDigest) || errors.Is(last, jetstream.ErrDigestMismatch)) {
		c.rejected.Add(1)
		if !errors.Is(last, ErrDigest) {
			last = fmt.Errorf("%w: %v", ErrDigest, last)
		}
	}
	if nuid != "" && (last == nil || errors.Is(last, ErrDigest)) {
		if err := purge(ctx, js, bucket, want.name, nuid); err != nil {
			c.log.Warn("hubcopy: delete the fetched copy", "bucket", bucket, "key", want.name, "err", err)
		}
	}
	return last
}

// readObject reads the object once, skipping its first skip bytes, into
// dst. done says whether to stop: the read ended, well or with an error
// that another read would not mend.
func (c *Copier) readObject(ctx context.Context, obs jetstream.ObjectStore, want wanted, nuid *string, skip int64, dst io.Writer, pace *pacer) (done bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := obs.Get(rctx, want.name)
	if err != nil {
		return errors.Is(err, jetstream.ErrObjectNotFound), fmt.Errorf("hubcopy: get %s: %w", want.name, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return false, err
	}
	switch {
	case *nuid == "":
		*nuid = info.NUID
	case info.NUID != *nuid:
		return true, fmt.Errorf("hubcopy: the copy of %s changed in the bucket during the fetch", want.name)
	}
	if int64(info.Size) != want.size {
		return true, fmt.Errorf("%w: the object holds %d bytes, the key says %d", ErrDigest, info.Size, want.size)
	}
	buf := make([]byte, chunkSize) // a chunk in one read
	var progress atomic.Int64
	progress.Store(time.Now().UnixNano())
	stop := c.watch(rctx, cancel, &progress)
	defer stop()
	for {
		n, err := res.Read(buf)
		if n > 0 {
			progress.Store(time.Now().UnixNano())
			b := buf[:n]
			if err := pace.wait(ctx, n); err != nil {
				return true, err
			}
			if skip > 0 {
				k := min(int64(len(b)), skip)
				skip -= k
				b = b[k:]
			}
			if _, werr := dst.Write(b); werr != nil {
				return true, werr
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return true, nil
		case errors.Is(err, jetstream.ErrDigestMismatch):
			return true, err
		case err != nil && ctx.Err() == nil && rctx.Err() != nil:
			return false, fmt.Errorf("hubcopy: no bytes of %s for %v", want.name, c.cfg.Stall)
		case err != nil:
			return false, err
		}
	}
}

// watch cancels a read that makes no progress for Config.Stall: the
// object store's reads wait up to their own timeout, and a broken link
// may leave them waiting for more.
func (c *Copier) watch(ctx context.Context, cancel func(), progress *atomic.Int64) (stop func()) {
	t := time.NewTicker(c.cfg.Stall / 4)
	done := make(chan struct{})
	go func() {
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, progress.Load())) > c.cfg.Stall {
					cancel()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// purge deletes an object: its chunks and its metadata. The asker may
// purge its incoming buckets but not publish into them, so it cannot
// leave the delete marker the object store's Delete writes.
func purge(ctx context.Context, js jetstream.JetStream, bucket, name, nuid string) error {
	st, err := js.Stream(ctx, hubwire.CopyStream(bucket))
	if err != nil {
		return err
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(name)))); err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject("$O."+bucket+".C."+nuid))
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
