package main

import (
	"bytes"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLoggingGateway is newTestGateway with its JSON log kept.
func newLoggingGateway(t *testing.T, yamlCfg, upstream string) (*gateway, *httptest.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	g, srv := newTestGatewayLog(t, yamlCfg, upstream, slog.New(slog.NewJSONHandler(logs, nil)))
	return g, srv, logs
}

func scrape(t *testing.T, g *gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.metrics.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestBackendFailuresAreLogged: a Redis rule that cannot reach its
// server answered by its on_failure policy with nothing in the log.
func TestBackendFailuresAreLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	cfg := minimal + "  redis: {address: \"" + addr + "\", on_failure: open, timeout_ms: 2000}\n  rules:\n    - {name: shared, backend: redis}\n"
	g, gw, logs := newLoggingGateway(t, cfg, okUpstream(t).URL)
	for range 5 {
		if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 200 {
			t.Fatalf("on_failure open: %d", code)
		}
	}
	if n := strings.Count(logs.String(), "rate-limit backend failed"); n != 1 {
		t.Errorf("%d backend-failure log lines for 5 failures in a burst, want 1 (throttled):\n%s", n, logs.String())
	}
	if got := testutilCounter(t, g.metrics, "slidelimit_gateway_backend_errors_total", `rule="shared"`); got != 5 {
		t.Errorf("backend errors %v, want 5", got)
	}
}

// TestKeyTableMetrics (worth a look, eviction_policy): operators see how
// full each in-memory rule's key table is and how many new keys found it
// full.
func TestKeyTableMetrics(t *testing.T) {
	g, gw := newTestGateway(t, minimal, okUpstream(t).URL)
	do(t, "GET", gw.URL+"/", nil)
	m := scrape(t, g)
	for _, want := range []string{`slidelimit_gateway_keys{rule="default"} 1`, `slidelimit_gateway_key_overflow_total{rule="default"} 0`} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestMetricsKeepTheirNamesAndLabels: the rate-limiting series now come
// from promlimit's Collector; every series the gateway exposed before
// keeps its name, type and labels, so dashboards and alerts still work.
func TestMetricsKeepTheirNamesAndLabels(t *testing.T) {
	g, gw := newTestGateway(t, minimal+"  rules:\n    - {name: login, path_prefix: /login}\n", okUpstream(t).URL)
	do(t, "GET", gw.URL+"/", nil)
	do(t, "GET", gw.URL+"/login", nil)
	m := scrape(t, g)
	for _, want := range []string{
		"# TYPE slidelimit_gateway_decisions_total counter",
		`slidelimit_gateway_decisions_total{outcome="allowed",rule="default"} 1`,
		`slidelimit_gateway_decisions_total{outcome="denied",rule="login"} 0`,
		`slidelimit_gateway_decisions_total{outcome="dry_run_denied",rule="login"} 0`,
		`slidelimit_gateway_decisions_total{outcome="key_error",rule="login"} 0`,
		"# TYPE slidelimit_gateway_backend_errors_total counter",
		`slidelimit_gateway_backend_errors_total{rule="login"} 0`,
		"# TYPE slidelimit_gateway_decision_seconds histogram",
		`slidelimit_gateway_decision_seconds_bucket{rule="login",le="1e-06"}`,
		`slidelimit_gateway_decision_seconds_count{rule="login"} 1`,
		"# TYPE slidelimit_gateway_keys gauge",
		`slidelimit_gateway_keys{rule="login"} 1`,
		"# TYPE slidelimit_gateway_key_overflow_total counter",
		`slidelimit_gateway_key_overflow_total{rule="default"} 0`,
		"# TYPE slidelimit_gateway_upstream_errors_total counter",
		`slidelimit_gateway_upstream_errors_total{kind="timeout"} 0`,
		"# TYPE slidelimit_gateway_config_reloads_total counter",
		`slidelimit_gateway_config_reloads_total{result="ok"} 0`,
		"# TYPE slidelimit_gateway_connections_refused_total counter",
		`slidelimit_gateway_connections_refused_total{reason="max_connections_per_ip"} 0`,
		"# TYPE slidelimit_gateway_requests_in_flight gauge",
		"slidelimit_gateway_requests_in_flight 0",
		"# TYPE go_goroutines gauge",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
