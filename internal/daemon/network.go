package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/config"
)

// ErrNoNetwork: the config needs IP sockets ([api] tcp, [publish] hub,
// [hub] listen) and the process may not open them.
var ErrNoNetwork = errors.New("daemon: IP sockets refused")

// netUsers names what in cfg needs IP sockets; none: nothing does.
func netUsers(cfg *config.Config) []string {
	var out []string
	if cfg.API.TCP != "" {
		out = append(out, "[api] tcp")
	}
	if cfg.Publish.Hub != "" {
		out = append(out, "[publish] hub")
	}
	if cfg.Hub.Enabled && (cfg.Hub.Listen != "" || cfg.Hub.Cluster.On()) {
		out = append(out, "[hub] listen")
	}
	return out
}

// checkNetwork fails at start, with the fix, when the config needs IP
// sockets and the process may not open them: a systemd unit's
// RestrictAddressFamilies=AF_UNIX makes socket(2) fail with EAFNOSUPPORT,
// and the publisher would otherwise retry for ever, saying so only in
// the log. IPv4 alone is tried: a machine may run without IPv6.
func checkNetwork(cfg *config.Config) error {
	users := netUsers(cfg)
	if len(users) == 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, unix.EAFNOSUPPORT) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		return nil // not a refusal: the part that needs it says what failed
	}
	return fmt.Errorf("%w: %v need them, and socket(AF_INET) fails: %w (under systemd, the unit's RestrictAddressFamilies= must list AF_INET AF_INET6 beside AF_UNIX; see configs/annexd.service)",
		ErrNoNetwork, users, err)
}
