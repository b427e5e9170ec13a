package main

// The upstream round trip of the common request, on the handler's own
// goroutine.
//
// net/http's Transport runs every HTTP/1.1 exchange on three goroutines:
// the caller hands the request to the connection's writeLoop, the
// readLoop parses the response and hands it back, and the response body's
// EOF is signalled back to the readLoop, which only then returns the
// connection to its pool. Each hand-off is a channel operation and often a
// futex wake-up and a scheduler pass; with a small response on loopback,
// they cost the gateway more than the rate limiter and the upstream's
// answer together (a profile at 32 connections: system calls 26 %,
// scheduler and futex about 15 %, the limiter under 3 %).
//
// upstreamTransport writes the request and reads the response on the
// goroutine that calls RoundTrip, over a pool of idle keep-alive
// connections, for the request shape most gateway traffic has, and hands
// every other request to the configured http.Transport unchanged. The
// fast path is kept narrow so that it cannot become a request-smuggling
// or response-mixing surface:
//
//   - plain http:// to the configured upstream (no TLS, no HTTP proxy from
//     the environment);
//   - GET or HEAD with no body (Body nil or NoBody, ContentLength 0, no
//     Transfer-Encoding, no trailer), no Connection, Upgrade, Expect,
//     Content-Length or Transfer-Encoding header in any spelling, and
//     every header name and value valid (the checks Transport makes
//     before it writes): an idempotent request, which may be sent again
//     on a fresh connection when a reused one fails before any byte of
//     the response arrived, and one whose framing cannot differ between
//     the gateway and the upstream;
//   - the request is written by the standard library (Request.Write), the
//     response parsed by http.ReadResponse: the framing rules Transport
//     uses (Content-Length or chunked, conflicting Content-Lengths refused,
//     HEAD, 204 and 304 bodyless).
//
// A connection goes back to the pool only when its response was read to
// io.EOF exactly, the response did not ask to close (which every
// close-delimited body does), the request's context did not end, and
// nothing is buffered beyond the response; and before it is used again a
// non-blocking peek at the socket makes sure the upstream neither closed
// it nor sent anything while it sat idle. An upstream that sends more than
// it was asked for (a second response, trailing bytes) therefore loses the
// connection: those bytes never reach another client. Where the peek is
// not available (see upstream_peek_*.go) the fast path is off.
import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// upstreamBufSize is the size of each connection's read and write
	// buffers, Transport's default.
	upstreamBufSize = 4 << 10
	// maxUpstreamIdle bounds the idle connections kept, as the
	// Transport's MaxIdleConnsPerHost.
	maxUpstreamIdle = 1024
	// maxResponseHeaderBytes bounds one response header (each 1xx
	// informational response gets its own), Transport's default.
	maxResponseHeaderBytes = 10 << 20
	// max1xxResponses bounds the informational responses before the
	// final one (Transport bounds only their bytes once they are passed
	// on, as ReverseProxy does): an upstream sending 1xx forever would
	// otherwise hold the request until the client left.
	max1xxResponses = 16
)

// errTooMany1xx ends a request whose upstream sent more than
// max1xxResponses informational responses.
var errTooMany1xx = errors.New("upstream sent too many 1xx informational responses")

// upstreamTransport is the proxy's Transport: the direct round trip for
// requests in its scope, std for the rest. Safe for concurrent use.
type upstreamTransport struct {
	std           *http.Transport
	host          string // the URL host the fast path serves ("": fast path off)
	addr          string // host:port dialled for it
	dialer        net.Dialer
	headerTimeout time.Duration // response_header_timeout_ms (0: none)
	idleTimeout   time.Duration // idle_conn_timeout_ms (0: none)

	mu         sync.Mutex
	idle       []*upstreamConn // oldest first: put appends, get takes the newest
	sweep      *time.Timer     // closes connections idle past idleTimeout
	sweepArmed bool

	// Counted for tests and for the curious: requests handed to std, and
	// connections the fast path opened.
	stdTrips atomic.Uint64
	dials    atomic.Uint64
}

