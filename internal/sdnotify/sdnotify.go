// Package sdnotify tells systemd how a Type=notify service is doing: it
// sends sd_notify(3) state lines ("READY=1", "STATUS=…") as one datagram
// to the unix socket named by $NOTIFY_SOCKET. Without that variable every
// call does nothing, so a daemon can call it wherever it runs.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Env names the variable systemd sets for a notify service.
const Env = "NOTIFY_SOCKET"

// State lines understood by systemd.
const (
	Ready    = "READY=1"    // start-up is finished: the service serves
	Stopping = "STOPPING=1" // the service is shutting down
)

// Status is the STATUS= line that systemctl status shows for the service.
func Status(text string) string {
	return "STATUS=" + strings.ReplaceAll(text, "\n", " ")
}

// ErrSocket is returned when $NOTIFY_SOCKET names something unusable.
var ErrSocket = errors.New("sdnotify: bad " + Env)

// Notify sends the state lines as one datagram. It does nothing and
// returns nil when $NOTIFY_SOCKET is unset.
func Notify(lines ...string) error {
	addr := os.Getenv(Env)
	if addr == "" || len(lines) == 0 {
		return nil
	}
	switch {
	case addr[0] == '@': // abstract namespace
		addr = "\x00" + addr[1:]
	case addr[0] != '/':
		return fmt.Errorf("%w: %q is neither a path nor an abstract socket", ErrSocket, addr)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}
