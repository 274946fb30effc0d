package hub

import (
	"fmt"
	"log/slog"
)

// serverLog passes the NATS server's warnings and errors to the hub's
// logger, and its fatal errors (a port in use) to start, which fails.
type serverLog struct {
	log   *slog.Logger
	fatal chan string
}

func (l serverLog) Noticef(format string, v ...any) {
	l.log.Debug("hub: nats", "msg", fmt.Sprintf(format, v...))
}

func (l serverLog) Warnf(format string, v ...any) {
	l.log.Warn("hub: nats", "msg", fmt.Sprintf(format, v...))
}

func (l serverLog) Errorf(format string, v ...any) {
	l.log.Warn("hub: nats error", "msg", fmt.Sprintf(format, v...))
}

func (l serverLog) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

func (serverLog) Debugf(string, ...any) {}

func (serverLog) Tracef(string, ...any) {}
