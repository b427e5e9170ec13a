package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// failAfter bounds how long the test waits for the gateway process before
// failing instead of hanging; it asserts nothing about speed.
const failAfter = 2 * time.Minute

// TestGatewayProcess builds cmd/gateway, starts it on 127.0.0.1 in front of
// a real upstream, drives it over loopback until it answers 429, then sends
// SIGTERM and checks that it shuts down cleanly.
func TestGatewayProcess(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the gateway: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	var upstreamHits atomic.Int64
	var lastXFF atomic.Value
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		lastXFF.Store(r.Header.Get("X-Forwarded-For"))
		_, _ = io.WriteString(w, "upstream:"+r.URL.Path)
	}))
	defer upstream.Close()

	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 3
  algorithm: log
  key: ip
`), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-config", cfg, "-listen", "127.0.0.1:0", "-upstream", upstream.URL, "-pprof", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	// On an early failure, do not leave the process behind; after a clean
	// exit Kill only reports that the process is done.
	defer func() { _ = cmd.Process.Kill() }()

	listenRe := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	debugRe := regexp.MustCompile(`debug endpoints on (http://127\.0\.0\.1:\d+)/`)
	var base, debug string
	deadline := time.After(failAfter)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("gateway exited before listening: %v\nstderr: %s", <-exited, stderr.String())
			}
			if m := listenRe.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
			if m := debugRe.FindStringSubmatch(l); m != nil {
				debug = m[1]
			}
		case <-deadline:
			t.Fatalf("gateway did not report its address\nstderr: %s", stderr.String())
		}
	}
	if debug == "" {
		t.Fatal("no debug endpoint line before the listening line")
	}

	for i := 1; i <= 4; i++ {
		res, err := http.Get(base + "/items")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		want := 200
		if i == 4 {
			want = 429
		}
		if res.StatusCode != want {
			t.Fatalf("request %d: status %d body %q, want %d", i, res.StatusCode, body, want)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"default";q=3;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
		if i < 4 && string(body) != "upstream:/items" {
			t.Errorf("request %d: body %q, want the upstream's", i, body)
		}
		if i == 4 && res.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if n := upstreamHits.Load(); n != 3 {
		t.Errorf("upstream saw %d requests, want 3 (the 429 must not reach it)", n)
	}
	if xff, _ := lastXFF.Load().(string); xff != "127.0.0.1" {
		t.Errorf("upstream saw X-Forwarded-For %q, want the client 127.0.0.1", xff)
	}

	res, err := http.Get(debug + "/debug/limiter")
	if err != nil {
		t.Fatal(err)
	}
	var dbg struct {
		Limiter struct{ Allowed, Denied uint64 } `json:"limiter"`
	}
	err = json.NewDecoder(res.Body).Decode(&dbg)
	res.Body.Close()
	if err != nil || dbg.Limiter.Allowed != 3 || dbg.Limiter.Denied != 1 {
		t.Errorf("/debug/limiter: %+v, %v; want 3 allowed, 1 denied", dbg, err)
	}

	// Prometheus on the admin listener: per-rule counters and latency.
	res, err = http.Get(debug + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	prom, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`slidelimit_gateway_decisions_total{outcome="allowed",rule="default"} 3`,
		`slidelimit_gateway_decisions_total{outcome="denied",rule="default"} 1`,
		`slidelimit_gateway_decision_seconds_count{rule="default"} 4`,
		`slidelimit_gateway_requests_in_flight 0`,
	} {
		if !strings.Contains(string(prom), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("gateway exit after SIGTERM: %v\nstderr: %s", err, stderr.String())
		}
	case <-time.After(failAfter):
		t.Fatal("gateway did not exit after SIGTERM")
	}
	out := strings.Join(rest, "\n")
	if !strings.Contains(out, "stopped; allowed 3, denied 1") {
		t.Errorf("shutdown output %q lacks the final counts", out)
	}
}
