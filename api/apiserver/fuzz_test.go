package apiserver

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzBatchBody: any request body gets 200 with exactly one answer per
// non-blank line and the end line, or a 4xx; never a panic or a 5xx.
func FuzzBatchBody(f *testing.F) {
	root := f.TempDir()
	idx := newStoreIndex(f, root)
	srv, err := NewServer(Config{Parts: Parts{Index: idx}, Socket: "/nonexistent/fuzz.sock"})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.endpoints()
	f.Add([]byte(`{"path":"`+root+`/x"}`+"\n"+`{"path_b64":"/w=="}`), "")
	f.Add([]byte("\n\n\r\n{}\n"), "wait=1")
	f.Add([]byte(`{"path":"/etc"}`), "wait=2")
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/lookup", bytes.NewReader(body))
		req.URL.RawQuery = query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if rec.Code != 200 {
			return
		}
		want := 0
		for _, l := range strings.Split(string(body), "\n") {
			if strings.TrimSpace(strings.TrimSuffix(l, "\r")) != "" {
				want++
			}
		}
		lines := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n")
		if len(lines) != want+1 || !strings.HasPrefix(lines[want], `{"end":true`) {
			t.Fatalf("%d non-blank lines, answer %q", want, rec.Body)
		}
	})
}

// FuzzQuery: arbitrary query strings on the GET endpoints never panic or
// produce a 5xx.
func FuzzQuery(f *testing.F) {
	root := f.TempDir()
	idx := newStoreIndex(f, root)
	srv, err := NewServer(Config{Parts: Parts{Index: idx}, Socket: "/nonexistent/fuzz.sock"})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.endpoints()
	f.Add("/v1/lookup", "path="+root+"/a")
	f.Add("/v1/whereis", "key=SHA256E-s1--"+strings.Repeat("0", 64))
	f.Add("/v1/dups", "min_size=10&limit=2&after=AAAA")
	f.Add("/v1/status", "wait=idle&timeout=1ms")
	f.Fuzz(func(t *testing.T, path, query string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\x00\r\n") {
			return
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path, req.URL.RawQuery = path, query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("GET %s?%s: %d %s", path, query, rec.Code, rec.Body)
		}
	})
}
