package testutil

import (
	"fmt"
	"net"
	"testing"
)

// Ports are below the ephemeral range, free, and never handed out twice.
func TestFreePort(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if seen[p] || low > 11000 && p >= low {
			t.Fatalf("port %d: again %v, ephemeral range from %d", p, seen[p], low)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", FreePort(t)))
	if err != nil {
		t.Fatalf("the port is not free: %v", err)
	}
	l.Close()
}
