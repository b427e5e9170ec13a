package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPathOverrideFromTrustedProxyVoidsExemption: a trusted proxy passes
// X-Original-URL on to the upstream (IIS and Symfony route by it), so
// "GET /healthz" carrying "X-Original-URL: /admin" reaches /admin there;
// it must be limited like any other request, not exempt.
func TestPathOverrideFromTrustedProxyVoidsExemption(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, minimal+"  trusted_proxies: [127.0.0.1]\n  exempt:\n    paths: [/healthz]\n", srv.URL)
	host := strings.TrimPrefix(gw.URL, "http://")
	if res := rawRequest(t, host, "GET", "/healthz"); res.Header.Get("RateLimit-Policy") != "" {
		t.Fatalf("GET /healthz: limited (%q), want exempt", res.Header.Get("RateLimit-Policy"))
	}
	for _, h := range []string{"X-Original-URL: /admin", "X-Rewrite-URL: /admin"} {
		res := rawRequest(t, host, "GET", "/healthz", h)
		if res.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("GET /healthz with %s from a trusted proxy: exempt, want limited", h)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if got := up.last.Get("X-Rewrite-Url"); got != "/admin" {
		t.Errorf("the trusted proxy's X-Rewrite-URL reached the upstream as %q, want it passed on", got)
	}
}

// TestOnlyAllowedUpgradesPass: "Upgrade: h2c" made a lenient upstream
// switch protocols, and ReverseProxy copied bytes both ways past every
// rule. Only the upgrades in proxy.upgrades (websocket by default) reach
// the upstream; others are removed, so the request is proxied as a plain
// one, and an upstream that answers 101 anyway gets 502.
func TestOnlyAllowedUpgradesPass(t *testing.T) {
	var sawUpgrade, sawSettings atomic.Value
	// lenient switches protocols for any Upgrade; always switches even
	// without one.
	newUpstream := func(always bool) *httptest.Server {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sawUpgrade.Store(r.Header.Get("Upgrade"))
			sawSettings.Store(r.Header.Get("Http2-Settings"))
			proto := r.Header.Get("Upgrade")
			if proto == "" && !always {
				_, _ = io.WriteString(w, "plain")
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(io.Discard, brw)
		}))
		t.Cleanup(up.Close)
		return up
	}
	ask := func(gw, upgrade string) int {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: %s\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", upgrade)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("Upgrade: %s: %v", upgrade, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	_, gw := newTestGateway(t, minimal, newUpstream(false).URL)
	for _, proto := range []string{"h2c", "H2C", "websocket, h2c", "foo/1"} {
		if code := ask(gw.URL, proto); code != 200 || sawUpgrade.Load() != "" {
			t.Errorf("Upgrade: %s: %d with Upgrade %q at the upstream, want 200 and none", proto, code, sawUpgrade.Load())
		}
		if s := sawSettings.Load(); s != "" {
			t.Errorf("Upgrade: %s: HTTP2-Settings %q reached the upstream", proto, s)
		}
	}
	if code := ask(gw.URL, "websocket"); code != 101 || sawUpgrade.Load() != "websocket" {
		t.Errorf("Upgrade: websocket: %d, upstream saw %q; want 101 and websocket", code, sawUpgrade.Load())
	}
	_, none := newTestGateway(t, minimal+"proxy:\n  upgrades: []\n", newUpstream(false).URL)
	if code := ask(none.URL, "websocket"); code != 200 {
		t.Errorf("upgrades: [] and Upgrade: websocket: %d, want 200 (proxied plain)", code)
	}
	_, h2c := newTestGateway(t, minimal+"proxy:\n  upgrades: [websocket, h2c]\n", newUpstream(false).URL)
	if code := ask(h2c.URL, "h2c"); code != 101 {
		t.Errorf("upgrades: [websocket, h2c] and Upgrade: h2c: %d, want 101", code)
	}
	_, rogue := newTestGateway(t, minimal, newUpstream(true).URL)
	if code := ask(rogue.URL, "h2c"); code != http.StatusBadGateway {
		t.Errorf("an upstream that switches protocols unasked: %d, want 502", code)
	}
	if _, err := parseConfig([]byte(minimal + "proxy:\n  upgrades: [web socket]\n")); err == nil || !strings.Contains(err.Error(), "proxy.upgrades[0]") {
		t.Errorf("upgrades: [web socket]: %v, want an error naming proxy.upgrades[0]", err)
	}
}