// newUpstreamTransport wraps std (built by newTransport from pc) for the
// upstream u.
func newUpstreamTransport(u *url.URL, pc proxyConfig, std *http.Transport) *upstreamTransport {
	t := &upstreamTransport{
		std:           std,
		dialer:        net.Dialer{Timeout: pc.dialTimeout, KeepAlive: 30 * time.Second},
		headerTimeout: pc.responseHeaderTimeout,
		idleTimeout:   pc.idleConnTimeout,
	}
	if !canPeek || u == nil || u.Scheme != "http" || u.Host == "" {
		return t
	}
	// An HTTP proxy from the environment (HTTP_PROXY) is std's business:
	// the fast path only ever talks to the upstream itself.
	if std.Proxy != nil {
		if pu, err := std.Proxy(&http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: u.Host}}); err != nil || pu != nil {
			return t
		}
	}
	t.host = u.Host
	t.addr = u.Host
	if u.Port() == "" {
		t.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return t
}

// RoundTrip sends req on the fast path when it is in scope, through std
// otherwise.
func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.direct(req) {
		t.stdTrips.Add(1)
		return t.std.RoundTrip(req)
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("upstream round trip: %w", context.Cause(ctx))
	}
	pc, reused, err := t.getConn(ctx)
	if err != nil {
		return nil, err
	}
	res, err := pc.roundTrip(req)
	// A reused connection the upstream closed (or reset) while the
	// request was on its way fails before any byte of the response:
	// the request is idempotent, so it is sent once more, on a fresh
	// connection (another idle one might be as stale). A timeout is not
	// retried (the header timeout ran out: 504), and neither is a
	// request whose context ended.
	if err != nil && reused && pc.nread == 0 && ctx.Err() == nil && !isTimeout(err) {
		if pc, err = t.dial(ctx); err != nil {
			return nil, err
		}
		res, err = pc.roundTrip(req)
	}
	return res, err
}

// direct reports whether req is in the fast path's scope (see the file
// comment).
func (t *upstreamTransport) direct(req *http.Request) bool {
	if t.host == "" || req.URL == nil || req.URL.Scheme != "http" || req.URL.Host != t.host ||
		req.Method != http.MethodGet && req.Method != http.MethodHead ||
		req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 ||
		len(req.TransferEncoding) != 0 || len(req.Trailer) != 0 || req.Close || req.Header == nil {
		return false
	}
	for k, vv := range req.Header {
		if !validToken(k) || framingHeader(k) {
			return false
		}
		for _, v := range vv {
			if !validHeaderValue(v) {
				return false
			}
		}
	}
	return true
}

// framingHeader reports whether k, in any spelling, is a header that
// changes how the request is framed or what the connection becomes.
func framingHeader(k string) bool {
	switch len(k) {
	case len("Connection"):
		return strings.EqualFold(k, "Connection")
	case len("Upgrade"):
		return strings.EqualFold(k, "Upgrade")
	case len("Expect"):
		return strings.EqualFold(k, "Expect")
	case len("Content-Length"):
		return strings.EqualFold(k, "Content-Length")
	case len("Transfer-Encoding"):
		return strings.EqualFold(k, "Transfer-Encoding")
	}
	return false
}

// validHeaderValue: no control character but horizontal tab (as
// Transport's check; obs-text passes).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// CloseIdleConnections closes every idle connection of both paths (a
// retired configuration's; connections still serving a request are
// closed or pooled as they finish, and the sweep closes pooled ones once
// idle_conn_timeout_ms passed).
func (t *upstreamTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, pc := range idle {
		pc.close()
	}
	t.std.CloseIdleConnections()
}

// getConn returns a live idle connection, or a new one.
func (t *upstreamTransport) getConn(ctx context.Context) (*upstreamConn, bool, error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			pc, err := t.dial(ctx)
			return pc, false, err
		}
		pc := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if t.idleTimeout > 0 && time.Since(pc.idleSince) > t.idleTimeout || !pc.quiet() {
			pc.close()
			continue
		}
		return pc, true, nil
	}
}

