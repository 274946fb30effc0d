package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// transport is a small HTTP/1.1 client for the one kind of server it talks
// to. annexctl starts for every command, and net/http (with crypto/tls and
// HTTP/2 linked in) would cost it about a millisecond of start-up and a
// dozen thread wake-ups per request; this does one request on the calling
// goroutine, keeping idle connections for the next. BenchmarkClientStart
// and BenchmarkTransport measure it beside net/http (BENCHMARKS.md).
type transport struct {
	dial func(ctx context.Context) (net.Conn, error)

	mu   sync.Mutex
	idle []*tconn
}

// maxIdle bounds the kept connections.
const maxIdle = 4

type tconn struct {
	c  net.Conn
	br *bufio.Reader
}

// response is a server's answer; Body must be closed.
type response struct {
	Status int
	Body   io.ReadCloser
}

// errReused marks a failure on a kept connection before any answer came:
// the server may have closed it while idle, and the request is retried on
// a new one.
var errReused = errors.New("api: kept connection failed")

// roundTrip sends one request and reads the answer's head.
func (t *transport) roundTrip(ctx context.Context, method, target string, hdr []string, body []byte) (*response, error) {
	for attempt := 0; ; attempt++ {
		tc, reused, err := t.get(ctx)
		if err != nil && attempt > 0 {
			// The kept connection was closed and a new one fails too: the
			// daemon went away while we talked to it.
			return nil, &closedError{when: "before it answered", next: err}
		}
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(ctx, tc, method, target, hdr, body, reused)
		if errors.Is(err, errReused) && attempt == 0 {
			continue
		}
		return resp, err
	}
}

func (t *transport) get(ctx context.Context) (*tconn, bool, error) {
	t.mu.Lock()
	if n := len(t.idle); n > 0 {
		tc := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		return tc, true, nil
	}
	t.mu.Unlock()
	c, err := t.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return &tconn{c: c, br: bufio.NewReaderSize(c, 64<<10)}, false, nil
}

func (t *transport) put(tc *tconn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle) >= maxIdle {
		tc.c.Close()
		return
	}
	t.idle = append(t.idle, tc)
}

// closeIdle closes the kept connections.
func (t *transport) closeIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tc := range t.idle {
		tc.c.Close()
	}
	t.idle = nil
}

func (t *transport) exchange(ctx context.Context, tc *tconn, method, target string, hdr []string, body []byte, reused bool) (*response, error) {
	stop := context.AfterFunc(ctx, func() { tc.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*response, error) {
		stop()
		tc.c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	req := make([]byte, 0, 256+len(body))
	req = fmt.Appendf(req, "%s %s HTTP/1.1\r\nHost: annexd\r\nUser-Agent: annexctl\r\n", method, target)
	for _, h := range hdr {
		req = append(append(req, h...), "\r\n"...)
	}
	if body != nil || method == "POST" {
		req = fmt.Appendf(req, "Content-Length: %d\r\n", len(body))
	}
	req = append(append(req, "\r\n"...), body...)
	_, werr := tc.c.Write(req)
	if werr != nil && reused {
		return fail(errReused)
	}
	// Even when the request could not be sent, an answer may wait: a
	// daemon that refuses a connection answers and closes it unread.
	status, length, chunked, keep, err := readHead(tc.br)
	closed := err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err))
	switch {
	case err == nil:
	case werr != nil && isConnReset(werr):
		return fail(&closedError{when: "before it read the request"})
	case werr != nil:
		return fail(fmt.Errorf("api: send request: %w", werr))
	case closed && reused:
		return fail(errReused)
	case closed:
		return fail(&closedError{when: "before it answered"})
	default:
		return fail(fmt.Errorf("%w: %v", ErrBadResponse, err))
	}
	if werr != nil {
		keep = false
	}
	b := &respBody{ctx: ctx, t: t, tc: tc, stop: stop, keep: keep, chunked: chunked, left: length}
	if !chunked && length == 0 {
		b.eof = true
		b.finish(true)
	}
	return &response{Status: status, Body: b}, nil
}

