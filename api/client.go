package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/annexd/annexd/key"
)

// maxStreamLine bounds one line of a stream the client reads (a duplicate
// group with very many files is one line).
const maxStreamLine = 256 << 20

// Client talks to a daemon. It is safe for concurrent use.
type Client struct {
	socket   string // for messages; "" for TCP
	addr     string // TCP address; "" for the socket
	token    string
	tr       *transport
	patience time.Duration // retries while busy or starting; 0: defaultPatience
}

// Dial returns a client for the daemon listening on the unix socket. It
// does not connect yet; the first request does, and fails with a
// *NoDaemonError (errors.Is ErrNoDaemon) when nothing answers.
func Dial(socket string) *Client {
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	return &Client{socket: socket, tr: &transport{dial: dial}}
}

// DialTCP returns a client for a daemon's loopback TCP listener at addr
// ("127.0.0.1:7777"), sending token as the bearer token.
func DialTCP(addr, token string) *Client {
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	return &Client{addr: addr, token: token, tr: &transport{dial: dial}}
}

// Socket returns the socket path the client dials ("" for TCP).
func (c *Client) Socket() string { return c.socket }

// Close releases idle connections.
func (c *Client) Close() { c.tr.closeIdle() }

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) (Ping, error) {
	var p Ping
	err := c.getJSON(ctx, "/v1/ping", nil, &p)
	return p, err
}

