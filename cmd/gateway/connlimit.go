package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connLimitListener bounds the client connections open at once, in total
// and per client address (nginx's worker_connections and limit_conn), so
// that the memory a client can hold open is bounded: each connection
// costs its goroutine, buffers and up to max_header_bytes of an unfinished
// header, in at most max_header_fields lines (see headerCounter). The
// per-address count keys IPv4 peers by address and IPv6 peers by their
// /64 (one host rotating through its own prefix is one client).
//
// Peers the trusted function accepts (trusted_proxies, which carry many
// clients on their connections) have a pool of their own
// (max_trusted_connections) and no per-address bound, so that direct
// clients filling max_connections cannot lock the proxies out.
//
// A connection over the per-address bound is answered 503 and closed
// without being served. One that finds its pool full takes the place of
// the pool's connection that has been sending its request the longest
// without the gateway working on it (idle in keep-alive, still sending
// its header, or still sending the body the gateway buffers before it
// contacts the upstream, however slowly), which is closed; only a pool
// whose every connection is being served (the upstream has the request,
// or the response is going out, or the connection was upgraded) refuses,
// with 503. The trade-off: addresses that open connections and send
// nothing, or trickle a header or a body, can no longer hold the pool for
// read_header_timeout_ms or client_body_timeout_ms per byte, but under
// such a flood a legitimate client that takes long over its request, or
// sits idle in keep-alive, loses its connection to a newcomer (nginx
// likewise closes idle keep-alive connections when it runs out); a
// request the upstream has is never cut.
type connLimitListener struct {
	net.Listener
	perIP     int                   // < 0: no bound
	maxFields int                   // < 0: no bound
	trusted   func(netip.Addr) bool // may be nil
	onRefuse  func(reason string)   // may be nil; counts refusals
	onEvict   func(pool string)     // may be nil; counts evictions
	mu        sync.Mutex            // guards pools and byIP
	pools     [2]connPool           // public, trusted
	byIP      map[netip.Addr]int    // open connections per key (public pool only)
	refusing  atomic.Int64          // refusals still being written
}

