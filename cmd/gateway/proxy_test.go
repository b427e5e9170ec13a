package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newTestGateway serves yamlCfg in front of upstream in this process.
func newTestGateway(t testing.TB, yamlCfg string, upstream string) (*gateway, *httptest.Server) {
	t.Helper()
	return newTestGatewayLog(t, yamlCfg, upstream, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// newTestGatewayLog is newTestGateway logging to log.
func newTestGatewayLog(t testing.TB, yamlCfg, upstream string, log *slog.Logger) (*gateway, *httptest.Server) {
	t.Helper()
	c, err := parseConfig([]byte(yamlCfg))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(u, log, nil)
	g.metrics = newMetrics(func() float64 { return float64(g.inflight.count()) }, g)
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.Close()
		g.close()
	})
	return g, srv
}

// TestUpstreamTimeoutIs504: an upstream that does not
// answer within response_header_timeout_ms gets 504, not a wait as long as
// the upstream likes. The upstream here never answers until the test ends,
// so only the gateway's timeout can end the request.
func TestUpstreamTimeoutIs504(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	const timeout = 300 * time.Millisecond
	g, gw := newTestGateway(t, minimal+"proxy:\n  response_header_timeout_ms: 300\n", up.URL)
	start := time.Now()
	res, err := http.Get(gw.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	took := time.Since(start)
	if res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", res.StatusCode)
	}
	// Lower bound exact (the timeout must have run), upper generous.
	if took < timeout || took > timeout+failAfter/4 {
		t.Errorf("504 after %v, want about %v", took, timeout)
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_upstream_errors_total", `kind="timeout"`); got != 1 {
		t.Errorf("upstream timeout counter %v, want 1", got)
	}
}

