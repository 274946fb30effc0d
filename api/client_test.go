package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/annexd/annexd/key"
)

// TestClientStreamEnds: a whereis stream is accepted only when it ends
// with its end line and that line counts the items that arrived; every
// other ending is an error, never a shorter list passed off as complete.
func TestClientStreamEnds(t *testing.T) {
	const item = `{"path":"/r/a","size":1}` + "\n"
	bodies := map[string]string{
		"/whole":    item + item + `{"end":true,"count":2}` + "\n",
		"/no-end":   item + item,
		"/cut-line": item + `{"path":"/r/`,
		"/cut-end":  item + `{"end":true,"cou`,
		"/miscount": item + `{"end":true,"count":2}` + "\n",
		"/failed":   item + `{"end":true,"count":1,"error":"store: closed","code":"internal"}` + "\n",
	}
	sock, _ := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		body := bodies[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		// Half, flush (chunked encoding), the rest: both framings of a body
		// cut at the same place.
		io.WriteString(w, body[:len(body)/2])
		w.(http.Flusher).Flush()
		io.WriteString(w, body[len(body)/2:])
	}))
	k, err := key.Parse("SHA256E-s1--" + strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	for name := range bodies {
		c := Dial(sock)
		c.token = name // names the case to the server
		var got int
		err := c.WhereisKey(context.Background(), k, func(Location) error { got++; return nil })
		c.Close()
		switch {
		case name == "/whole":
			if err != nil || got != 2 {
				t.Errorf("%s: %d items, %v; want 2 and no error", name, got, err)
			}
		case name == "/failed":
			if !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), "store: closed") {
				t.Errorf("%s: %v; want the daemon's error", name, err)
			}
		default:
			if !errors.Is(err, ErrBadResponse) {
				t.Errorf("%s: %d items, %v; want ErrBadResponse", name, got, err)
			}
		}
	}
}

// TestClientGivesUpMidStream: a context that ends while a stream is being
// read ends the read with the context's error, so callers can tell "gave
// up" from "the daemon's answer was bad".
func TestClientGivesUpMidStream(t *testing.T) {
	sock, _ := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"path":"/r/a","size":1}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	}))
	c := Dial(sock)
	defer c.Close()
	k, err := key.Parse("SHA256E-s1--" + strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	// The caller gives up once the first item is in, however long that took.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got int
	err = c.WhereisKey(ctx, k, func(Location) error { got++; cancel(); return nil })
	if got != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("%d items, %v; want 1 and the context's error", got, err)
	}
}