// connPool is one bounded set of open connections.
type connPool struct {
	name, reason string // for the metrics: the pool, and a refusal's reason
	max          int    // < 0: no bound
	conns        map[*limitedConn]struct{}
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

// connBounds are the server section's connection and header bounds.
type connBounds struct {
	total, trusted, perIP, fields int // < 0: no bound
}

func newConnLimitListener(ln net.Listener, b connBounds, trusted func(netip.Addr) bool, onRefuse, onEvict func(string)) *connLimitListener {
	l := &connLimitListener{Listener: ln, perIP: b.perIP, maxFields: b.fields, trusted: trusted,
		onRefuse: onRefuse, onEvict: onEvict, byIP: map[netip.Addr]int{}}
	l.pools[0] = connPool{name: "public", reason: "max_connections", max: b.total, conns: map[*limitedConn]struct{}{}}
	l.pools[1] = connPool{name: "trusted", reason: "max_trusted_connections", max: b.trusted, conns: map[*limitedConn]struct{}{}}
	return l
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

// Connection states (limitedConn.state). Idle and receiving connections
// are evictable.
const (
	connIdle      int32 = iota // no request in progress
	connBusy                   // a handler is running, or the connection was upgraded
	connGone                   // closed, or evicted (its slot already handed on)
	connReceiving              // a handler is buffering the request body, the upstream not yet contacted
)

func (l *connLimitListener) admit(c net.Conn) (*limitedConn, string) {
	lc := &limitedConn{Conn: c, l: l}
	lc.idleSince.Store(time.Now().UnixNano())
	if l.maxFields >= 0 {
		lc.hc = &headerCounter{max: l.maxFields}
	}
	peer := peerAddr(c.RemoteAddr().String())
	trusted := peer.IsValid() && l.trusted != nil && l.trusted(peer)
	if trusted {
		lc.pool = 1
	}
	p := &l.pools[lc.pool]
	l.mu.Lock()
	keyed := !trusted && l.perIP >= 0 && peer.IsValid()
	var k netip.Addr
	if keyed {
		k = connKey(peer)
		if l.byIP[k] >= l.perIP {
			l.mu.Unlock()
			return nil, "max_connections_per_ip"
		}
	}
	var victim *limitedConn
	if p.max >= 0 && len(p.conns) >= p.max {
		if victim = p.longestIdle(); victim == nil {
			l.mu.Unlock()
			return nil, p.reason
		}
		l.forgetLocked(victim)
	}
	p.conns[lc] = struct{}{}
	if keyed {
		l.byIP[k]++
		lc.key, lc.keyed = k, true
	}
	l.mu.Unlock()
	if victim != nil {
		// Its server goroutine fails its read and closes it; the slot
		// is already this connection's.
		_ = victim.Conn.Close()
		if l.onEvict != nil {
			l.onEvict(p.name)
		}
	}
	return lc, ""
}

// longestIdle claims (to gone) the pool's idle or receiving connection
// that has been sending its request the longest (idleSince: the end of
// its last request, or its accept), or returns nil if every one is busy.
// A connection that turns busy while this looks is skipped: its request
// goes on. Caller holds l.mu.
func (p *connPool) longestIdle() *limitedConn {
	for range 4 {
		var best *limitedConn
		var since int64
		var was int32
		for c := range p.conns {
			st := c.state.Load()
			if st != connIdle && st != connReceiving {
				continue
			}
			if s := c.idleSince.Load(); best == nil || s < since {
				best, since, was = c, s, st
			}
		}
		if best == nil {
			return nil
		}
		if best.state.CompareAndSwap(was, connGone) {
			return best
		}
	}
	return nil
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

// forgetLocked removes a closed or evicted connection from the counts.
// Caller holds l.mu.
func (l *connLimitListener) forgetLocked(lc *limitedConn) {
	delete(l.pools[lc.pool].conns, lc)
	if lc.keyed {
		if n := l.byIP[lc.key] - 1; n > 0 {
			l.byIP[lc.key] = n
		} else {
			delete(l.byIP, lc.key)
		}
	}
}

// limitedConn counts as open until its first Close (the server's, or a
// hijacker's for an upgraded connection) or its eviction. The gateway's
// handler reports each request's start and end (beginRequest,
// endRequest), which is what makes a connection idle (evictable) or busy,
// and tells the header counter where a request's body ends.
type limitedConn struct {
	net.Conn
	l         *connLimitListener
	pool      int // index in l.pools
	key       netip.Addr
	keyed     bool
	state     atomic.Int32 // connIdle, connBusy, connGone
	idleSince atomic.Int64 // unix ns; the eviction order
	upgraded  atomic.Bool
	hc        *headerCounter // nil: no max_header_fields
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
	if c.state.Swap(connGone) != connGone {
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
	}
	return err
}

func (c *limitedConn) Read(p []byte) (int, error) {
	if c.hc == nil {
		return c.Conn.Read(p)
	}
	return c.hc.read(c.Conn, p)
}

// beginRequest marks the connection busy for a request whose handler
// starts now and tells the header counter how its body is framed. It
// reports whether the connection must close after the response: a body
// of unknown length (chunked) ends where only the body reader knows, so
// the counter cannot find the next request's header, and the connection
// serves no further request.
func (c *limitedConn) beginRequest(r *http.Request) (closeAfter bool) {
	c.state.CompareAndSwap(connIdle, connBusy)
	if c.hc == nil {
		return false
	}
	return c.hc.begin(r.ContentLength, len(r.TransferEncoding) > 0)
}

// endRequest marks the connection idle again, unless it was upgraded.
func (c *limitedConn) endRequest() {
	if c.upgraded.Load() {
		return
	}
	c.idleSince.Store(time.Now().UnixNano())
	if !c.state.CompareAndSwap(connBusy, connIdle) {
		c.state.CompareAndSwap(connReceiving, connIdle)
	}
}

// receiving marks the connection evictable while its handler buffers the
// request body (on), busy again once the body is in (off). The order of
// eviction stays the request's start (idleSince is left alone): a client
// trickling its body has been sending its request since then. Nil-safe.
func (c *limitedConn) receiving(on bool) {
	if c == nil {
		return
	}
	if on {
		c.state.CompareAndSwap(connBusy, connReceiving)
	} else {
		c.state.CompareAndSwap(connReceiving, connBusy)
	}
}

// upgrade is called as the connection is hijacked for a protocol
// upgrade: what follows is no HTTP header, and the connection stays busy
// until it closes.
func (c *limitedConn) upgrade() {
	c.upgraded.Store(true)
	if c.hc != nil {
		c.hc.stop()
	}
}

// connCtxKey is the request context key of the request's *limitedConn.
type connCtxKey struct{}

// requestConn returns the limitedConn r arrived on, or nil.
func requestConn(r *http.Request) *limitedConn {
	lc, _ := r.Context().Value(connCtxKey{}).(*limitedConn)
	return lc
}

// upgradeWatch tells the connection when ReverseProxy hijacks it for an
// upgrade (through http.ResponseController, which finds Hijack here).
type upgradeWatch struct {
	http.ResponseWriter
	lc *limitedConn
}

func (w *upgradeWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *upgradeWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.lc.upgrade()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// headerCounter bounds the lines of each request header read from a
// connection (server.max_header_fields, Apache's LimitRequestFields):
// net/textproto keeps every parsed line as a map entry and strings, about
// 120 bytes for a line "0:" of 4 bytes, so 32 KiB of tiny distinct lines
// held about 500 kB per connection, and max_header_bytes alone did not
// bound memory. It reads the bytes net/http reads, before net/http parses
// them: a line ends at "\n", a header at its first blank line after the
// request line (blank lines before it are skipped, never taken for the
// end). Past the bound the connection reads as one endless header line,
// so net/http's own header limit (max_header_bytes) answers 431 and
// closes it.
//
// To know where the next header starts, a read is cut right after a
// header's blank line (the rest is handed out by the next reads), so that
// net/http has read nothing past a header when the handler starts and
// reports the body's framing (begin): Content-Length bytes are skipped,
// then counting resumes; a chunked body stops counting, and the gateway
// closes that connection after its response. An upgraded connection stops
// counting too. Reads of net/http are sequential, but the handler's begin
// may run beside the server's background read: mu guards the state, never
// held across a read of the connection.
type headerCounter struct {
	max     int
	mu      sync.Mutex
	mode    uint8 // countHeader, skipBody, stopped
	started bool  // the request line was read
	fields  int   // lines after it, in this header
	lineLen int   // bytes of the current line so far, saturating at 2
	lastCR  bool  // the current line's last byte so far is "\r"
	skip    int64 // body bytes left to skip
	pending []byte
	buf     []byte // pending's storage, reused
	pendErr error  // the read error behind pending
	over    bool
	filled  int64 // bytes handed out since over
}

const (
	countHeader uint8 = iota
	skipBody
	stopped
)

// maxOverfill bounds the bytes an over-bound connection reads as its
// endless line: beyond any max_header_bytes (1 MiB at most), after which
// it reads as closed.
const maxOverfill = 2 << 20

func (h *headerCounter) read(c net.Conn, p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over && h.mode != stopped {
		// (Once stopped, an upgraded connection's bytes are the
		// tunnel's: never filled, whatever was counted before.)
		return h.overfill(p)
	}
	if len(h.pending) > 0 {
		n := copy(p, h.pending)
		k := h.scan(p[:n])
		h.pending = h.pending[k:]
		if len(h.pending) > 0 {
			return k, nil
		}
		err := h.pendErr
		h.pendErr = nil
		return k, err
	}
	h.mu.Unlock()
	n, err := c.Read(p)
	h.mu.Lock()
	k := h.scan(p[:n])
	if k < n {
		h.buf = append(h.buf[:0], p[k:n]...)
		h.pending, h.pendErr = h.buf, err
		return k, nil
	}
	return n, err
}

// overfill hands out a line that never ends.
func (h *headerCounter) overfill(p []byte) (int, error) {
	if h.filled >= maxOverfill {
		return 0, io.EOF
	}
	n := copy(p, overfillBytes[:])
	h.filled += int64(n)
	return n, nil
}

var overfillBytes = [4096]byte(bytes.Repeat([]byte{'x'}, 4096))

// scan accounts for b, the next bytes handed to net/http, and returns how
// many of them to hand out now: all, or those up to the end of a header
// (or of the line that went over the bound).
func (h *headerCounter) scan(b []byte) int {
	i := 0
	for i < len(b) {
		switch h.mode {
		case stopped:
			return len(b)
		case skipBody:
			if rest := int64(len(b) - i); rest <= h.skip {
				h.skip -= rest
				return len(b)
			}
			i += int(h.skip)
			h.skip, h.mode = 0, countHeader
			continue
		}
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			h.addToLine(b[i:])
			return len(b)
		}
		h.addToLine(b[i : i+j])
		blank := h.lineLen == 0 || h.lineLen == 1 && h.lastCR
		h.lineLen, h.lastCR = 0, false
		i += j + 1
		switch {
		case blank && !h.started:
			// A blank line before the request line: net/http skips a
			// few after a POST, or refuses the request.
		case blank:
			h.started, h.fields = false, 0
			return i // the header's end: the handler says what follows
		case !h.started:
			h.started = true
		default:
			h.fields++
			if h.fields > h.max {
				h.over = true
				return i
			}
		}
	}
	return len(b)
}

func (h *headerCounter) addToLine(b []byte) {
	if len(b) == 0 {
		return
	}
	h.lineLen = min(h.lineLen+len(b), 2)
	h.lastCR = b[len(b)-1] == '\r'
}

// begin is told, as a request's handler starts, how its body is framed;
// it reports whether the connection must close after the response.
func (h *headerCounter) begin(contentLength int64, chunked bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mode != countHeader {
		return h.mode == stopped
	}
	if chunked || contentLength < 0 {
		h.mode = stopped
		return true
	}
	if contentLength == 0 {
		// What was read since the header's end (the server's one-byte
		// background read, for a request without a body) is the next
		// header's, and counted so.
		return false
	}
	if h.started || h.lineLen > 0 {
		// Bytes were read past the header before the handler started,
		// which reads stopping at the header's end and net/http reading
		// a body only in the handler rule out. Were it to happen, where
		// the body ends would be unknown: count no more (no body byte
		// is ever taken for a header line) and close after the response.
		h.mode = stopped
		return true
	}
	h.mode, h.skip = skipBody, contentLength
	return false
}

// stop ends the counting (an upgraded connection).
func (h *headerCounter) stop() {
	h.mu.Lock()
	h.mode = stopped
	h.mu.Unlock()
}