func TestUpstreamDownIs502(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	addr := up.URL
	up.Close() // nothing listens there now
	_, gw := newTestGateway(t, minimal, addr)
	res, err := http.Get(gw.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
}

// TestBodyLimit: a body over max_body_bytes is
// refused with 413, whether Content-Length announces it (refused before
// the upstream is contacted) or a chunked body runs past it.
func TestBodyLimit(t *testing.T) {
	var hits atomic.Int64
	var lastLen atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		n, err := io.Copy(io.Discard, r.Body)
		lastLen.Store(n)
		if err != nil {
			// The gateway cut the body: the upstream sees a broken
			// request, the client gets the gateway's 413.
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	_, gw := newTestGateway(t, minimal+"proxy:\n  max_body_bytes: 1000\n", up.URL)

	post := func(body io.Reader, size int64) int {
		t.Helper()
		req, err := http.NewRequest("POST", gw.URL+"/upload", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if got := post(bytes.NewReader(make([]byte, 1000)), 1000); got != 200 {
		t.Errorf("exactly the limit: status %d, want 200", got)
	}
	if n := lastLen.Load(); n != 1000 {
		t.Errorf("upstream read %d bytes, want 1000", n)
	}
	before := hits.Load()
	if got := post(bytes.NewReader(make([]byte, 1001)), 1001); got != http.StatusRequestEntityTooLarge {
		t.Errorf("Content-Length over the limit: status %d, want 413", got)
	}
	if hits.Load() != before {
		t.Error("a body announced over the limit reached the upstream")
	}
	// Chunked (ContentLength -1): only reading finds out.
	if got := post(io.MultiReader(strings.NewReader(strings.Repeat("x", 5000))), -1); got != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body over the limit: status %d, want 413", got)
	}
	if got := post(io.MultiReader(strings.NewReader(strings.Repeat("x", 999))), -1); got != 200 {
		t.Errorf("chunked body under the limit: status %d, want 200", got)
	}
}

// TestForwardingHeaders: the gateway passes forwarding claims only from trusted proxies.
func TestForwardingHeaders(t *testing.T) {
	var got atomic.Pointer[http.Header]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		got.Store(&h)
	}))
	defer up.Close()
	claims := map[string]string{
		"X-Forwarded-For":   "203.0.113.7",
		"X-Forwarded-Proto": "https",
		"X-Forwarded-Host":  "api.example.com",
		"Forwarded":         `for=203.0.113.7;proto=https`,
		"X-Real-Ip":         "203.0.113.7",
	}
	send := func(gw string) http.Header {
		t.Helper()
		req, _ := http.NewRequest("GET", gw+"/x", nil)
		for k, v := range claims {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		return *got.Load()
	}

	t.Run("untrusted client", func(t *testing.T) {
		_, gw := newTestGateway(t, minimal, up.URL)
		h := send(gw.URL)
		host := strings.TrimPrefix(gw.URL, "http://")
		want := map[string]string{
			"X-Forwarded-For":   "127.0.0.1",
			"X-Forwarded-Proto": "http",
			"X-Forwarded-Host":  host,
			"Forwarded":         `for=127.0.0.1;host="` + host + `";proto=http`,
			"X-Real-Ip":         "",
		}
		for k, v := range want {
			if g := strings.Join(h.Values(k), " | "); g != v {
				t.Errorf("%s = %q, want %q (the client's claim must not pass)", k, g, v)
			}
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		_, gw := newTestGateway(t, minimal+"  trusted_proxies: [127.0.0.1]\n", up.URL)
		h := send(gw.URL)
		host := strings.TrimPrefix(gw.URL, "http://")
		want := map[string]string{
			"X-Forwarded-For":   "203.0.113.7, 127.0.0.1",
			"X-Forwarded-Proto": "https",
			"X-Forwarded-Host":  "api.example.com",
			"Forwarded":         `for=203.0.113.7;proto=https, for=127.0.0.1;host="` + host + `";proto=http`,
			"X-Real-Ip":         "203.0.113.7",
		}
		for k, v := range want {
			if g := strings.Join(h.Values(k), " | "); g != v {
				t.Errorf("%s = %q, want %q", k, g, v)
			}
		}
	})
}

// TestUntrustedForwardingClaimsNeverReachTheUpstream: forwarding headers
// outside the five the gateway sets (X-Forwarded-Port, -Prefix, -Server,
// -Ssl, True-Client-IP, X-Client-IP and the rest) reached the upstream as
// the client sent them, and frameworks believe them (Rack reads
// X-Forwarded-Ssl and -Port, Spring -Port and -Prefix). From an untrusted
// client none passes, also spelled with "_" where underscores pass; from a
// trusted proxy they pass as sent.
func TestUntrustedForwardingClaimsNeverReachTheUpstream(t *testing.T) {
	var got atomic.Pointer[http.Header]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		got.Store(&h)
	}))
	defer up.Close()
	claims := []string{
		"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Forwarded-Ssl", "True-Client-IP",
		"X-Client-IP", "X-Cluster-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Original-Forwarded-For",
		"X-Forwarded-Scheme", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-IP", "Forwarded", "Client-IP",
		"X-Original-URL", "X-Rewrite-URL", "Front-End-Https", "X-Url-Scheme", "X-Forwarded-Client-Cert",
	}
	send := func(gw string) http.Header {
		t.Helper()
		req, _ := http.NewRequest("GET", gw+"/x", nil)
		for _, k := range claims {
			req.Header.Set(k, "claim")
		}
		req.Header["X_Forwarded_Port"] = []string{"claim"}
		req.Header["True_Client_IP"] = []string{"claim"}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		return *got.Load()
	}
	t.Run("untrusted client", func(t *testing.T) {
		_, gw := newTestGateway(t, minimal+"proxy:\n  underscores_in_headers: true\n", up.URL)
		for k, v := range send(gw.URL) {
			for _, s := range v {
				if strings.Contains(s, "claim") {
					t.Errorf("%s: %q reached the upstream", k, s)
				}
			}
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		_, gw := newTestGateway(t, minimal+"  trusted_proxies: [127.0.0.1]\n", up.URL)
		h := send(gw.URL)
		for _, k := range []string{"X-Forwarded-Port", "X-Forwarded-Prefix", "True-Client-IP", "X-Original-URL"} {
			if v := h.Get(k); v != "claim" {
				t.Errorf("%s from a trusted proxy: %q, want it passed on", k, v)
			}
		}
	})
}

func TestForwardedNode(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:80":       "192.0.2.1",
		"[2001:db8::1]:80":   `"[2001:db8::1]"`,
		"[::ffff:1.2.3.4]:5": "1.2.3.4",
		"@unix":              "unknown",
	} {
		if got := forwardedNode(peerAddr(in)); got != want {
			t.Errorf("forwardedNode(%q) = %s, want %s", in, got, want)
		}
	}
	if got := quoteForwarded(`a"b\c`); got != `"a\"b\\c"` {
		t.Errorf("quoteForwarded = %s", got)
	}
}

