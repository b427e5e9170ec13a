package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/httplimit"
)

// newTransport is the upstream transport of one configuration generation.
func newTransport(pc proxyConfig) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: pc.dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = pc.responseHeaderTimeout
	tr.IdleConnTimeout = pc.idleConnTimeout
	// A gateway keeps many idle connections to its one upstream; the
	// default of 2 per host would open and close a connection for most
	// requests under load and exhaust loopback ports.
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 1024
	// The client's Accept-Encoding goes to the upstream as the client sent
	// it, as nginx passes it. With compression enabled the transport would
	// ask a client's uncompressed request for gzip, then inflate the
	// answer on the gateway's CPU for a client that never wanted it.
	tr.DisableCompression = true
	// HTTP/1.1 to the upstream over a pool of connections, as nginx's
	// proxy_http_version 1.1 with keepalive: DefaultTransport's forced
	// HTTP/2 would put every client's requests to an https upstream on one
	// connection, behind one another's flow control.
	tr.ForceAttemptHTTP2 = false
	return tr
}

// proxyBufSize is the size of the buffers ReverseProxy copies response
// bodies through: its own default, 32 KiB.
const proxyBufSize = 32 << 10

// copyBuffers is every generation's ReverseProxy.BufferPool. Without one,
// ReverseProxy allocates (and the collector then clears and frees) a
// fresh 32 KiB buffer for every response, two thirds of the bytes a
// proxied request allocated. A buffer is reused only after ReverseProxy
// returned it, and only its first n bytes, just read from the upstream,
// are ever written to a client, so no response sees another's data.
var copyBuffers bufferPool

// bufferPool is an httputil.BufferPool of proxyBufSize buffers, kept as
// array pointers so that Put stores no new slice header (which would
// allocate).
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if a, ok := b.p.Get().(*[proxyBufSize]byte); ok {
		return a[:]
	}
	return new([proxyBufSize]byte)[:]
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) < proxyBufSize {
		return // not one of ours
	}
	b.p.Put((*[proxyBufSize]byte)(buf[:proxyBufSize]))
}

// proxy is the upstream side of one generation: the reverse proxy, with
// the request body's limit, timeout and buffering in front of it and the
// response body's read timeout behind it.
type proxy struct {
	rp   *httputil.ReverseProxy
	tr   *upstreamTransport // the direct round trip, std http.Transport for the rest (upstream.go)
	pc   proxyConfig
	ours bool // upstream_headers: ours (the upstream's rate-limit headers never go out)
	log  *slog.Logger
	m    *metrics
}

func newProxy(u *url.URL, c *config, log *slog.Logger, m *metrics) *proxy {
	tr := newUpstreamTransport(u, c.proxy, newTransport(c.proxy))
	trusted := c.trusted
	p := &proxy{tr: tr, pc: c.proxy, ours: c.opts.Upstream == httplimit.UpstreamOurs, log: log, m: m}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			forwardHeaders(pr.Out, pr.In, trusted)
			dropInvalidHeaders(pr.Out.Header, p.pc.underscores)
			filterUpgrade(pr.Out.Header, p.pc.upgrades)
		},
		Transport:      tr,
		BufferPool:     &copyBuffers,
		ModifyResponse: p.watchResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			status, kind := classifyUpstreamError(r, err)
			m.upstreamError(kind)
			if kind == "client_gone" {
				// Nobody is listening for an answer; 499 is what nginx
				// logs for this, and it goes nowhere.
				log.Debug("client went away before the upstream answered", "method", r.Method, "path", r.URL.Path)
				w.WriteHeader(499)
				return
			}
			log.Warn("upstream request failed", "method", r.Method, "path", r.URL.Path, "status", status, "kind", kind, "err", err.Error())
			if status == http.StatusRequestEntityTooLarge || status == http.StatusRequestTimeout {
				w.Header().Set("Connection", "close") // the rest of the body is not read
			}
			http.Error(w, fmt.Sprintf("%d %s", status, strings.ToLower(http.StatusText(status))), status)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return p
}

// reqState is what the proxy's hooks learn about one request: its body
// (for the error handler) and how to abort its upstream call.
type reqState struct {
	body   *clientBody // nil without a body
	cancel context.CancelCauseFunc
	sw     sendTimeoutWriter // the client's writer, held here to save an allocation
}

type reqStateKey struct{}

