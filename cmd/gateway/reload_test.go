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

// TestSIGHUPReloads pins issue 11 item 2 on a real process: SIGHUP no
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

// TestShutdownTimeoutDropsAndExits3 pins issue 11 item 4: a request still
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
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
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
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
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