// testutilCounter reads one series of a counter from the gateway's
// registry; labels is its label set as Prometheus prints it.
func testutilCounter(t *testing.T, m *metrics, name, labels string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, name+"{"+labels+"} ") {
			var v float64
			if _, err := fmt.Sscan(strings.TrimPrefix(line, name+"{"+labels+"} "), &v); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s{%s} in /metrics", name, labels)
	return 0
}

// TestReloadUnderLoad swaps configurations while requests run (go test
// -race): every request is answered by one whole generation, nothing
// panics, and once the gateway is closed every limiter and client has
// been released exactly once.
func TestReloadUnderLoad(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfgA := minimal + "  rules:\n    - name: r\n      path_prefix: /r\n      max_requests: 3\n"
	cfgB := minimal + "  rules:\n    - name: r\n      path_prefix: /r\n      max_requests: 4\n"
	g, gw := newTestGateway(t, cfgA, up.URL)
	a, err := parseConfig([]byte(cfgA))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseConfig([]byte(cfgB))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := http.Get(gw.URL + "/r/x")
				if err != nil {
					bad.Store(err.Error())
					return
				}
				res.Body.Close()
				pol := res.Header.Get("RateLimit-Policy")
				if (res.StatusCode != 200 && res.StatusCode != 429) || (pol != `"r";q=3;w=1` && pol != `"r";q=4;w=1`) {
					bad.Store(res.Status + " " + pol)
				}
			}
		}()
	}
	for i := 0; i < 40; i++ {
		c := a
		if i%2 == 0 {
			c = b
		}
		if err := g.load(c); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Errorf("a request saw %v", v)
	}
	gw.Close()
	g.close()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.resources) != 0 {
		t.Errorf("%d resources still held after close", len(g.resources))
	}
}

// TestUpgradeAndStreamingPass: the gateway's wrappers (access log, body
// limit, middleware) keep what the bare proxy did: a protocol upgrade
// (websocket-style, hijacked both ends) and a flushed stream pass through.
func TestUpgradeAndStreamingPass(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "websocket" {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			_ = brw.Flush()
			line, _ := brw.ReadString('\n')
			_, _ = brw.WriteString("echo:" + line)
			_ = brw.Flush()
			return
		}
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "chunk %d\n", i)
			_ = http.NewResponseController(w).Flush()
		}
	}))
	defer up.Close()
	_, gw := newTestGateway(t, minimal+"log:\n  access: true\n", up.URL)

	res, err := http.Get(gw.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "chunk 0\nchunk 1\nchunk 2\n" {
		t.Errorf("stream body %q", body)
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: status %d", resp.StatusCode)
	}
	if resp.Header.Get("RateLimit-Policy") == "" {
		t.Error("upgrade response lacks the rate-limit headers")
	}
	_, _ = io.WriteString(conn, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo:hello\n" {
		t.Errorf("through the upgraded connection: %q, %v", line, err)
	}
}

