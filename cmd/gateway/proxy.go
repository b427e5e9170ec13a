package main

import (
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
	"strings"
	"sync/atomic"
	"time"
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
	return tr
}

// proxy is the upstream side of one generation: the reverse proxy, with
// the request body limit in front of it.
type proxy struct {
	rp      *httputil.ReverseProxy
	tr      *http.Transport
	maxBody int64
}

func newProxy(u *url.URL, c *config, log *slog.Logger, m *metrics) *proxy {
	tr := newTransport(c.proxy)
	trusted := c.trusted
	p := &proxy{tr: tr, maxBody: c.proxy.maxBody}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			forwardHeaders(pr.Out, pr.In, trusted)
		},
		Transport: tr,
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
			http.Error(w, fmt.Sprintf("%d %s", status, strings.ToLower(http.StatusText(status))), status)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return p
}

type bodyLimitKey struct{}

// ServeHTTP refuses a body over the limit with 413: at once when
// Content-Length says so, otherwise when reading it passes the limit (the
// upstream then sees its request cut short and the client gets 413).
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.maxBody >= 0 && r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength > p.maxBody {
			// Do not read the body: the server closes the connection
			// after the response instead of draining megabytes.
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("413 request body larger than %d bytes", p.maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		lb := &limitedBody{rc: r.Body, left: p.maxBody}
		r = r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, lb))
		r.Body = lb
	}
	p.rp.ServeHTTP(w, r)
}

// limitedBody reads at most left bytes; one more is an error, and over
// records it so the error handler answers 413 rather than 502.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	over atomic.Bool // read by the error handler, which may run on another goroutine than the transport's body writer
}

var errBodyTooLarge = errors.New("request body too large")

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.left = -1
		b.over.Store(true)
		return n, errBodyTooLarge
	}
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// classifyUpstreamError maps a proxy failure to the status nginx would
// send: 413 for a body over the limit, 504 for an upstream that did not
// connect or answer in time, 502 for any other upstream failure.
func classifyUpstreamError(r *http.Request, err error) (int, string) {
	if lb, ok := r.Context().Value(bodyLimitKey{}).(*limitedBody); ok && lb.over.Load() {
		return http.StatusRequestEntityTooLarge, "body_too_large"
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

// forwardHeaders sets out's forwarding headers. A peer inside trusted is a
// proxy whose X-Forwarded-*, Forwarded and X-Real-IP are passed on (this
// hop is appended to X-Forwarded-For and Forwarded; its proto and host
// claims are kept); any other peer is a client whose claims are dropped,
// so the upstream sees only what this gateway observed.
//
// ReverseProxy (Rewrite mode) has already removed Forwarded and
// X-Forwarded-* from out; X-Real-IP it leaves, so it is removed here.
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
	if peer.IsValid() {
		h.Set("X-Forwarded-For", peer.String())
	} else {
		h.Del("X-Forwarded-For")
	}
	h.Set("X-Forwarded-Proto", proto)
	h.Set("X-Forwarded-Host", in.Host)
	h.Set("Forwarded", elem)
}

func peerAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
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
// are escaped anyway.
func quoteForwarded(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}
