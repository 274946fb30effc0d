// Command hand pings annexd through package api's own HTTP/1.1 client, as
// annexctl does. BenchmarkClientStart times its start beside nethttp's.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/annexd/annexd/api"
)

func main() {
	c := api.Dial(os.Args[1])
	defer c.Close()
	p, err := c.Ping(context.Background())
	if err != nil || !p.OK {
		fmt.Fprintln(os.Stderr, "hand:", err)
		os.Exit(1)
	}
}