func TestTransportFromConfig(t *testing.T) {
	c, err := parseConfig([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(c.proxy)
	if tr.ResponseHeaderTimeout != 60*time.Second || tr.IdleConnTimeout != 90*time.Second || c.proxy.dialTimeout != 60*time.Second || c.proxy.maxBody != 1<<20 {
		t.Errorf("defaults: header %v idle %v dial %v body %d; want nginx-like 60s, 90s, 60s, 1 MiB",
			tr.ResponseHeaderTimeout, tr.IdleConnTimeout, c.proxy.dialTimeout, c.proxy.maxBody)
	}
	if c.server.readHeaderTimeout != 60*time.Second || c.server.idleTimeout != 75*time.Second {
		t.Errorf("server defaults %+v", c.server)
	}
	c, err = parseConfig([]byte(minimal + "proxy:\n  dial_timeout_ms: 1500\n  response_header_timeout_ms: 2500\n  idle_conn_timeout_ms: 3500\n  max_body_bytes: -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !tr.DisableCompression || tr.ForceAttemptHTTP2 {
		t.Errorf("DisableCompression %v, ForceAttemptHTTP2 %v; want the client's Accept-Encoding passed as sent, and HTTP/1.1 connections to the upstream", tr.DisableCompression, tr.ForceAttemptHTTP2)
	}
	tr = newTransport(c.proxy)
	if tr.ResponseHeaderTimeout != 2500*time.Millisecond || tr.IdleConnTimeout != 3500*time.Millisecond || c.proxy.dialTimeout != 1500*time.Millisecond || c.proxy.maxBody != -1 {
		t.Errorf("configured: header %v idle %v dial %v body %d", tr.ResponseHeaderTimeout, tr.IdleConnTimeout, c.proxy.dialTimeout, c.proxy.maxBody)
	}
}

// TestUpstreamRateLimitHeadersDoNotConflict at the
// gateway: an upstream that sets its own X-RateLimit-Limit does not give
// the client two values; upstream_headers chooses whose wins.
func TestUpstreamRateLimitHeadersDoNotConflict(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("RateLimit-Policy", `"upstream";q=999;w=1`)
	}))
	defer up.Close()
	for _, c := range []struct{ mode, limit string }{{"ours", "10"}, {"theirs", "999"}} {
		_, gw := newTestGateway(t, minimal+"  upstream_headers: "+c.mode+"\n", up.URL)
		res := do(t, "GET", gw.URL+"/", nil)
		if got := res.Header.Values("X-RateLimit-Limit"); len(got) != 1 || got[0] != c.limit {
			t.Errorf("upstream_headers %s: X-RateLimit-Limit %q, want one value %s", c.mode, got, c.limit)
		}
		if got := res.Header.Values("RateLimit-Policy"); len(got) != 1 {
			t.Errorf("upstream_headers %s: RateLimit-Policy %q, want one value", c.mode, got)
		}
	}
}

// TestUnderscoreHeadersNeverReachTheUpstream: a CGI/WSGI upstream reads
// X_Real_IP as X-Real-IP; an untrusted client's underscore spellings must
// not pass (nginx drops them by default).
func TestUnderscoreHeadersNeverReachTheUpstream(t *testing.T) {
	up, srv := newCountingUpstream(t)
	claims := map[string]string{"X_Real_IP": "6.6.6.6", "X_Forwarded_For": "6.6.6.6", "X_Forwarded_Proto": "https", "X-Real-IP": "7.7.7.7",
		"X.Real.IP": "8.8.8.8"} // PHP folds "." too; nginx drops such names (ignore_invalid_headers)
	_, gw := newTestGateway(t, minimal, srv.URL)
	do(t, "GET", gw.URL+"/", claims)
	up.mu.Lock()
	h := up.last
	up.mu.Unlock()
	for k := range h {
		if strings.ContainsAny(k, "_.") {
			t.Errorf("upstream got %s: %q", k, h[k])
		}
	}
	if h.Get("X-Real-Ip") != "" || h.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("X-Real-IP %q X-Forwarded-For %q", h.Get("X-Real-Ip"), h.Get("X-Forwarded-For"))
	}
	_, gw = newTestGateway(t, minimal+"proxy:\n  underscores_in_headers: true\n", srv.URL)
	do(t, "GET", gw.URL+"/", map[string]string{"X_Trace": "1"})
	up.mu.Lock()
	h = up.last
	up.mu.Unlock()
	if h.Get("X_trace") == "" {
		t.Errorf("underscores_in_headers: true dropped X_Trace: %v", h)
	}
}

// TestZoneIDsNeverForwarded: an IPv6 zone names an interface of this
// host; it leaked into X-Forwarded-For and made Forwarded invalid RFC 7239.
func TestZoneIDsNeverForwarded(t *testing.T) {
	in := httptest.NewRequest("GET", "http://gw/x", nil)
	in.RemoteAddr = "[fe80::99%lo]:4711"
	out := in.Clone(in.Context())
	forwardHeaders(out, in, nil)
	if got := out.Header.Get("X-Forwarded-For"); got != "fe80::99" {
		t.Errorf("X-Forwarded-For %q", got)
	}
	if got := out.Header.Get("Forwarded"); !strings.HasPrefix(got, `for="[fe80::99]";`) {
		t.Errorf("Forwarded %q", got)
	}
	// A trusted proxy on a link-local address is trusted with its zone.
	out = in.Clone(in.Context())
	in.Header.Set("X-Forwarded-For", "203.0.113.9")
	forwardHeaders(out, in, []netip.Prefix{netip.MustParsePrefix("fe80::/10")})
	if got := out.Header.Get("X-Forwarded-For"); got != "203.0.113.9, fe80::99" {
		t.Errorf("through a zoned trusted proxy: X-Forwarded-For %q", got)
	}
}