// isConnReset reports whether err came from the connection itself (reset,
// broken pipe, …) rather than from what was read.
func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// readHead reads the status line and the headers it needs.
func readHead(br *bufio.Reader) (status int, length int64, chunked, keep bool, err error) {
	line, err := readLine(br)
	if err != nil {
		return 0, 0, false, false, err
	}
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	if status, err = strconv.Atoi(code); err != nil || !strings.HasPrefix(proto, "HTTP/1.") {
		return 0, 0, false, false, fmt.Errorf("status line %q", line)
	}
	keep = proto == "HTTP/1.1"
	length = -1
	for {
		line, err := readLine(br)
		if err != nil {
			return 0, 0, false, false, err
		}
		if line == "" {
			break
		}
		name, val, _ := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch strings.ToLower(name) {
		case "content-length":
			if length, err = strconv.ParseInt(val, 10, 64); err != nil || length < 0 {
				return 0, 0, false, false, fmt.Errorf("content-length %q", val)
			}
		case "transfer-encoding":
			chunked = strings.EqualFold(val, "chunked")
		case "connection":
			if strings.EqualFold(val, "close") {
				keep = false
			}
		}
	}
	switch {
	case status == 204 || status == 304 || status < 200: // never a body
		length, chunked = 0, false
	case length < 0 && !chunked:
		keep = false // the body runs to the end of the connection
	}
	return status, length, chunked, keep, nil
}

const maxHeadLine = 64 << 10

func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxHeadLine {
		return "", errors.New("header line too long")
	}
	if err != nil {
		return "", err
	}
	return string(bytes.TrimRight(line, "\r\n")), nil
}

// respBody reads a response body (by length, chunked, or to EOF) and gives
// the connection back once the body was read to its end.
type respBody struct {
	ctx     context.Context // the request's; its end fails reads with ctx.Err()
	t       *transport
	tc      *tconn
	stop    func() bool
	keep    bool
	chunked bool
	left    int64 // bytes left of the body or the current chunk; -1: read to EOF, or no chunk yet
	eof     bool
	done    bool
	err     error
}

func (b *respBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.chunked && b.left <= 0 {
		if err := b.nextChunk(); err != nil {
			return 0, b.fail(err)
		}
		if b.eof {
			return 0, io.EOF
		}
	}
	if b.left >= 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.tc.br.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	switch {
	case err == io.EOF && b.left < 0: // body delimited by the connection's end
		b.eof = true
		b.finish(false)
		return n, io.EOF
	case err != nil:
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, b.fail(err)
	case !b.chunked && b.left == 0:
		b.eof = true
		b.finish(true)
	}
	return n, nil
}

// nextChunk reads a chunk header (after the previous chunk's CRLF); size
// zero ends the body and its trailers.
func (b *respBody) nextChunk() error {
	if b.left == 0 { // the CRLF after the previous chunk's data
		line, err := readLine(b.tc.br)
		if err != nil {
			return unexpectedEOF(err)
		}
		if line != "" {
			return fmt.Errorf("%w: bad chunk end", ErrBadResponse)
		}
	}
	line, err := readLine(b.tc.br)
	if err != nil {
		return unexpectedEOF(err)
	}
	size, _, _ := strings.Cut(line, ";")
	n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%w: chunk size %q", ErrBadResponse, line)
	}
	if n > 0 {
		b.left = n
		return nil
	}
	for { // trailers
		line, err := readLine(b.tc.br)
		if err != nil {
			return unexpectedEOF(err)
		}
		if line == "" {
			break
		}
	}
	b.eof = true
	b.finish(true)
	return nil
}

// unexpectedEOF turns io.EOF inside a chunked body into
// io.ErrUnexpectedEOF: a connection that ends between chunks, before the
// last chunk, cut the body short, and a plain io.EOF would pass the
// truncated body off as complete.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (b *respBody) fail(err error) error {
	switch {
	case b.ctx.Err() != nil:
		err = b.ctx.Err() // the deadline its end set on the connection
	case errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err):
		err = &closedError{when: "in the middle of its answer"}
	}
	b.err = err
	if !b.done {
		b.done = true
		b.stop()
		b.tc.c.Close()
	}
	return err
}

// finish releases the connection: kept for reuse when the body was read
// to its end on a keep-alive connection.
func (b *respBody) finish(reuse bool) {
	if b.done {
		return
	}
	b.done = true
	if !b.stop() { // ctx ended meanwhile: the deadline may be set
		b.tc.c.Close()
		return
	}
	if reuse && b.keep {
		b.t.put(b.tc)
		return
	}
	b.tc.c.Close()
}

// Close releases the connection; unread bodies close it.
func (b *respBody) Close() error {
	if !b.done {
		b.done = true
		b.stop()
		b.tc.c.Close()
	}
	return nil
}