// dial opens a connection to the upstream.
func (t *upstreamTransport) dial(ctx context.Context) (*upstreamConn, error) {
	c, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	t.dials.Add(1)
	pc := &upstreamConn{t: t, conn: c}
	pc.br = bufio.NewReaderSize(pc, upstreamBufSize)
	pc.bw = bufio.NewWriterSize(c, upstreamBufSize)
	pc.abortFn = pc.close
	pc.setupPeek()
	return pc, nil
}

// put returns pc to the pool, or closes it when the pool is full.
func (t *upstreamTransport) put(pc *upstreamConn) {
	pc.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle) >= maxUpstreamIdle {
		t.mu.Unlock()
		pc.close()
		return
	}
	t.idle = append(t.idle, pc)
	if t.idleTimeout > 0 && !t.sweepArmed {
		t.sweepArmed = true
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
		} else {
			t.sweep.Reset(t.idleTimeout)
		}
	}
	t.mu.Unlock()
}

// sweepIdle closes the connections idle longer than idleTimeout (the
// oldest are first in the slice) and sets itself to run again when the
// next one will be, if any is left.
func (t *upstreamTransport) sweepIdle() {
	now := time.Now()
	t.mu.Lock()
	stale := 0
	for stale < len(t.idle) && now.Sub(t.idle[stale].idleSince) >= t.idleTimeout {
		stale++
	}
	old := make([]*upstreamConn, stale)
	copy(old, t.idle[:stale])
	n := copy(t.idle, t.idle[stale:])
	clear(t.idle[n:])
	t.idle = t.idle[:n]
	if n > 0 {
		t.sweep.Reset(t.idle[0].idleSince.Add(t.idleTimeout).Sub(now))
	} else {
		t.sweepArmed = false
	}
	t.mu.Unlock()
	for _, pc := range old {
		pc.close()
	}
}

// upstreamConn is one connection of the fast path with its buffers. It
// belongs to one request at a time: the pool's, or the request's from
// getConn until its response body ends.
type upstreamConn struct {
	t       *upstreamTransport
	conn    net.Conn
	br      *bufio.Reader // reads through the upstreamConn itself (Read: limit and count)
	bw      *bufio.Writer
	abortFn func() // pc.close, run when the request's context ends (see roundTrip); made once: a method value per request would allocate

	limit     int64 // bytes Read may still take (the header limit while a header is read)
	nread     int64 // bytes read from the connection in this round trip
	idleSince time.Time

	peek peeker // the idle check (upstream_peek_*.go)
}

// Read is what br reads from: the connection, within limit, counting.
func (pc *upstreamConn) Read(p []byte) (int, error) {
	if pc.limit <= 0 {
		return 0, fmt.Errorf("upstream response header larger than %d bytes", maxResponseHeaderBytes)
	}
	if int64(len(p)) > pc.limit {
		p = p[:pc.limit]
	}
	n, err := pc.conn.Read(p)
	pc.limit -= int64(n)
	pc.nread += int64(n)
	return n, err
}

// close closes the connection. As the request context's hook (abortFn)
// it makes a blocked read or write return, and frees the connection of a
// response whose body its reader abandoned without closing it (as
// Transport closes it); the connection is never pooled once the hook may
// have run (release: stop reported false).
func (pc *upstreamConn) close() { _ = pc.conn.Close() }

// fail closes the connection and says why the round trip ended: the
// request's context when it ended (the client left, or the proxy gave up
// on the request; the error handler tells which by that context), the
// connection's error otherwise.
func (pc *upstreamConn) fail(ctx context.Context, stop func() bool, err error) error {
	stop()
	pc.close()
	if ctx.Err() != nil {
		return fmt.Errorf("upstream round trip: %w (%w)", context.Cause(ctx), err)
	}
	return err
}