// TestUpstreamTrailersAndEarlyHintsPassThroughTheGateway: the gateway's
// own proxy relays a 103 and announced trailers; the final response keeps
// our headers and no rate-limit header goes out as a trailer.
func TestUpstreamTrailersAndEarlyHintsPassThroughTheGateway(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Trailer", "X-RateLimit-Limit, RateLimit, X-Sum")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "ok")
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("RateLimit", `"up";r=1`)
		w.Header().Set("X-Sum", "1")
	}))
	defer up.Close()
	for _, mode := range []string{"ours", "theirs"} {
		_, gw := newTestGateway(t, minimal+"  upstream_headers: "+mode+"\n", up.URL)
		req, _ := http.NewRequest("GET", gw.URL+"/", nil)
		req.Header.Set("Origin", "https://app.example")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if res.Header.Get("RateLimit") == "" || res.Header.Get("Access-Control-Expose-Headers") == "" {
			t.Errorf("%s: final response lost our headers: %v", mode, res.Header)
		}
		for k := range res.Trailer {
			if strings.Contains(strings.ToLower(k), "ratelimit") {
				t.Errorf("%s: trailer %s %q", mode, k, res.Trailer[k])
			}
		}
		if res.Trailer.Get("X-Sum") != "1" {
			t.Errorf("%s: other trailers lost: %v", mode, res.Trailer)
		}
	}
}

// TestUpstreamGetsTheClientsAcceptEncoding: the gateway passes the
// client's Accept-Encoding as sent, as nginx does. Go's transport, left
// to itself, asked the upstream for gzip on behalf of a client that did
// not, then inflated the answer on the gateway's CPU; and a compressed
// answer a client asked for must reach it byte for byte, still marked
// gzip.
func TestUpstreamGetsTheClientsAcceptEncoding(t *testing.T) {
	var plain bytes.Buffer
	for i := range 2000 {
		fmt.Fprintf(&plain, "line %d of a compressible body\n", i)
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(plain.Bytes())
	_ = zw.Close()
	var seen atomic.Pointer[string]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ae := strings.Join(r.Header.Values("Accept-Encoding"), ", ")
		seen.Store(&ae)
		if strings.Contains(ae, "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(zipped.Bytes())
			return
		}
		_, _ = w.Write(plain.Bytes())
	}))
	defer up.Close()
	_, gw := newTestGateway(t, minimal, up.URL)
	// The client's own transport must not add or strip anything either.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for _, tc := range []struct {
		acceptEncoding string // sent by the client; "" sends none
		wantEncoding   string // Content-Encoding the client gets
		wantBody       []byte
	}{
		{"", "", plain.Bytes()},
		{"br", "", plain.Bytes()},
		{"gzip", "gzip", zipped.Bytes()},
	} {
		req, _ := http.NewRequest("GET", gw.URL+"/x", nil)
		if tc.acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", tc.acceptEncoding)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := *seen.Load(); got != tc.acceptEncoding {
			t.Errorf("client sent Accept-Encoding %q; the upstream got %q", tc.acceptEncoding, got)
		}
		if got := res.Header.Get("Content-Encoding"); got != tc.wantEncoding {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", tc.acceptEncoding, got, tc.wantEncoding)
		}
		if !bytes.Equal(body, tc.wantBody) {
			t.Errorf("Accept-Encoding %q: body of %d bytes differs from the upstream's %d", tc.acceptEncoding, len(body), len(tc.wantBody))
		}
	}
}