// errUpstreamReadTimeout ends an upstream call whose response body stalled
// for read_timeout_ms.
var errUpstreamReadTimeout = errors.New("upstream response body: no data within read_timeout_ms")

// ServeHTTP guards the request body, then proxies.
//
// The body is read under a limit (max_body_bytes: 413 at once when
// Content-Length says so, otherwise when reading passes it) and a timeout
// between two reads (client_body_timeout_ms: 408). With request_buffering
// (the default) it is read whole before the upstream is contacted, into
// memory up to body_memory_bytes and a temporary file beyond, so that a
// client trickling its body ties up a gateway goroutine but no upstream
// connection, and the upstream never sees a body cut short.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	// One allocation for the request's state and its writer.
	st := &reqState{cancel: cancel}
	sw := &st.sw
	*sw = sendTimeoutWriter{ResponseWriter: w, ctl: *http.NewResponseController(w), d: p.pc.clientSendTimeout}
	defer sw.disarm()
	w = sw
	r = r.WithContext(context.WithValue(ctx, reqStateKey{}, st))
	if r.Body != nil && r.Body != http.NoBody {
		if p.pc.maxBody >= 0 && r.ContentLength > p.pc.maxBody {
			p.refuseBody(w, r, errBodyTooLarge)
			return
		}
		st.body = &clientBody{rc: r.Body, limit: p.pc.maxBody, left: p.pc.maxBody,
			ctl: http.NewResponseController(w), timeout: p.pc.clientBodyTimeout,
			// A body that fails mid-stream ends the upstream call: the
			// transport's response-header timeout starts only once the
			// body is written, and an upstream waiting for the rest of
			// the body would hold the call (and its connection) open.
			fail: cancel}
		r.Body = st.body
		defer func() {
			st.body.disarm()
			st.body.handlerDone.Store(true)
		}()
		if p.pc.buffering {
			// Until the body is in, the connection may be evicted for a
			// newcomer like one still sending its header.
			lc := requestConn(r)
			lc.receiving(true)
			sp, err := bufferBody(st.body, r.ContentLength, p.pc.bodyMemory)
			lc.receiving(false)
			if err != nil {
				p.refuseBody(w, r, err)
				return
			}
			defer sp.Close()
			r.Body, r.ContentLength, r.TransferEncoding, r.GetBody = sp, sp.size, nil, nil
			// The body is here: the upstream need not ask for it.
			r.Header.Del("Expect")
		}
	}
	p.rp.ServeHTTP(w, r)
}

// sendTimeoutWriter bounds the wait for the client to take each write of
// the response (nginx's send_timeout): a client that stops reading would
// otherwise hold the proxy's copy, and with it the upstream connection
// and the upstream's handler, as long as it likes. The deadline is set on
// the connection before each write or flush and cleared when the handler
// ends (the connection then serves the next request) or hijacks it (a
// websocket may be quiet for as long as it likes).
type sendTimeoutWriter struct {
	http.ResponseWriter
	ctl   http.ResponseController // by value: one allocation less per request
	d     time.Duration
	armed bool
}

func (w *sendTimeoutWriter) arm() {
	if w.ctl.SetWriteDeadline(time.Now().Add(w.d)) == nil {
		w.armed = true
	}
}

func (w *sendTimeoutWriter) disarm() {
	if w.armed {
		w.armed = false
		_ = w.ctl.SetWriteDeadline(time.Time{})
	}
}