// TestVendorForwardingClaimsNeverReachTheUpstream: a reviewer listed
// client-address, host, port and path claims of further vendors (WebLogic,
// ARR, Fly, DigitalOcean, Netlify, Vercel, Alibaba, App Engine,
// CloudFront, Envoy) and Via that reached the upstream from an untrusted
// client; none may, nor a new vendor's header named like them.
func TestVendorForwardingClaimsNeverReachTheUpstream(t *testing.T) {
	var got atomic.Pointer[http.Header]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		got.Store(&h)
	}))
	defer up.Close()
	claims := []string{
		"Proxy-Client-IP", "WL-Proxy-Client-IP", "X-Arr-ClientIP", "Remote-Addr", "X-Original-Remote-Addr",
		"X-Real-Client-IP", "Fly-Client-IP", "Do-Connecting-IP", "X-Nf-Client-Connection-Ip",
		"X-Vercel-Forwarded-For", "Ali-Cdn-Real-Ip", "X-Appengine-Remote-Addr", "CloudFront-Viewer-Address",
		"CloudFront-Forwarded-Proto", "Forwarded-Proto", "Forwarded-Host", "X-Forwarded-Hostname",
		"X-Http-Host-Override", "X-Real-Host", "X-Client-Port", "X-Real-Port", "X-Original-URI",
		"X-Envoy-Original-Path", "X-Envoy-Internal", "Via",
		// Not listed: caught by their names.
		"X-Acme-Client-IP", "Acme-Connecting-IP", "X-Acme-Forwarded-Tls", "X-Acme-Original-Url", "Acme-Remote-Addr",
	}
	send := func(gw string) http.Header {
		t.Helper()
		req, _ := http.NewRequest("GET", gw+"/x", nil)
		for _, k := range claims {
			req.Header.Set(k, "claim")
		}
		req.Header.Set("X-Request-Id", "kept")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return *got.Load()
	}
	_, gw := newTestGateway(t, minimal, up.URL)
	h := send(gw.URL)
	for k, v := range h {
		for _, s := range v {
			if strings.Contains(s, "claim") {
				t.Errorf("%s: %q reached the upstream", k, s)
			}
		}
	}
	if h.Get("X-Request-Id") != "kept" {
		t.Error("X-Request-Id, no claim, was dropped")
	}
	_, trusted := newTestGateway(t, minimal+"  trusted_proxies: [127.0.0.1]\n", up.URL)
	h = send(trusted.URL)
	for _, k := range []string{"Via", "Fly-Client-IP", "X-Acme-Client-IP"} {
		if h.Get(k) != "claim" {
			t.Errorf("%s from a trusted proxy: %q, want it passed on", k, h.Get(k))
		}
	}
}

// TestInvalidUTF8PathIs400: an overlong "%c0%af" is "/" to old decoders
// and invalid UTF-8 to the rest; such a path gets 400 and never reaches
// the upstream.
func TestInvalidUTF8PathIs400(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, minimal, srv.URL)
	host := strings.TrimPrefix(gw.URL, "http://")
	for _, target := range []string{"/x%c0%aflogin", "/login%c0%ae%c0%ae", "/a%ff", "/%e2%80"} {
		if res := rawRequest(t, host, "POST", target); res.StatusCode != 400 {
			t.Errorf("POST %s: %d, want 400", target, res.StatusCode)
		}
	}
	if res := rawRequest(t, host, "POST", "/caf%c3%a9"); res.StatusCode != 200 {
		t.Errorf("POST /caf%%c3%%a9 (valid UTF-8): %d, want 200", res.StatusCode)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.hits) != 1 {
		t.Errorf("the upstream saw %v, want only the valid path", up.hits)
	}
}

