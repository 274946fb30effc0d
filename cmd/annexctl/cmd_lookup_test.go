package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

// TestLookupAnswersMatchPaths: a key is printed only for the path it was
// computed for; answers that do not match the paths asked for, one for
// one, are an error and print no key.
func TestLookupAnswersMatchPaths(t *testing.T) {
	k, err := key.Parse("SHA256E-s1--" + strings.Repeat("a", 64) + ".txt")
	if err != nil {
		t.Fatal(err)
	}
	answer := func(p string) string {
		return string(api.LookupResult{Path: []byte(p), State: api.StateCurrent, Key: k}.AppendJSON(nil)) + "\n"
	}
	for _, tc := range []struct {
		name, body string
		code       int
	}{
		{"in order", answer("/r/a") + answer("/r/b") + `{"end":true,"count":2}` + "\n", exitOK},
		{"swapped", answer("/r/b") + answer("/r/a") + `{"end":true,"count":2}` + "\n", exitFailure},
		{"one short", answer("/r/a") + `{"end":true,"count":1}` + "\n", exitFailure},
	} {
		sock := serveLookups(t, tc.body)
		var out, errb bytes.Buffer
		code := run([]string{"--socket", sock, "lookup", "/r/a", "/r/b"}, nil, &out, &errb)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.name, code, tc.code, errb.String())
		}
		if want := strings.Repeat(k.String()+"\n", 2); tc.code == exitOK && out.String() != want {
			t.Errorf("%s: stdout %q, want %q", tc.name, out.String(), want)
		}
		if tc.code != exitOK && out.Len() != 0 {
			t.Errorf("%s: stdout %q, want no keys", tc.name, out.String())
		}
	}
}

// serveLookups answers every batch lookup with body, on a new socket.
func serveLookups(t *testing.T, body string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() { // read the request before answering
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Write([]byte(body))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestNextChunkBounds: --batch requests stay within batchChunk paths and
// about batchChunkBytes, however long the paths, and lose none.
func TestNextChunkBounds(t *testing.T) {
	for _, size := range []int{10, 4000} {
		lines := make(chan []byte, 3*batchChunk)
		for range 3 * batchChunk {
			lines <- bytes.Repeat([]byte("p"), size)
		}
		close(lines)
		total := 0
		for chunk := nextChunk(lines); chunk != nil; chunk = nextChunk(lines) {
			n := 0
			for _, l := range chunk {
				n += len(l)
			}
			if len(chunk) > batchChunk || n > batchChunkBytes+size {
				t.Errorf("paths of %d bytes: a chunk of %d paths, %d bytes", size, len(chunk), n)
			}
			total += len(chunk)
		}
		if total != 3*batchChunk {
			t.Errorf("paths of %d bytes: %d paths in chunks, want %d", size, total, 3*batchChunk)
		}
	}
}