func (w *sendTimeoutWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// Flush and FlushError are what http.ResponseController (which
// ReverseProxy flushes through) finds before unwrapping.
func (w *sendTimeoutWriter) Flush() { _ = w.FlushError() }

func (w *sendTimeoutWriter) FlushError() error {
	w.arm()
	return w.ctl.Flush()
}

func (w *sendTimeoutWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.disarm()
	return w.ctl.Hijack()
}

func (w *sendTimeoutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refuseBody answers a request whose body the gateway would not take.
func (p *proxy) refuseBody(w http.ResponseWriter, r *http.Request, err error) {
	status, kind := http.StatusBadRequest, "client_gone"
	switch {
	case errors.Is(err, errBodyTooLarge):
		status, kind = http.StatusRequestEntityTooLarge, "body_too_large"
	case errors.Is(err, errBodyTimeout):
		status, kind = http.StatusRequestTimeout, "client_body_timeout"
	case errors.Is(err, errSpool):
		status, kind = http.StatusInternalServerError, "body_buffer"
		p.log.Error("buffering a request body", "method", r.Method, "path", r.URL.Path, "err", err.Error())
	}
	p.m.upstreamError(kind)
	// The rest of the body is not read: the server closes the connection
	// after the answer instead of draining it.
	w.Header().Set("Connection", "close")
	if status == http.StatusRequestEntityTooLarge {
		http.Error(w, fmt.Sprintf("413 request body larger than %d bytes", p.pc.maxBody), status)
		return
	}
	http.Error(w, fmt.Sprintf("%d %s", status, strings.ToLower(http.StatusText(status))), status)
}

// errUpgradeRefused ends a proxied request whose upstream switched
// protocols although the gateway passed no upgrade it allows.
var errUpgradeRefused = errors.New("upstream switched protocols without an allowed upgrade (proxy.upgrades)")

// errBadUpstreamStatus ends a proxied request whose upstream answered
// with a status no HTTP status can be (below 100).
var errBadUpstreamStatus = errors.New("upstream answered with an invalid status code")

// watchResponse is ModifyResponse. It refuses a status below 100 and a
// 101 to a request that carries no allowed upgrade (a lenient upstream
// must not open a tunnel past every rule); under upstream_headers: ours it removes the
// upstream's rate-limit headers and trailers (the middleware sets its own
// on limited requests; exempt and unmatched ones then carry none); and it
// arms read_timeout_ms on the response body (nginx's proxy_read_timeout:
// the longest wait for the next read; ResponseHeaderTimeout covers the
// wait for the header). An allowed upgrade's body is left alone: it is
// the connection itself, and a websocket may be quiet for as long as it
// likes.
func (p *proxy) watchResponse(res *http.Response) error {
	if res.StatusCode < 100 || res.StatusCode > 999 {
		// http.ReadResponse takes any three digits as a status; passed
		// on, one below 100 would panic the handler in WriteHeader.
		return fmt.Errorf("%w: %d", errBadUpstreamStatus, res.StatusCode)
	}
	if res.StatusCode == http.StatusSwitchingProtocols && upgradeType(res.Request.Header) == "" {
		return errUpgradeRefused
	}
	if p.ours {
		dropRateLimitHeaders(res.Header)
		dropRateLimitHeaders(res.Trailer)
		if res.StatusCode != http.StatusSwitchingProtocols && res.ContentLength < 0 && res.Body != nil && res.Body != http.NoBody {
			// Trailers come after the body; the transport fills
			// res.Trailer as it reaches the end.
			res.Body = &trailerFilter{ReadCloser: res.Body, res: res}
		}
	}
	if res.StatusCode == http.StatusSwitchingProtocols || res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	st, _ := res.Request.Context().Value(reqStateKey{}).(*reqState)
	if st == nil {
		return nil
	}
	method, path := res.Request.Method, res.Request.URL.Path
	res.Body = newReadTimeoutBody(res.Body, p.pc.readTimeout, func() {
		p.m.upstreamError("read_timeout")
		p.log.Warn("upstream response body stalled; cutting it", "method", method, "path", path, "read_timeout", p.pc.readTimeout.String())
		st.cancel(errUpstreamReadTimeout)
	})
	return nil
}

// trailerFilter removes the rate-limit fields from a response's trailer
// once the body is read (ReverseProxy copies res.Trailer after it).
type trailerFilter struct {
	io.ReadCloser
	res *http.Response
}

func (f *trailerFilter) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if err != nil {
		dropRateLimitHeaders(f.res.Trailer)
	}
	return n, err
}

// dropRateLimitHeaders deletes the rate-limit family (RateLimit*,
// X-RateLimit-*, X-Rate-Limit-*, as httplimit names it) from h.
func dropRateLimitHeaders(h http.Header) {
	for k := range h {
		if hasPrefixFold(k, "ratelimit") || hasPrefixFold(k, "x-ratelimit-") || hasPrefixFold(k, "x-rate-limit-") {
			delete(h, k)
		}
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// upgradeType is the protocol a request or response asks to switch to:
// its Upgrade header when Connection lists "upgrade", as ReverseProxy
// reads it.
func upgradeType(h http.Header) string {
	for _, v := range h.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// filterUpgrade removes an upgrade that proxy.upgrades does not allow
// from an outgoing request: the Upgrade header and Connection (which
// ReverseProxy has reduced to "Upgrade"), so the upstream answers it as
// a plain request. Every protocol the Upgrade value lists must be
// allowed ("websocket, h2c" is not), compared ignoring case and version.
// HTTP2-Settings, which only an h2c upgrade uses, is always removed.
func filterUpgrade(h http.Header, allowed []string) {
	h.Del("Http2-Settings")
	vals := h.Values("Upgrade")
	if len(vals) == 0 {
		return
	}
	ok := true
	for _, v := range vals {
		for _, proto := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(proto), "/")
			if !slices.Contains(allowed, strings.ToLower(name)) {
				ok = false
			}
		}
	}
	if !ok {
		h.Del("Upgrade")
		h.Del("Connection")
	}
}

// readTimeoutBody calls fire when one Read waits longer than d. The timer
// runs only inside Read: a client slow to take the data delays the next
// Read without counting against the upstream.
type readTimeoutBody struct {
	rc    io.ReadCloser
	d     time.Duration
	timer *time.Timer
}

func newReadTimeoutBody(rc io.ReadCloser, d time.Duration, fire func()) *readTimeoutBody {
	t := time.AfterFunc(time.Hour, fire)
	t.Stop()
	return &readTimeoutBody{rc: rc, d: d, timer: t}
}

func (b *readTimeoutBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.d)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	return n, err
}

func (b *readTimeoutBody) Close() error {
	b.timer.Stop()
	return b.rc.Close()
}

var (
	errBodyTooLarge = errors.New("request body too large")
	errBodyTimeout  = errors.New("request body: no data within client_body_timeout_ms")
	errSpool        = errors.New("buffering the request body")
)

// clientBody reads the client's request body under the size limit (limit
// < 0: none) and the timeout between two reads, and records which one
// ended it for the error handler, which may run on another goroutine than
// the transport's body writer.
type clientBody struct {
	rc       io.ReadCloser
	limit    int64
	left     int64
	ctl      *http.ResponseController
	timeout  time.Duration
	over     atomic.Bool
	timedOut atomic.Bool
	fail     context.CancelCauseFunc // called with the error that ended the body early

	// The transport reads the body on its own goroutine, which can outlive
	// the handler (an upstream that answers before reading it all): the
	// connection's deadline is touched only while the handler runs
	// (handlerDone), since afterwards the connection may serve the next
	// request.
	armed       atomic.Bool // a read deadline is set on the connection
	handlerDone atomic.Bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.limit >= 0 {
		if b.left < 0 {
			return 0, errBodyTooLarge
		}
		if int64(len(p)) > b.left+1 {
			p = p[:b.left+1]
		}
	}
	// The deadline is per read (nginx's client_body_timeout), so a slow
	// but steady upload passes and a stalled one does not hold on.
	if b.timeout > 0 && !b.handlerDone.Load() && b.ctl.SetReadDeadline(time.Now().Add(b.timeout)) == nil {
		b.armed.Store(true)
	}
	n, err := b.rc.Read(p)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			b.timedOut.Store(true)
			err = fmt.Errorf("%w: %w", errBodyTimeout, err)
		}
		if errors.Is(err, io.EOF) {
			b.disarm()
		} else {
			b.abandon(err)
		}
	}
	if b.limit >= 0 {
		if int64(n) > b.left {
			n = int(b.left)
			b.left = -1
			b.over.Store(true)
			b.abandon(errBodyTooLarge)
			return n, errBodyTooLarge
		}
		b.left -= int64(n)
	}
	return n, err
}