// Lookup asks for the key of one absolute path. With wait, the daemon
// waits until the file is indexed instead of answering StatePending.
func (c *Client) Lookup(ctx context.Context, path []byte, wait bool) (LookupResult, error) {
	v := pathQuery(path)
	if wait {
		v.Set("wait", "1")
	}
	resp, err := c.do(ctx, "GET", "/v1/lookup", v, nil)
	if err != nil {
		return LookupResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return LookupResult{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	var r LookupResult
	if err := r.UnmarshalJSON(b); err != nil {
		return LookupResult{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return r, nil
}

// LookupBatch looks up paths in one request and calls fn for each answer,
// in order. Each path must be absolute.
func (c *Client) LookupBatch(ctx context.Context, paths [][]byte, wait bool, fn func(LookupResult) error) error {
	body := make([]byte, 0, 64*len(paths))
	for _, p := range paths {
		body = AppendLookupLine(body, p)
	}
	v := url.Values{}
	if wait {
		v.Set("wait", "1")
	}
	resp, err := c.do(ctx, "POST", "/v1/lookup", v, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readStream(resp.Body, func(line []byte) error {
		var r LookupResult
		if err := r.UnmarshalJSON(line); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(r)
	}, nil)
}

// AppendLookupLine appends one batch request line for path.
func AppendLookupLine(buf, path []byte) []byte {
	buf = append(buf, '{')
	if utf8.Valid(path) {
		buf = append(buf, `"path":`...)
		buf = appendString(buf, path)
	} else {
		buf = append(buf, `"path_b64":"`...)
		buf = base64.StdEncoding.AppendEncode(buf, path)
		buf = append(buf, '"')
	}
	return append(buf, "}\n"...)
}

// WhereisKey lists the indexed locations of k's content.
func (c *Client) WhereisKey(ctx context.Context, k key.Key, fn func(Location) error) error {
	return c.whereis(ctx, url.Values{"key": {k.String()}}, fn)
}

// WhereisDigest lists the indexed locations of the content with digest
// under backend b.
func (c *Client) WhereisDigest(ctx context.Context, b key.Backend, digest []byte, fn func(Location) error) error {
	return c.whereis(ctx, url.Values{"digest": {hex.EncodeToString(digest)}, "backend": {b.String()}}, fn)
}

// WhereisPath lists the indexed locations of the content the file at path
// has now. A path without a current key is an error wrapping ErrNotFound.
func (c *Client) WhereisPath(ctx context.Context, path []byte, wait bool, fn func(Location) error) error {
	v := pathQuery(path)
	if wait {
		v.Set("wait", "1")
	}
	return c.whereis(ctx, v, fn)
}

func (c *Client) whereis(ctx context.Context, v url.Values, fn func(Location) error) error {
	resp, err := c.do(ctx, "GET", "/v1/whereis", v, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readStream(resp.Body, func(line []byte) error {
		var l Location
		if err := l.UnmarshalJSON(line); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(l)
	}, nil)
}

// Dups calls fn for each duplicate group, most duplicate bytes first. When
// q.Limit groups were returned and more may follow, next is the After for
// the next page; otherwise next is nil.
func (c *Client) Dups(ctx context.Context, q DupQuery, fn func(DupGroup) error) (next []byte, err error) {
	v := url.Values{}
	if q.MinSize > 0 {
		v.Set("min_size", strconv.FormatInt(q.MinSize, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != nil {
		v.Set("after", base64.RawURLEncoding.EncodeToString(q.After))
	}
	if q.Outside {
		v.Set("outside", "1")
	}
	if q.Resurvey {
		v.Set("resurvey", "1")
	}
	method, body := "GET", []byte(nil)
	if len(q.Paths) > 0 {
		method, body = "POST", dedupBody(q.Paths) // one path a line, as dedup sends them
	}
	resp, err := c.do(ctx, method, "/v1/dups", v, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var end StreamEnd
	err = readStream(resp.Body, func(line []byte) error {
		var g DupGroup
		if err := g.UnmarshalJSON(line); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(g)
	}, &end)
	if err != nil || end.Next == "" {
		return nil, err
	}
	next, err = base64.RawURLEncoding.DecodeString(end.Next)
	if err != nil {
		return nil, fmt.Errorf("%w: next cursor: %v", ErrBadResponse, err)
	}
	return next, nil
}

// Forget asks the daemon to drop every record at or below the absolute,
// clean directory dir that is outside its roots (with dryRun, only to count
// them). A dir at or below a root is refused with an error wrapping
// ErrUnderRoot.
func (c *Client) Forget(ctx context.Context, dir []byte, dryRun bool) (ForgetResult, error) {
	v := pathQuery(dir)
	if dryRun {
		v.Set("dry_run", "1")
	}
	resp, err := c.do(ctx, "POST", "/v1/forget", v, nil)
	if err != nil {
		return ForgetResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStreamLine))
	if err != nil {
		return ForgetResult{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	var r ForgetResult
	if err := json.Unmarshal(b, &r); err != nil {
		return ForgetResult{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return r, nil
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.getJSON(ctx, "/v1/status", nil, &st)
	return st, err
}

// WaitIdle asks the daemon to answer when it is idle or after timeout
// (one long poll; the server caps it at 5 minutes). The returned status
// says whether it is idle; call again to keep waiting.
func (c *Client) WaitIdle(ctx context.Context, timeout time.Duration) (Status, error) {
	var st Status
	v := url.Values{"wait": {"idle"}, "timeout": {timeout.String()}}
	err := c.getJSON(ctx, "/v1/status", v, &st)
	return st, err
}

// Metrics returns the Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, "GET", "/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func pathQuery(path []byte) url.Values {
	if utf8.Valid(path) {
		return url.Values{"path": {string(path)}}
	}
	return url.Values{"path_b64": {base64.StdEncoding.EncodeToString(path)}}
}

func (c *Client) getJSON(ctx context.Context, p string, v url.Values, out any) error {
	return c.doJSON(ctx, "GET", p, v, nil, out)
}

// doJSON sends a request and decodes its JSON answer into out.
func (c *Client) doJSON(ctx context.Context, method, p string, v url.Values, body []byte, out any) error {
	resp, err := c.do(ctx, method, p, v, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStreamLine))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return nil
}

// Retries of a daemon that is busy or still starting: the first pause,
// the longest, and how long the client tries in all by default.
const (
	retryFirst      = 10 * time.Millisecond
	retryMax        = 500 * time.Millisecond
	defaultPatience = 15 * time.Second
)

// SetPatience sets how long requests are retried while the daemon is busy
// or still starting (default 15 s); the request's context bounds it too.
func (c *Client) SetPatience(d time.Duration) { c.patience = d }

// do sends one request; a non-2xx answer becomes a *StatusError. While
// the daemon is busy or starting, the request was not served, so it is
// sent again with backoff for up to the client's patience. extra are
// more header lines.
func (c *Client) do(ctx context.Context, method, p string, v url.Values, body []byte, extra ...string) (*response, error) {
	target := p
	if len(v) > 0 {
		target += "?" + v.Encode()
	}
	var hdr []string
	if body != nil {
		hdr = append(hdr, "Content-Type: application/x-ndjson")
	}
	if c.token != "" {
		hdr = append(hdr, "Authorization: Bearer "+c.token)
	}
	hdr = append(hdr, extra...)
	patience := c.patience
	if patience == 0 {
		patience = defaultPatience
	}
	start, pause := time.Now(), retryFirst
	var refused error // the last busy or starting answer
	for {
		resp, err := c.send(ctx, method, target, hdr, body)
		if refused != nil && err != nil && ctxDone(ctx) != nil {
			return nil, c.gaveUp(refused, time.Since(start)) // ran out while retrying: say why
		}
		if !errors.Is(err, ErrBusy) && !errors.Is(err, ErrStarting) {
			return resp, err
		}
		refused = err
		if time.Since(start)+pause > patience {
			return nil, c.gaveUp(err, time.Since(start))
		}
		t := time.NewTimer(pause + rand.N(pause/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.gaveUp(err, time.Since(start))
		case <-t.C:
		}
		pause = min(2*pause, retryMax)
	}
}

// gaveUp is the error of a request that found the daemon busy or
// starting until the client stopped trying.
func (c *Client) gaveUp(err error, waited time.Duration) error {
	if errors.Is(err, ErrStarting) {
		return err
	}
	var be *BusyError
	if errors.As(err, &be) {
		err = be.Err
	}
	return &BusyError{Socket: c.where(), Waited: waited, Err: err}
}

func (c *Client) where() string {
	if c.socket != "" {
		return c.socket
	}
	return c.addr
}

// send sends one request.
func (c *Client) send(ctx context.Context, method, target string, hdr []string, body []byte) (*response, error) {
	resp, err := c.tr.roundTrip(ctx, method, target, hdr, body)
	if err != nil {
		if err := ctxDone(ctx); err != nil {
			return nil, err // the caller gave up, whatever the daemon does
		}
		return nil, c.dialError(err)
	}
	if resp.Status/100 != 2 {
		defer resp.Body.Close()
		return nil, readStatusError(resp)
	}
	return resp, nil
}

// ctxDone is ctx.Err(), also in the instant after the deadline passed
// and before ctx says so: a dial cut by that deadline fails with a
// timeout of its own first.
func ctxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// dialError turns "nothing listens" into a *NoDaemonError, and a full
// listen queue (EAGAIN at connect) into a *BusyError.
func (c *Client) dialError(err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case errors.As(err, &op) && op.Op == "dial" && errors.Is(op.Err, syscall.EAGAIN):
		return &BusyError{Socket: c.where(), Err: errors.New("its connection queue is full")}
	case errors.As(err, &op) && op.Op == "dial":
		return &NoDaemonError{Socket: c.where(), Err: unwrapSyscall(op.Err)}
	}
	if errors.Is(err, ErrBadResponse) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("api: %w", err)
}

func unwrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func readStatusError(resp *response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb.Error = "HTTP status " + strconv.Itoa(resp.Status)
	}
	return &StatusError{Status: resp.Status, Code: eb.Code, Message: eb.Error}
}

// readStream calls fn for each item line and checks the end line, which it
// stores in end when end is not nil: a stream without it, or whose count
// differs from the items read, is an ErrBadResponse.
func readStream(r io.Reader, fn func([]byte) error, end *StreamEnd) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	var n int64
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, EndPrefix) {
			var e StreamEnd
			if err := json.Unmarshal(line, &e); err != nil {
				return fmt.Errorf("%w: end line: %v", ErrBadResponse, err)
			}
			if end != nil {
				*end = e
			}
			if e.Error != "" {
				return &StatusError{Status: 500, Code: e.Code, Message: e.Error}
			}
			if !e.End || e.Count != n {
				return fmt.Errorf("%w: end line counts %d items, %d arrived", ErrBadResponse, e.Count, n)
			}
			// The server is done; read the body's end so that the
			// connection can serve the next request.
			io.Copy(io.Discard, io.LimitReader(r, 4096))
			return nil
		}
		n++
		if err := fn(line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadResponse, err) // ctx.Err() when the caller gave up
	}
	return fmt.Errorf("%w: stream ended without its end line", ErrBadResponse)
}
