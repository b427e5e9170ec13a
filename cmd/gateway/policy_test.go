package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func do(t *testing.T, method, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

func okUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	return up
}

func randomKey(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestRandomAPIKeysDoNotBypass through the gateway's
// YAML: with key: header_or_ip and a key budget of 2 new keys per IP, a
// client inventing a fresh X-API-Key per request gets the 2 keys' first
// requests and then its IP's allowance (3), not 3 per invented key; a
// request without a key is limited by its IP too, even with fail_open.
func TestRandomAPIKeysDoNotBypass(t *testing.T) {
	const cfg = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 3
  algorithm: log
  key: header_or_ip
  key_budget:
    new_keys: 2
  fail_open: true
`
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	allowed := 0
	for i := 0; i < 20; i++ {
		if do(t, "GET", gw.URL+"/", map[string]string{"X-API-Key": randomKey(t)}).StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d of 20 requests with random keys passed, want 5 (2 new keys + the IP's 3)", allowed)
	}
	if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 429 {
		t.Errorf("request without a key: %d, want 429 (keyed by the exhausted IP)", code)
	}
}

// TestTierKeysAreNotCharged: configured tier API keys are verified, so
// they never spend the client IP's budget of new keys.
func TestTierKeysAreNotCharged(t *testing.T) {
	const cfg = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 1
  algorithm: log
  key: header_or_ip
  key_budget:
    new_keys: 1
  tiers:
    - name: pro
      api_keys: [pro-a-0123456789abcdef, pro-b-0123456789abcdef, pro-c-0123456789abcdef]
      max_requests: 2
`
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	for _, k := range []string{"pro-a-0123456789abcdef", "pro-b-0123456789abcdef", "pro-c-0123456789abcdef"} {
		for i := 0; i < 2; i++ {
			if code := do(t, "GET", gw.URL+"/", map[string]string{"X-API-Key": k}).StatusCode; code != 200 {
				t.Fatalf("tier key %s request %d: %d, want 200 (each key its own allowance)", k, i, code)
			}
		}
	}
	// The IP's one new-key budget is untouched: a new key still gets in.
	if code := do(t, "GET", gw.URL+"/", map[string]string{"X-API-Key": "new-1"}).StatusCode; code != 200 {
		t.Errorf("first unknown key: %d, want 200", code)
	}
}

// TestStackedRulesAndExemptions: with stack: true every matching rule
// applies, a denial by one consumes nothing from the others, and the
// headers list every policy; exempt paths, CIDRs and OPTIONS never
// consume quota.
func TestStackedRulesAndExemptions(t *testing.T) {
	const cfg = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  algorithm: log
  key: ip
  stack: true
  exempt:
    paths: [/healthz]
    methods: [OPTIONS]
  rules:
    - name: login
      method: POST
      path_prefix: /login
      max_requests: 2
    - name: all
      max_requests: 4
`
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	res := do(t, "POST", gw.URL+"/login", nil)
	if got := res.Header.Get("RateLimit-Policy"); got != `"login";q=2;w=60, "all";q=4;w=60` {
		t.Errorf("RateLimit-Policy %q, want both policies", got)
	}
	do(t, "POST", gw.URL+"/login", nil)
	res = do(t, "POST", gw.URL+"/login", nil)
	if res.StatusCode != 429 {
		t.Fatalf("third login: %d, want 429", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("429 Content-Type %q, want application/problem+json (the default deny_body)", ct)
	}
	for i := 0; i < 10; i++ {
		if code := do(t, "GET", gw.URL+"/healthz", nil).StatusCode; code != 200 {
			t.Fatalf("exempt path: %d", code)
		}
		if code := do(t, "OPTIONS", gw.URL+"/x", nil).StatusCode; code != 200 {
			t.Fatalf("exempt method: %d", code)
		}
	}
	// "all" spent 2 on the two admitted logins, nothing on the refused
	// one or the exempt requests: 2 left.
	for i, want := range []int{200, 200, 429} {
		if code := do(t, "GET", gw.URL+"/x", nil).StatusCode; code != want {
			t.Errorf("GET %d after the logins: %d, want %d", i, code, want)
		}
	}
}

func TestExemptCIDRAndTextBody(t *testing.T) {
	const cfg = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 1
  key: ip
  deny_body: text
  exempt:
    cidrs: [10.0.0.0/8]
`
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	do(t, "GET", gw.URL+"/", nil)
	res := do(t, "GET", gw.URL+"/", nil)
	if res.StatusCode != 429 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("status %d Content-Type %q, want 429 text/plain", res.StatusCode, res.Header.Get("Content-Type"))
	}
	const cfgLoopback = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 1
  key: ip
  exempt:
    cidrs: [127.0.0.0/8]
`
	_, gw = newTestGateway(t, cfgLoopback, okUpstream(t).URL)
	for i := 0; i < 5; i++ {
		if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 200 {
			t.Fatalf("exempt CIDR request %d: %d", i, code)
		}
	}
}

// TestExampleConfigResistsKeyRotation on the shipped
// example: one client inventing an X-API-Key per request gets its 5 new
// keys and then its IP's allowance, and missing keys count against the IP.
func TestExampleConfigResistsKeyRotation(t *testing.T) {
	b, err := os.ReadFile("gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Same config, a limit small enough to reach in a test.
	cfg := strings.Replace(string(b), "max_requests: 100 ", "max_requests: 3 ", 1)
	cfg = strings.Replace(cfg, "window_size_ms: 1000 ", "window_size_ms: 60000 ", 1)
	if cfg == string(b) {
		t.Fatal("the example's default policy line changed; update this test")
	}
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	allowed := 0
	for i := 0; i < 50; i++ {
		if do(t, "GET", gw.URL+"/", map[string]string{"X-API-Key": randomKey(t)}).StatusCode == 200 {
			allowed++
		}
	}
	// 5 new keys (one request each) + the IP's 3 = 8; the counter
	// algorithm may admit fewer, never more.
	if allowed > 8 || allowed < 5 {
		t.Errorf("%d of 50 requests with random keys passed, want at most 8 (5 new keys + 3 for the IP)", allowed)
	}
	if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 429 {
		t.Errorf("request without a key after the IP's allowance: %d, want 429", code)
	}
	if code := do(t, "GET", gw.URL+"/healthz", nil).StatusCode; code != 200 {
		t.Errorf("exempt /healthz: %d", code)
	}
	// The example used to ship working tier keys; the old published
	// one is now an unknown key like any other.
	if code := do(t, "GET", gw.URL+"/", map[string]string{"X-API-Key": "pro-key-1"}).StatusCode; code != 429 {
		t.Errorf("the old example tier key after the IP is exhausted: %d, want 429", code)
	}
}

// TestPreflightsHaveTheirOwnQuota (worth a look): preflights spend no
// rule's quota, but a client cannot send the upstream an unlimited stream
// of fake ones either.
func TestPreflightsHaveTheirOwnQuota(t *testing.T) {
	up, srv := newCountingUpstream(t)
	_, gw := newTestGateway(t, minimal+"  preflight: {max_requests: 2}\n", srv.URL)
	pre := map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
	codes := ""
	for range 4 {
		codes += fmt.Sprint(do(t, "OPTIONS", gw.URL+"/api", pre).StatusCode, " ")
	}
	if codes != "200 200 429 429 " || up.count("OPTIONS /api") != 2 {
		t.Errorf("preflights: %s, upstream saw %d; want 2 through", codes, up.count("OPTIONS /api"))
	}
	for i := 0; i < 10; i++ {
		if code := do(t, "POST", gw.URL+"/api", nil).StatusCode; code != 200 {
			t.Fatalf("request %d after the preflights: %d (the default's 10 are untouched)", i, code)
		}
	}
}

// TestDenyCORSOrigins (worth a look): a 429 the gateway sends is readable
// by scripts of the configured origins only.
func TestDenyCORSOrigins(t *testing.T) {
	_, gw := newTestGateway(t, strings.Replace(minimal, "max_requests: 10", "max_requests: 1", 1)+"  deny_cors_origins: [\"https://app.example\"]\n", okUpstream(t).URL)
	do(t, "GET", gw.URL+"/", nil)
	res := do(t, "GET", gw.URL+"/", map[string]string{"Origin": "https://app.example"})
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		res.Header.Get("Access-Control-Allow-Credentials") != "true" || res.Header.Get("Vary") != "Origin" {
		t.Errorf("429 for a listed origin: %d %v", res.StatusCode, res.Header)
	}
	if !strings.Contains(res.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Errorf("Expose-Headers %q", res.Header.Get("Access-Control-Expose-Headers"))
	}
	res = do(t, "GET", gw.URL+"/", map[string]string{"Origin": "https://evil.example"})
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("429 for another origin: %d, Allow-Origin %q", res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
	}
	for _, bad := range []string{"app.example", "https://app.example/", "https://app.example/x", "ftp://a"} {
		if _, err := parseConfig([]byte(minimal + "  deny_cors_origins: [\"" + bad + "\"]\n")); err == nil || !strings.Contains(err.Error(), "rate_limiting.deny_cors_origins[0]") {
			t.Errorf("origin %q: %v", bad, err)
		}
	}
}