// disarm clears the read deadline once the body is complete: the server
// reads on from the connection (to notice a client that hangs up, and the
// next request), and a deadline left behind would cut that.
func (b *clientBody) disarm() {
	if b.armed.Swap(false) && !b.handlerDone.Load() {
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
}

// abandon gives up on a body that failed (too large, stalled, broken): the
// upstream call ends (fail), and the connection's read deadline is set in
// the past, so that the server, which may try to drain what is left of
// the body before answering (Go 1.24 does, up to 256 KiB), fails at once
// instead of waiting for a stalled client; the answer carries
// Connection: close, so the connection is not reused.
func (b *clientBody) abandon(err error) {
	b.armed.Store(false)
	if !b.handlerDone.Load() {
		_ = b.ctl.SetReadDeadline(time.Unix(1, 0))
	}
	b.fail(err)
}

func (b *clientBody) Close() error {
	b.disarm()
	return b.rc.Close()
}

// spool is a buffered request body: the first bytes in memory, the rest in
// a temporary file.
type spool struct {
	mem      bytes.Reader
	file     *os.File
	unlinked bool // the file's name is already removed
	size     int64
}

// bufferBody reads src (of size bytes, -1 if unknown) to its end, keeping
// up to mem bytes in memory and the rest in a temporary file. The memory
// is what the body needs, at most mem+1 bytes: never doubled by growth,
// since slow clients each hold theirs for as long as they take. An error
// from src is returned as is (the client's: too large, too slow, gone);
// one of the file wraps errSpool.
func bufferBody(src io.Reader, size, mem int64) (*spool, error) {
	capacity := mem + 1
	if size >= 0 && size < mem {
		capacity = size + 1 // +1: reading one more than announced finds the end
	}
	buf := make([]byte, capacity)
	// Not io.ReadFull: it turns an early io.EOF into io.ErrUnexpectedEOF,
	// which is also what the server's body returns for a client that hung
	// up short of its Content-Length; only io.EOF means a complete body.
	n := 0
	for n < len(buf) {
		m, err := src.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			sp := &spool{size: int64(n)}
			sp.mem.Reset(buf[:n])
			return sp, nil
		}
		if err != nil {
			return nil, err
		}
	}
	// More than fits in memory: the rest goes to a file.
	f, err := os.CreateTemp("", "gateway-body-*")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSpool, err)
	}
	sp := &spool{file: f}
	// Unlinked at once where the system allows it, so a crash leaves no
	// file behind; Close removes it otherwise.
	sp.unlinked = os.Remove(f.Name()) == nil
	more, err := io.Copy(spoolWriter{f}, io.MultiReader(bytes.NewReader(buf[:n]), src))
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
		if err != nil {
			err = fmt.Errorf("%w: %w", errSpool, err)
		}
	}
	if err != nil {
		_ = sp.Close()
		return nil, err
	}
	sp.size = more
	return sp, nil
}

