package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// slowUpstream answers /slow only when release is closed (or the request
// is cancelled) and everything else at once.
func slowUpstream(t *testing.T) (*httptest.Server, chan struct{}, chan struct{}) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "upstream:"+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	return up, release, arrived
}

const reloadConfigV1 = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 5
  algorithm: log
  key: ip
  rules:
    - name: other
      path_prefix: /other
      max_requests: 2
`

// TestSIGHUPReloads on a real process: SIGHUP no
// longer kills the gateway; a bad file is refused with the reason logged
// and the old configuration keeps serving; a good file is swapped in, the
// default rule (key and policy unchanged) keeps its count, the changed
// rule starts afresh, and a request in flight across both reloads
// completes.
func TestSIGHUPReloads(t *testing.T) {
	up, release, arrived := slowUpstream(t)
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, reloadConfigV1)
	p := startGatewayProc(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", up.URL)

	for i := 0; i < 2; i++ {
		if code, _, _ := get(t, p.base+"/a"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	// One request in flight through every reload below.
	slow := make(chan string, 1)
	go func() {
		res, err := http.Get(p.base + "/slow")
		if err != nil {
			slow <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		slow <- res.Status + " " + string(b)
	}()
	<-arrived // the slow request holds 1 of the default's 5 now: 3 used

	writeFile(t, cfg, strings.Replace(reloadConfigV1, "max_requests: 5", "max_requests: 2.5", 1))
	p.signal(syscall.SIGHUP)
	p.waitLog("reload failed", "rate_limiting.sliding_window.max_requests: must be an integer")
	_, h, _ := get(t, p.base+"/a")
	if got := h.Get("RateLimit-Policy"); !strings.Contains(got, `"default";q=5`) {
		t.Errorf("after a bad reload RateLimit-Policy %q, want the old default q=5", got)
	}
	if got := h.Get("X-RateLimit-Remaining"); got != "1" {
		t.Errorf("after a bad reload remaining %q, want 1 (state kept)", got)
	}

	writeFile(t, cfg, strings.Replace(reloadConfigV1, "max_requests: 2", "max_requests: 7", 1))
	p.signal(syscall.SIGHUP)
	p.waitLog("configuration reloaded")
	_, h, _ = get(t, p.base+"/a")
	if got := h.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("default rule after reload: remaining %q, want 0 (its key and policy did not change: state kept)", got)
	}
	if code, _, _ := get(t, p.base+"/a"); code != 429 {
		t.Errorf("default rule past its limit after reload: %d, want 429", code)
	}
	_, h, _ = get(t, p.base+"/other")
	if got := h.Get("RateLimit-Policy"); !strings.Contains(got, `"other";q=7`) {
		t.Errorf("changed rule: RateLimit-Policy %q, want q=7", got)
	}
	if got := h.Get("X-RateLimit-Remaining"); got != "6" {
		t.Errorf("changed rule: remaining %q, want 6 (fresh state)", got)
	}

	close(release)
	if got := <-slow; got != "200 OK upstream:/slow" {
		t.Errorf("request in flight across the reloads: %q, want 200 from the upstream", got)
	}

	p.signal(syscall.SIGTERM)
	code, out := p.wait()
	if code != exitOK {
		t.Fatalf("exit status %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(out, "stopped; allowed 6, denied 1") {
		t.Errorf("final counts over both generations: %q", out)
	}
}

// TestShutdownTimeoutDropsAndExits3: a request still
// running when -shutdown-timeout expires is logged by method and path and
// the exit status is 3, distinct from a bad configuration's 2.
func TestShutdownTimeoutDropsAndExits3(t *testing.T) {
	up, _, arrived := slowUpstream(t) // never released
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, reloadConfigV1)
	p := startGatewayProc(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", up.URL, "-shutdown-timeout", "1s")
	errc := make(chan error, 1)
	go func() {
		res, err := http.Get(p.base + "/slow")
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	p.signal(syscall.SIGTERM)
	line := p.waitLog("dropping request in flight")
	if !strings.Contains(line, `"path":"/slow"`) || !strings.Contains(line, `"method":"GET"`) {
		t.Errorf("drop log line %s lacks the request", line)
	}
	p.waitLog("shutdown timed out", `"dropped":1`)
	if code, _ := p.wait(); code != exitDropped {
		t.Errorf("exit status %d, want %d", code, exitDropped)
	}
	if err := <-errc; err == nil {
		t.Error("the dropped request got an answer")
	}
}

func TestBadConfigExits2(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, "rate_limiting:\n  sliding_window:\n    window_size_ms: 1000\n    max_requests: 2.9\n")
	cmd := startCmd(t, "-config", cfg, "-upstream", "builtin")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitBadConfig {
		t.Fatalf("exit %v (%v), want %d; output %s", cmd.ProcessState, err, exitBadConfig, out)
	}
	if !strings.Contains(string(out), "rate_limiting.sliding_window.max_requests: must be an integer") {
		t.Errorf("output %s does not name the field", out)
	}
}

// TestShutdownCountsUpgradedConnections: http.Server.Shutdown does not
// wait for hijacked connections, so a websocket proxied through the
// gateway would be cut silently at exit; the gateway waits for it up to
// the timeout, then logs it as dropped and exits 3.
func TestShutdownCountsUpgradedConnections(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(io.Discard, brw) // held open until the client goes
	}))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, reloadConfigV1)
	p := startGatewayProc(t, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", up.URL, "-shutdown-timeout", "1s")
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	p.signal(syscall.SIGTERM)
	line := p.waitLog("dropping request in flight")
	if !strings.Contains(line, `"path":"/ws"`) {
		t.Errorf("drop log line %s lacks the upgraded request", line)
	}
	if code, _ := p.wait(); code != exitDropped {
		t.Errorf("exit status %d, want %d", code, exitDropped)
	}
}

// TestReloadKeepsIPRuleState: a reload that changes only
// key_budget.new_keys, or only key_header, does not touch an ip-keyed
// rule: the login rule kept granting 5 fresh attempts per such reload.
func TestReloadKeepsIPRuleState(t *testing.T) {
	cfg := exampleConfig(t, 100, 1000)
	g, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	for i := 0; i < 5; i++ {
		do(t, "POST", gw.URL+"/login", nil)
	}
	for _, edit := range []struct{ from, to string }{
		{"new_keys: 5 ", "new_keys: 6 "},
		{"key_header: X-API-Key ", "key_header: X-Api-Token "},
		{"window_ms: 600000 ", "window_ms: 300000 "},
	} {
		next := strings.Replace(cfg, edit.from, edit.to, 1)
		if next == cfg {
			t.Fatalf("example config lacks %q", edit.from)
		}
		cfg = next
		c, err := parseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.load(c); err != nil {
			t.Fatal(err)
		}
		if code := do(t, "POST", gw.URL+"/login", nil).StatusCode; code != 429 {
			t.Errorf("after a reload changing %q: login %d, want 429 (state kept)", edit.from, code)
		}
	}
	// A change that does change the ip keys (trusting a proxy) starts afresh.
	c, err := parseConfig([]byte(strings.Replace(cfg, "trusted_proxies: []", "trusted_proxies: [10.0.0.0/8]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	if code := do(t, "POST", gw.URL+"/login", nil).StatusCode; code != 200 {
		t.Errorf("after changing trusted_proxies: login %d, want 200 (keys mean something else now)", code)
	}
}

// TestReloadDropsSeriesOfRemovedRules (worth a look): series of rules a
// reload removed (or a failed reload introduced) stayed in /metrics.
func TestReloadDropsSeriesOfRemovedRules(t *testing.T) {
	withA := minimal + "  rules:\n    - name: gone\n      path_prefix: /a\n"
	g, gw := newTestGateway(t, withA, okUpstream(t).URL)
	do(t, "GET", gw.URL+"/a", nil)
	if !strings.Contains(scrape(t, g), `rule="gone"`) {
		t.Fatal("no series for rule gone before the reload")
	}
	c, err := parseConfig([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	m := scrape(t, g)
	if strings.Contains(m, `rule="gone"`) {
		t.Error("series of the removed rule gone are still exported")
	}
	if !strings.Contains(m, `slidelimit_gateway_decisions_total{outcome="allowed",rule="default"}`) {
		t.Error("the default rule's series went too")
	}
}
