package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// rawRequest sends one request as written (the target unescaped by any
// client library) and returns the response.
func rawRequest(t *testing.T, host, method, target string, hdr ...string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	extra := ""
	for _, h := range hdr {
		extra += h + "\r\n"
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n%s\r\n", method, target, extra)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	res.Body.Close()
	return res
}

// TestLoginSpellingsServersStripNeverReachTheUpstream runs the example:
// with the login quota (5 a minute) spent, spellings that IIS or older
// Spring route to /login (trailing whitespace or dots, a NUL, an escape
// left for a second decoding) and a POST to another path carrying
// X-Original-URL or X-Rewrite-URL: /login were each admitted and passed
// on. Now they are refused: by the login rule, or with 400 for a control
// character, and the upstream sees no login past the quota.
func TestLoginSpellingsServersStripNeverReachTheUpstream(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, exampleConfig(t, 1000, 1000), srv.URL)
	host := strings.TrimPrefix(gw.URL, "http://")
	for i := 0; i < 5; i++ {
		if res := rawRequest(t, host, "POST", "/login"); res.StatusCode != 200 {
			t.Fatalf("login %d of 5: %d, want 200", i+1, res.StatusCode)
		}
	}
	for target, want := range map[string]int{
		"/login%20": 429, "/login..": 429, "/login%20.json": 429, "/%256cogin": 429, "/login.": 429, "/login%2520": 429,
		"/login%00": 400, "/login%09": 400, "/login%0d%0a": 400, "/login%7f": 400,
	} {
		if res := rawRequest(t, host, "POST", target); res.StatusCode != want {
			t.Errorf("POST %s after the quota was spent: %d, want %d", target, res.StatusCode, want)
		}
	}
	for _, h := range []string{"X-Original-URL: /login", "X-Rewrite-URL: /LOGIN", "X-Original-URL: /login%20"} {
		if res := rawRequest(t, host, "POST", "/other", h); res.StatusCode != 429 {
			t.Errorf("POST /other with %s: %d, want 429", h, res.StatusCode)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for k, n := range up.hits {
		if k != "POST /login" {
			t.Errorf("the upstream saw %q %d times", k, n)
		} else if n != 5 {
			t.Errorf("the upstream ran %d logins, want 5", n)
		}
	}
}

// countingUpstream counts requests by upper-cased method and path, the way
// Flask and Rails route them.
type countingUpstream struct {
	mu   sync.Mutex
	hits map[string]int
	last http.Header
}

func newCountingUpstream(t *testing.T) (*countingUpstream, *httptest.Server) {
	c := &countingUpstream{hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.hits[strings.ToUpper(r.Method)+" "+r.URL.Path]++
		c.last = r.Header.Clone()
		c.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return c, srv
}

func (c *countingUpstream) count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[k]
}

// TestLowercaseMethodCannotEscapeLogin: the example promises 5 logins a
// minute per client IP; 20 "post /login" after 8 POSTs all reached an
// upstream that routes them as POST.
func TestLowercaseMethodCannotEscapeLogin(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, exampleConfig(t, 100, 1000), srv.URL)
	codes := ""
	for _, m := range []string{"POST", "POST", "POST", "post", "Post", "post", "pOST", "post"} {
		codes += fmt.Sprint(do(t, m, gw.URL+"/login", nil).StatusCode, " ")
	}
	if codes != "200 200 200 200 200 429 429 429 " {
		t.Errorf("login attempts: %s, want 5 passed then 429", codes)
	}
	if n := up.count("POST /login"); n != 5 {
		t.Errorf("the upstream's POST /login ran %d times, want 5", n)
	}
}

// TestPathVariantsCannotEscapeOrWinExemption runs the example: spellings
// that servlet, IIS, Express or Rails upstreams route to /login are
// limited by the login rule, and spellings that leave /healthz for them
// are not exempt.
func TestPathVariantsCannotEscapeOrWinExemption(t *testing.T) {
	_, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, exampleConfig(t, 1000, 1000), srv.URL)
	host := strings.TrimPrefix(gw.URL, "http://")
	raw := func(method, target string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, target)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		res.Body.Close()
		return res
	}
	for _, target := range []string{"/LOGIN", "/login;jsessionid=1", "/login.json", "/x/..;/login", `/x/..%5clogin`, "//login"} {
		if p := raw("POST", target).Header.Get("RateLimit-Policy"); !strings.Contains(p, `"login"`) {
			t.Errorf("POST %s: policy %q, want the login rule", target, p)
		}
	}
	for _, target := range []string{"/healthz/..;/admin", "/healthz/%2e%2e;/admin", `/healthz/..%5cadmin`, "/healthz/../admin"} {
		if raw("GET", target).Header.Get("RateLimit-Policy") == "" {
			t.Errorf("GET %s: exempt, want limited", target)
		}
	}
	if raw("GET", "/healthz/live").Header.Get("RateLimit-Policy") != "" {
		t.Error("GET /healthz/live: limited, want exempt")
	}
}
