package apiserver

import (
	"bufio"
	"encoding/json"
	"net/http"
	"time"

	"github.com/annexd/annexd/api"
)

// stream writes NDJSON items and the end line.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	bw    *bufio.Writer
	buf   []byte
	count int64
	err   error
}

func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	return &stream{w: w, rc: rc, bw: bufio.NewWriterSize(deadlineWriter{w: w, rc: rc}, 64<<10), buf: make([]byte, 0, 1024)}
}

// streamWriteTimeout bounds each write of a stream (a variable for tests).
var streamWriteTimeout = time.Minute

// deadlineWriter gives every write of a stream its own deadline, so a
// client that stops reading frees the handler after streamWriteTimeout
// while a long stream that keeps moving is never cut.
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // unsupported writers: no deadline
	return d.w.Write(p)
}

func (st *stream) item(appendJSON func([]byte) []byte) error {
	if st.err != nil {
		return st.err
	}
	st.buf = append(appendJSON(st.buf[:0]), '\n')
	_, st.err = st.bw.Write(st.buf)
	st.count++
	return st.err
}

func (st *stream) endErr(err error, next string) {
	e := api.StreamEnd{Next: next}
	if err != nil && st.err == nil {
		e.Error, e.Code, e.Next = err.Error(), api.CodeInternal, ""
	}
	st.end(e)
}

func (st *stream) end(e api.StreamEnd) {
	if st.err != nil {
		return
	}
	e.End, e.Count = true, st.count
	b, _ := json.Marshal(e)
	st.bw.Write(append(b, '\n'))
	st.bw.Flush()
	// The connection may serve further requests: no deadline left behind.
	_ = st.rc.SetWriteDeadline(time.Time{})
}