// spoolWriter marks the file's write errors, to tell them from the
// client's read errors in io.Copy.
type spoolWriter struct{ f *os.File }

func (w spoolWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %w", errSpool, err)
	}
	return n, err
}

func (s *spool) Read(p []byte) (int, error) {
	if s.file != nil {
		return s.file.Read(p)
	}
	return s.mem.Read(p)
}

func (s *spool) Close() error {
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	if !s.unlinked {
		_ = os.Remove(s.file.Name())
	}
	return err
}

// classifyUpstreamError maps a proxy failure to the status nginx would
// send: 413 for a body over the limit, 408 for a body that stalled, 504
// for an upstream that did not connect or answer in time, 502 for any
// other upstream failure.
func classifyUpstreamError(r *http.Request, err error) (int, string) {
	if st, ok := r.Context().Value(reqStateKey{}).(*reqState); ok && st.body != nil {
		if st.body.over.Load() {
			return http.StatusRequestEntityTooLarge, "body_too_large"
		}
		if st.body.timedOut.Load() {
			return http.StatusRequestTimeout, "client_body_timeout"
		}
	}
	if r.Context().Err() != nil {
		return 499, "client_gone"
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, "timeout"
	}
	return http.StatusBadGateway, "bad_gateway"
}

// dropInvalidHeaders deletes request headers whose names hold anything
// but letters, digits and "-" (and "_" with underscores), as nginx does
// by default (ignore_invalid_headers on, underscores_in_headers off). CGI,
// WSGI and Rack fold "-" and "_" into one HTTP_X_REAL_IP variable (PHP
// folds "." too), so an untrusted client's X_Real_IP would stand in for
// the X-Real-IP this gateway controls, and X_Forwarded_For would be
// appended to its X-Forwarded-For.
func dropInvalidHeaders(h http.Header, underscores bool) {
	for k := range h {
		for i := 0; i < len(k); i++ {
			c := k[i]
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' && underscores {
				continue
			}
			delete(h, k)
			break
		}
	}
}

