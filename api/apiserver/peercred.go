package apiserver

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peer is what the server knows about a connection's other end.
type peer struct {
	uid int  // peer's uid from SO_PEERCRED, -1 when unknown
	pid int  // peer's pid, 0 when unknown
	tcp bool // came over the TCP listener (token required)
	// page: came over the page's listener (page.go) with its token; it
	// acts as the daemon's own user, whoever asked for the page.
	page  bool
	known bool // uid was read successfully

	gids []uint32 // the primary group, then the supplementary ones
}

type peerKey struct{}

// peerCred reads the peer's credentials of a unix socket connection.
func peerCred(c *net.UnixConn) (peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peer{uid: -1}, err
	}
	var cred *unix.Ucred
	var gids []uint32
	var serr error
	err = raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil {
			gids = peerGroups(int(fd), cred.Gid)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return peer{uid: -1}, fmt.Errorf("apiserver: SO_PEERCRED: %w", err)
	}
	return peer{uid: int(cred.Uid), pid: int(cred.Pid), known: true, gids: gids}, nil
}

// connContext attaches the peer to every request's context; it is the
// http.Server's ConnContext.
func connContext(ctx context.Context, c net.Conn) context.Context {
	var p peer
	switch uc := c.(type) {
	case *guardedConn:
		p = uc.peer // read at accept
	case *net.UnixConn:
		p, _ = peerCred(uc) // unknown peer ⇒ refused by the handler
	case *net.TCPConn:
		p = peer{uid: -1, tcp: true}
	default:
		p = peer{uid: -1}
	}
	return context.WithValue(ctx, peerKey{}, p)
}

func peerFrom(ctx context.Context) peer {
	p, ok := ctx.Value(peerKey{}).(peer)
	if !ok {
		return peer{uid: -1}
	}
	return p
}
