// Command nethttp pings annexd through net/http's client and decodes the
// answer with encoding/json: what annexctl would link without package
// api's own client. BenchmarkClientStart times its start beside hand's.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	sock := os.Args[1]
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://annexd/v1/ping")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nethttp:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	var p struct {
		OK bool `json:"ok"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || !p.OK {
		fmt.Fprintln(os.Stderr, "nethttp:", err)
		os.Exit(1)
	}
}