// roundTrip writes req and reads its response on pc.
func (pc *upstreamConn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	pc.nread = 0
	pc.limit = maxResponseHeaderBytes
	// The hook (close) closes the connection, so no deadline set or
	// cleared here can undo it.
	if pc.t.headerTimeout > 0 {
		_ = pc.conn.SetReadDeadline(time.Now().Add(pc.t.headerTimeout))
	}
	stop := context.AfterFunc(ctx, pc.abortFn)
	err := req.Write(pc.bw)
	if err == nil {
		err = pc.bw.Flush()
	}
	if err != nil {
		pc.bw.Reset(pc.conn)
		return nil, pc.fail(ctx, stop, err)
	}
	trace := httptrace.ContextClientTrace(ctx)
	var res *http.Response
	for n1xx := 0; ; n1xx++ {
		if res, err = http.ReadResponse(pc.br, req); err != nil {
			return nil, pc.fail(ctx, stop, err)
		}
		code := res.StatusCode
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			break
		}
		// An informational response (103 Early Hints, a stray 100
		// Continue) comes before the final one, as Transport passes it
		// on: to ReverseProxy, which forwards it to the client.
		if n1xx == max1xxResponses {
			return nil, pc.fail(ctx, stop, errTooMany1xx)
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(res.Header)); err != nil {
				return nil, pc.fail(ctx, stop, err)
			}
		}
		pc.limit = maxResponseHeaderBytes
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Never asked for (an upgrade takes std's path): the connection
		// now speaks something else.
		return nil, pc.fail(ctx, stop, errUpgradeRefused)
	}
	if res.StatusCode < 100 {
		// ReadResponse takes any three digits; no HTTP status is below
		// 100, and the client's WriteHeader would panic on it.
		return nil, pc.fail(ctx, stop, fmt.Errorf("%w: %d", errBadUpstreamStatus, res.StatusCode))
	}
	pc.limit = math.MaxInt64
	if pc.t.headerTimeout > 0 {
		_ = pc.conn.SetReadDeadline(time.Time{})
	}
	keep := !res.Close
	if res.Body == http.NoBody {
		// HEAD, 204, 304, Content-Length: 0: the response is complete.
		pc.release(stop, keep)
		return res, nil
	}
	res.Body = &upstreamBody{rc: res.Body, pc: pc, ctx: ctx, stop: stop, keep: keep}
	return res, nil
}

// release ends pc's round trip: back to the pool when keep (the response
// allows reuse and was read to its end), the context's hook had not run
// (stop reports that it never will: once it may have run, the
// connection is closed or closing) and nothing is buffered beyond the response (an upstream that
// sent more than one answer is out of step: whatever it sent must not
// become the next request's response); closed otherwise.
func (pc *upstreamConn) release(stop func() bool, keep bool) {
	if stop() && keep && pc.br.Buffered() == 0 {
		pc.t.put(pc)
		return
	}
	pc.close()
}

// upstreamBody is a fast-path response's body: at io.EOF its connection
// goes back to the pool, at Close before io.EOF or at an error it is
// closed. Closing is chosen over draining the rest: a body closed early
// is one nobody reads any more (the client left, the copy failed), and
// reading on would spend the gateway's time and hold the request for as
// long as the upstream takes to send it.
//
// One is allocated per response: once its connection is back in the pool
// the connection serves other requests, while the caller may still call
// Close on this body, which must then do nothing.
type upstreamBody struct {
	rc   io.ReadCloser // http.ReadResponse's body, reading from pc.br
	pc   *upstreamConn // nil once released
	ctx  context.Context
	stop func() bool
	keep bool
	err  error // returned by Read once released
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	pc := b.pc
	if pc == nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.pc, b.err = nil, io.EOF
		pc.release(b.stop, b.keep)
	case err != nil:
		err = pc.fail(b.ctx, b.stop, err)
		b.pc, b.err = nil, err
	}
	return n, err
}

// Close closes the connection of a body not read to its end; the
// http.ReadResponse body is not closed, since closing it would read the
// rest of it first.
func (b *upstreamBody) Close() error {
	if pc := b.pc; pc != nil {
		b.pc, b.err = nil, errBodyClosed
		b.stop()
		pc.close()
	}
	return nil
}

// errBodyClosed is what Read returns after Close.
var errBodyClosed = errors.New("upstream response body: read after close")