// TestExemptResponsesCarryNoUpstreamRateLimitHeaders: under
// upstream_headers: ours the upstream's rate-limit headers never go out;
// they did on exempt paths, where the middleware sets none of its own.
func TestExemptResponsesCarryNoUpstreamRateLimitHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-RateLimit-Used, X-Checksum")
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("RateLimit", `"up";r=1`)
		w.Header().Set("X-Rate-Limit-Remaining", "5")
		_, _ = io.WriteString(w, "ok")
		w.Header().Set("X-RateLimit-Used", "7")
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"Ratelimit-Reset", "3")
	}))
	defer up.Close()
	for _, mode := range []string{"ours", "theirs"} {
		_, gw := newTestGateway(t, minimal+"  upstream_headers: "+mode+"\n  exempt:\n    paths: [/healthz]\n", up.URL)
		res, err := http.Get(gw.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		var rl []string
		for k := range res.Header {
			if hasPrefixFold(k, "ratelimit") || hasPrefixFold(k, "x-ratelimit") || hasPrefixFold(k, "x-rate-limit") {
				rl = append(rl, k)
			}
		}
		for k := range res.Trailer {
			if hasPrefixFold(k, "ratelimit") || hasPrefixFold(k, "x-ratelimit") {
				rl = append(rl, "trailer "+k)
			}
		}
		if mode == "ours" && len(rl) != 0 {
			t.Errorf("exempt response under ours carries the upstream's %v", rl)
		}
		if mode == "theirs" && res.Header.Get("X-RateLimit-Limit") != "999" {
			t.Errorf("exempt response under theirs: X-RateLimit-Limit %q, want the upstream's 999", res.Header.Get("X-RateLimit-Limit"))
		}
		if res.Trailer.Get("X-Checksum") != "abc" {
			t.Errorf("%s: the upstream's other trailer X-Checksum is %q, want abc", mode, res.Trailer.Get("X-Checksum"))
		}
	}
}

// TestSuffixQueryAndUnicodeSpellingsNeverReachTheUpstream runs the
// example: with the login quota spent, a reviewer's spellings reached the
// upstream with 200 (a suffix of several dots, an escaped or raw "?" or
// "#", Unicode whitespace, zero-width and fullwidth characters); each is
// now refused by the login rule, and overlong UTF-8 with 400.
func TestSuffixQueryAndUnicodeSpellingsNeverReachTheUpstream(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, exampleConfig(t, 1000, 1000), srv.URL)
	host := strings.TrimPrefix(gw.URL, "http://")
	for i := 0; i < 5; i++ {
		if res := rawRequest(t, host, "POST", "/login"); res.StatusCode != 200 {
			t.Fatalf("login %d of 5: %d, want 200", i+1, res.StatusCode)
		}
	}
	for target, want := range map[string]int{
		"/login.x.y": 429, "/login.json.json": 429, "/login.a.b.c": 429, "/login%2ejson.x": 429, "/login.x.y/": 429,
		"/login%3fx": 429, "/login%253fx": 429, "/login%23x": 429, "/login%2523x": 429, "/login#x": 429,
		"/login%c2%a0": 429, "/login%c2%85": 429, "/login%e3%80%80": 429, "/login%e2%80%8b": 429, "/login%ef%bb%bf": 429,
		"/%e2%80%8blogin": 429, "/%ef%bb%bflogin": 429, "/%ef%bd%8c%ef%bd%8f%ef%bd%87%ef%bd%89%ef%bd%8e": 429,
		"/x%c0%af..%c0%aflogin": 400, "/login%c0%ae%c0%ae": 400,
	} {
		if res := rawRequest(t, host, "POST", target); res.StatusCode != want {
			t.Errorf("POST %s after the quota was spent: %d, want %d", target, res.StatusCode, want)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for k, n := range up.hits {
		if k != "POST /login" || n != 5 {
			t.Errorf("the upstream saw %q %d times", k, n)
		}
	}
}

// TestAbsoluteFormHostIsCheckedLikeAHostHeader: net/http refuses a Host
// header holding a quote, but a request line in absolute form sets the
// request's host from its URL unchecked, and the gateway forwarded it raw
// in X-Forwarded-Host. Such a request now gets 400 and never reaches the
// upstream; a plain absolute-form request still passes.
func TestAbsoluteFormHostIsCheckedLikeAHostHeader(t *testing.T) {
	var reached atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		fmt.Fprint(w, r.Header.Get("X-Forwarded-Host"))
	}))
	defer up.Close()
	addr, _ := startGateway(t, minimal, up.URL)
	for _, tc := range []struct {
		line string
		want int
	}{
		{"GET http://a\";for=1.2.3.4/ok HTTP/1.1", http.StatusBadRequest},
		{"GET http://a<b>/ok HTTP/1.1", http.StatusBadRequest},
		{"GET http://api.example:8080/ok HTTP/1.1", http.StatusOK},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		before := reached.Load()
		fmt.Fprintf(c, "%s\r\nHost: x\r\nConnection: close\r\n\r\n", tc.line)
		if code := readStatus(t, c); code != tc.want {
			t.Errorf("%q: %d, want %d", tc.line, code, tc.want)
		}
		c.Close()
		if got := reached.Load() - before; (tc.want == http.StatusOK) != (got == 1) {
			t.Errorf("%q: the upstream got %d requests", tc.line, got)
		}
	}
}