// forwardingClaims are the request headers by which a proxy tells its
// upstream who the client is, how it connected, or what it asked for
// before a rewrite: client-IP headers, the X-Forwarded-* family and its
// vendors' variants, path overrides, and Via. Frameworks believe them
// (Rack reads X-Forwarded-Ssl and -Port, Spring -Port and -Prefix, Symfony
// X-Original-URL, WebLogic WL-Proxy-Client-IP, many apps True-Client-IP
// or X-Client-IP for the client address), so from a peer outside
// trusted_proxies every one is dropped, and so is every header that
// claimForm recognizes by name (a vendor's next variant); the gateway
// then sets X-Forwarded-For, -Proto, -Host and Forwarded to what it saw.
// Via is dropped too: a client's Via names proxies it never went through
// (the gateway adds none of its own). Canonical names; listed in the
// package doc.
var forwardingClaims = map[string]bool{
	// Client address.
	"X-Forwarded-For": true, "Forwarded": true, "X-Real-Ip": true, "Forwarded-For": true, "X-Forwarded": true,
	"X-Original-Forwarded-For": true, "True-Client-Ip": true, "X-Client-Ip": true, "Client-Ip": true,
	"X-Cluster-Client-Ip": true, "Cf-Connecting-Ip": true, "Cf-Connecting-Ipv6": true, "Fastly-Client-Ip": true,
	"X-Originating-Ip": true, "X-Remote-Ip": true, "X-Remote-Addr": true, "X-Proxyuser-Ip": true,
	"X-Envoy-External-Address": true, "X-Appengine-User-Ip": true, "X-Azure-Clientip": true, "X-Azure-Socketip": true,
	"Proxy-Client-Ip": true, "Wl-Proxy-Client-Ip": true, "X-Arr-Clientip": true, "Remote-Addr": true,
	"X-Original-Remote-Addr": true, "X-Real-Client-Ip": true, "Fly-Client-Ip": true, "Do-Connecting-Ip": true,
	"X-Nf-Client-Connection-Ip": true, "X-Vercel-Forwarded-For": true, "Ali-Cdn-Real-Ip": true,
	"X-Appengine-Remote-Addr": true, "Cloudfront-Viewer-Address": true, "X-Client-Port": true, "X-Real-Port": true,
	// Scheme, host, port, prefix, the proxy itself, the client's certificate.
	"X-Forwarded-Proto": true, "X-Forwarded-Host": true, "X-Forwarded-Port": true, "X-Forwarded-Prefix": true,
	"X-Forwarded-Server": true, "X-Forwarded-Ssl": true, "X-Forwarded-Scheme": true, "X-Forwarded-Protocol": true,
	"X-Forwarded-Uri": true, "X-Forwarded-Path": true, "X-Forwarded-By": true, "X-Forwarded-Client-Cert": true,
	"X-Original-Host": true, "X-Host": true, "X-Url-Scheme": true, "X-Scheme": true, "Front-End-Https": true,
	"X-Arr-Ssl": true, "Cf-Visitor": true, "Cloudfront-Forwarded-Proto": true, "Forwarded-Proto": true,
	"Forwarded-Host": true, "X-Forwarded-Hostname": true, "X-Http-Host-Override": true, "X-Real-Host": true,
	"X-Envoy-Internal": true, "Via": true,
	// Path overrides (IIS URL Rewrite, Symfony, Laminas, Envoy route by them).
	"X-Original-Url": true, "X-Rewrite-Url": true, "X-Original-Uri": true, "X-Envoy-Original-Path": true,
}

// claimForm reports whether a header name is a forwarding claim: listed
// in forwardingClaims, or holding, whatever its vendor prefix, one of the
// fragments every variant so far has used: "forwarded", "client-ip" (or
// "clientip"), "real-ip", "remote-addr", "remote-ip", "connecting-ip",
// "original-url" or "original-uri". "_" counts as "-" (kept only with
// underscores_in_headers, and read as the "-" name by CGI, WSGI and
// Rack). It allocates only for names with "_" or over 128 bytes.
func claimForm(k string) bool {
	if strings.IndexByte(k, '_') >= 0 {
		k = http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
	}
	if forwardingClaims[k] {
		return true
	}
	var buf [128]byte
	n := buf[:0]
	if len(k) > len(buf) {
		n = make([]byte, 0, len(k))
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		n = append(n, c)
	}
	if bytes.Contains(n, []byte("forwarded")) || bytes.Contains(n, []byte("remote-addr")) ||
		bytes.Contains(n, []byte("original-url")) || bytes.Contains(n, []byte("original-uri")) {
		return true
	}
	if !bytes.Contains(n, []byte("ip")) {
		return false // the rest all end in "ip"
	}
	return bytes.Contains(n, []byte("client-ip")) || bytes.Contains(n, []byte("clientip")) ||
		bytes.Contains(n, []byte("real-ip")) || bytes.Contains(n, []byte("remote-ip")) ||
		bytes.Contains(n, []byte("connecting-ip"))
}