// TestConcurrentLargeResponsesKeepTheirOwnBytes: response bodies are
// copied through buffers that one response returns to a pool and another
// takes; under concurrency (and -race) every client must still get its
// own body, whole, with nothing of another's.
func TestConcurrentLargeResponsesKeepTheirOwnBytes(t *testing.T) {
	const size = 3*proxyBufSize + 123 // several buffer-fulls and a tail
	body := func(id string) []byte {
		return bytes.Repeat([]byte(id), size/len(id)+1)[:size]
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := body(r.URL.Query().Get("id"))
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		}
		// Written in odd pieces, flushed, so reads come in many sizes.
		for off := 0; off < len(b); off += 7919 {
			_, _ = w.Write(b[off:min(off+7919, len(b))])
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	_, gw := newTestGateway(t, benchConfig, up.URL) // nothing refused
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				id := fmt.Sprintf("<client %d request %d>", g, i)
				u := gw.URL + "/big?id=" + url.QueryEscape(id)
				if i%2 == 1 {
					u += "&chunked=1"
				}
				res, err := http.Get(u)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil {
					t.Error(err)
					return
				}
				if res.StatusCode != 200 {
					t.Errorf("%s: status %d", id, res.StatusCode)
					return
				}
				if !bytes.Equal(got, body(id)) {
					t.Errorf("%s: got %d bytes, not the upstream's %d for this request", id, len(got), size)
				}
			}
		}()
	}
	wg.Wait()
}

// The pool hands out buffers of ReverseProxy's size and takes back only
// those.
func TestCopyBufferPool(t *testing.T) {
	var p bufferPool
	b := p.Get()
	if len(b) != proxyBufSize {
		t.Fatalf("Get: %d bytes, want %d", len(b), proxyBufSize)
	}
	p.Put(b[:10]) // a resliced buffer comes back whole
	p.Put(make([]byte, 100))
	for range 4 {
		if got := p.Get(); len(got) != proxyBufSize {
			t.Fatalf("Get after Put: %d bytes, want %d", len(got), proxyBufSize)
		}
	}
}

// benchConfig is one default rule per client IP that refuses nothing, as
// bench/gateway-vs-nginx.sh configures the gateway.
const benchConfig = `
rate_limiting:
  sliding_window:
    window_size_ms: 1000
    max_requests: 1000000
  algorithm: counter
  key: ip
server:
  max_connections_per_ip: -1
log:
  deny_sample: -1
`

// discardWriter is a ResponseWriter that keeps the status and drops the
// body; its header map is cleared between requests, as the server's is
// made afresh for each.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(c int) {
	if w.code == 0 {
		w.code = c
	}
}

// The server's writer supports deadlines, which the gateway sets around
// every write; without these, each attempt would build an error.
func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }
func (w *discardWriter) SetReadDeadline(time.Time) error  { return nil }

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// BenchmarkProxy is the gateway's handler (the middleware, then the
// reverse proxy) called directly, in front of an upstream on loopback
// that answers 200 "ok\n" (body=small) or 64 KiB (body=64KiB): the cost
// of one proxied request on the gateway's side, without the client's
// connection. The upstream runs in this process, so its work is in the
// figures too; allocs/op and B/op are what to compare before and after a
// change to the proxy.
func BenchmarkProxy(b *testing.B) {
	for _, bc := range []struct {
		name string
		body string
	}{{"body=small", "ok\n"}, {"body=64KiB", strings.Repeat("x", 64<<10)}} {
		b.Run(bc.name, func(b *testing.B) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				_, _ = io.WriteString(w, bc.body)
			}))
			defer up.Close()
			g, _ := newTestGateway(b, benchConfig, up.URL)
			req := httptest.NewRequest(http.MethodGet, "/api/users", nil)
			req.RemoteAddr = "192.0.2.1:4711"
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				clear(w.h)
				w.code = 0
				g.ServeHTTP(w, req)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// BenchmarkUpstreamDirect is BenchmarkProxy's round trip without the
// gateway: an http.Client straight at the same kind of upstream, the
// baseline the proxy's figures are read against.
func BenchmarkUpstreamDirect(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	}))
	defer up.Close()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.Get(up.URL + "/api/users")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

// A request that reaches the handler after close released the last
// configuration (the server still finishing a connection as the gateway
// stops) gets 503, not a nil-pointer panic in the handler.
func TestRequestAfterCloseIs503(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	g, _ := newTestGateway(t, minimal, up.URL)
	g.close()
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://gw.example/x", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status after close = %d, want 503", rec.Code)
	}
	if got := rec.Header().Get("Connection"); got != "close" {
		t.Errorf("Connection = %q after close, want close", got)
	}
}
