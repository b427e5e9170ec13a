package main

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connLimitListener bounds the client connections open at once, in total
// and per client address (nginx's worker_connections and limit_conn), so
// that the memory a client can hold open is bounded: each connection
// costs its goroutine, buffers and up to max_header_bytes of an unfinished
// header. A connection over either bound is answered 503 and closed
// without being served. The per-address count keys IPv4 peers by address
// and IPv6 peers by their /64 (one host rotating through its own prefix
// is one client); peers the trusted function accepts (trusted_proxies,
// which carry many clients on their connections) count only in the total.
type connLimitListener struct {
	net.Listener
	total, perIP int                   // < 0: no bound
	trusted      func(netip.Addr) bool // may be nil
	onRefuse     func(reason string)   // may be nil; counts refusals
	open         atomic.Int64          // connections open now
	mu           sync.Mutex            // guards byIP
	byIP         map[netip.Addr]int    // open connections per key
	refusing     atomic.Int64          // refusals still being written
}

// maxRefusing bounds the refusals being answered at once; past it a
// connection over a bound is closed without the 503 (a flood of refused
// connections must not cost memory either).
const maxRefusing = 64

// refuseTimeout bounds the time a refusal spends writing its 503 and
// reading what the client sent meanwhile (read and dropped, so that the
// close sends FIN, not a reset that may discard the 503 at the client).
const refuseTimeout = time.Second

var refuseResponse = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Connection: close\r\nRetry-After: 1\r\nContent-Length: 29\r\n\r\n503 too many open connections")

func newConnLimitListener(ln net.Listener, total, perIP int, trusted func(netip.Addr) bool, onRefuse func(string)) *connLimitListener {
	return &connLimitListener{Listener: ln, total: total, perIP: perIP, trusted: trusted, onRefuse: onRefuse, byIP: map[netip.Addr]int{}}
}

// Accept returns the next connection within the bounds; those over a
// bound are refused here and never reach the server.
func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, reason := l.admit(c)
		if lc != nil {
			return lc, nil
		}
		l.refuse(c, reason)
	}
}

// connKey is the per-address key of a peer: the address, or its /64.
func connKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

func (l *connLimitListener) admit(c net.Conn) (*limitedConn, string) {
	if n := l.open.Add(1); l.total >= 0 && n > int64(l.total) {
		l.open.Add(-1)
		return nil, "max_connections"
	}
	lc := &limitedConn{Conn: c, l: l}
	if l.perIP < 0 {
		return lc, ""
	}
	peer := peerAddr(c.RemoteAddr().String())
	if !peer.IsValid() || l.trusted != nil && l.trusted(peer) {
		return lc, ""
	}
	k := connKey(peer)
	l.mu.Lock()
	if l.byIP[k] >= l.perIP {
		l.mu.Unlock()
		l.open.Add(-1)
		return nil, "max_connections_per_ip"
	}
	l.byIP[k]++
	l.mu.Unlock()
	lc.key, lc.keyed = k, true
	return lc, ""
}

// refuse answers c with 503 and closes it, off the accept loop.
func (l *connLimitListener) refuse(c net.Conn, reason string) {
	if l.onRefuse != nil {
		l.onRefuse(reason)
	}
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseTimeout))
		if _, err := c.Write(refuseResponse); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// release forgets a closed connection.
func (l *connLimitListener) release(lc *limitedConn) {
	if lc.keyed {
		l.mu.Lock()
		if n := l.byIP[lc.key] - 1; n > 0 {
			l.byIP[lc.key] = n
		} else {
			delete(l.byIP, lc.key)
		}
		l.mu.Unlock()
	}
	l.open.Add(-1)
}

// limitedConn counts as open until its first Close (the server's, or a
// hijacker's for an upgraded connection).
type limitedConn struct {
	net.Conn
	l      *connLimitListener
	key    netip.Addr
	keyed  bool
	closed atomic.Bool
}

// CloseWrite passes the half-close through: net/http half-closes before
// it closes a connection it refused (431, 400), so the client reads the
// answer instead of a reset caused by the header bytes left unread.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if !c.closed.Swap(true) {
		c.l.release(c)
	}
	return err
}