// dropForwardingClaims deletes every header of h that claimForm
// recognizes.
func dropForwardingClaims(h http.Header) {
	for k := range h {
		if claimForm(k) {
			delete(h, k)
		}
	}
}

// forwardHeaders sets out's forwarding headers. A peer inside trusted is a
// proxy whose X-Forwarded-*, Forwarded and X-Real-IP are passed on (this
// hop is appended to X-Forwarded-For and Forwarded; its proto and host
// claims are kept), and so are its other forwardingClaims; any other peer
// is a client whose claims are all dropped, so the upstream sees only
// what this gateway observed.
//
// ReverseProxy (Rewrite mode) has already removed Forwarded and
// X-Forwarded-For, -Host and -Proto from out; X-Real-IP it leaves, so it
// is removed here.
func forwardHeaders(out, in *http.Request, trusted []netip.Prefix) {
	peer := peerAddr(in.RemoteAddr)
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	h := out.Header
	h.Del("X-Real-Ip")
	node := forwardedNode(peer)
	elem := "for=" + node + ";host=" + quoteForwarded(in.Host) + ";proto=" + proto
	if peer.IsValid() && isTrusted(peer, trusted) {
		ih := in.Header
		if v := ih.Values("X-Real-Ip"); len(v) > 0 {
			h["X-Real-Ip"] = v
		}
		if prior := ih.Values("X-Forwarded-For"); len(prior) > 0 {
			h.Set("X-Forwarded-For", strings.Join(prior, ", ")+", "+peer.String())
		} else {
			h.Set("X-Forwarded-For", peer.String())
		}
		if v := ih.Get("X-Forwarded-Proto"); v != "" {
			h.Set("X-Forwarded-Proto", v)
		} else {
			h.Set("X-Forwarded-Proto", proto)
		}
		if v := ih.Get("X-Forwarded-Host"); v != "" {
			h.Set("X-Forwarded-Host", v)
		} else {
			h.Set("X-Forwarded-Host", in.Host)
		}
		if prior := ih.Values("Forwarded"); len(prior) > 0 {
			h.Set("Forwarded", strings.Join(prior, ", ")+", "+elem)
		} else {
			h.Set("Forwarded", elem)
		}
		return
	}
	dropForwardingClaims(h)
	// The four values share one backing array (one allocation, not one
	// per Set); each header gets a slice capped at its own element, so an
	// Add to one reallocates instead of writing into its neighbour.
	v := make([]string, 4)
	v[0], v[1], v[2] = proto, in.Host, elem
	h["X-Forwarded-Proto"] = v[0:1:1]
	h["X-Forwarded-Host"] = v[1:2:2]
	h["Forwarded"] = v[2:3:3]
	if peer.IsValid() {
		v[3] = peer.String()
		h["X-Forwarded-For"] = v[3:4:4]
	} else {
		delete(h, "X-Forwarded-For")
	}
}

// peerAddr is the socket peer's address, unmapped and without a zone: an
// IPv6 zone ("%eth0") names an interface of this host, means nothing to
// the upstream, and is no valid RFC 7239 node.
func peerAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap().WithZone("")
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedNode formats an RFC 7239 node: IPv6 in quoted brackets, an
// unknown peer as "unknown".
func forwardedNode(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is6():
		return `"[` + a.String() + `]"`
	}
	return a.String()
}

// quoteForwarded writes a Forwarded value as a quoted-string. net/http has
// already refused a Host with control characters; quotes and backslashes
// are escaped anyway. A host without either (every valid one) costs one
// concatenation; the escaping replacer is built once, not per request
// (building it allocated a 256-entry table each time).
func quoteForwarded(s string) string {
	if strings.IndexByte(s, '\\') < 0 && strings.IndexByte(s, '"') < 0 {
		return `"` + s + `"`
	}
	return `"` + forwardedEscaper.Replace(s) + `"`
}

var forwardedEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
