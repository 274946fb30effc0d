package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// handed are the ports FreePort handed out in this process.
var handed struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a loopback TCP port nothing listens on now, for a
// server a test starts later at a known address, and never the same one
// twice in a process. It is picked at random below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range): a port the kernel hands out for
// ":0" is one of that range, and an outgoing connection of another test
// took it as its source port between the pick and the server's bind
// ("address already in use"). Where the range leaves no room below it, the
// kernel's pick is used.
func FreePort(t testing.TB) int {
	t.Helper()
	handed.Lock()
	defer handed.Unlock()
	if handed.ports == nil {
		handed.ports = map[int]bool{}
	}
	const floor = 10000
	low := ephemeralLow()
	for range 1000 {
		p := 0
		if low > floor+1000 {
			p = floor + rand.IntN(low-floor)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		p = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handed.ports[p] {
			handed.ports[p] = true
			return p
		}
	}
	t.Fatal("testutil: no free loopback port")
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range; 32768,
// Linux's default, when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	var low, high int
	if err != nil {
		return 32768
	}
	if n, _ := fmt.Sscan(string(b), &low, &high); n != 2 || low <= 0 {
		return 32768
	}
	return low
}
