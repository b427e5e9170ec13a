package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
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
