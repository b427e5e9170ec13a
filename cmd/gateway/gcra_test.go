package main

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// stepClock is an engine.Clock the test moves by hand.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() int64              { return c.ns.Load() }
func (c *stepClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// A gcra rule over HTTP: the burst at once, then one per Window/Limit,
// with draft-11 headers giving the bucket as q, its refill time as w, and
// exact waits (t rounded down, Retry-After and X-RateLimit-Reset up).
func TestGCRARuleBurstThenRateOverHTTP(t *testing.T) {
	c, err := parseConfig([]byte(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  rules:
    - name: api
      path_prefix: /api
      algorithm: token_bucket
      window_size_ms: 3000
      max_requests: 2
      burst: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	if ec := c.opts.Rules[0].Engine; ec.Algorithm != engine.GCRA || ec.Burst != 3 || ec.Limit != 2 {
		t.Fatalf("rule engine config %+v, want GCRA, Limit 2, Burst 3", ec)
	}
	clk := &stepClock{}
	clk.ns.Store(int64(time.Hour))
	c.opts.Rules[0].Engine.Clock = clk
	u, _ := url.Parse(okUpstream(t).URL)
	g := newGateway(u, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g)
	t.Cleanup(func() { gw.Close(); g.close() })

	// One every 1.5 s, a bucket of 3 refilled in 4.5 s (w=5).
	type want struct {
		code              int
		rateLimit, xreset string
		retryAfter        string
	}
	check := func(step string, w want) {
		t.Helper()
		code, h, _ := get(t, gw.URL+"/api/x")
		if code != w.code {
			t.Fatalf("%s: status %d, want %d", step, code, w.code)
		}
		for k, v := range map[string]string{"RateLimit-Policy": `"api";q=3;w=5`, "RateLimit": w.rateLimit, "X-RateLimit-Limit": "3"} {
			if got := h.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", step, k, got, v)
			}
		}
		if w.xreset != "" && h.Get("X-RateLimit-Reset") != w.xreset {
			t.Errorf("%s: X-RateLimit-Reset = %q, want %q", step, h.Get("X-RateLimit-Reset"), w.xreset)
		}
		if h.Get("Retry-After") != w.retryAfter {
			t.Errorf("%s: Retry-After = %q, want %q", step, h.Get("Retry-After"), w.retryAfter)
		}
	}
	check("fresh key", want{200, `"api";r=2`, "2", ""})
	check("second of the burst", want{200, `"api";r=1`, "3", ""})
	check("last of the burst", want{200, `"api";r=0;t=1`, "2", ""})
	check("after the burst", want{429, `"api";r=0;t=1`, "2", "2"})
	clk.Advance(1500 * time.Millisecond)
	check("one interval on", want{200, `"api";r=0;t=1`, "2", ""})
	check("again at once", want{429, `"api";r=0;t=1`, "2", "2"})
	clk.Advance(3 * time.Second)
	check("two intervals on", want{200, `"api";r=1`, "", ""})
	check("then", want{200, `"api";r=0;t=1`, "", ""})
	check("then refused", want{429, `"api";r=0;t=1`, "", "2"})
}

const reloadNumbersV1 = `
rate_limiting:
  algorithm: %ALG%
  sliding_window:
    window_size_ms: 3600000
    max_requests: 5
    max_limit: 20
`

// reloadTo writes cfg to path and runs the gateway's SIGHUP reload on it.
func reloadTo(t *testing.T, g *gateway, path, cfg string) {
	t.Helper()
	writeFile(t, path, cfg)
	g.reload(path, &http.Server{})
}

// A reload that changes only a rule's limit keeps its counts: a client at
// 4 of 5, reloaded to 10, gets exactly 6 more, not 10 (every algorithm).
func TestReloadOfOnlyTheLimitKeepsCounts(t *testing.T) {
	for _, alg := range engine.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			v1 := strings.Replace(reloadNumbersV1, "%ALG%", alg.String(), 1)
			g, gw, logs := newLoggingGateway(t, v1, okUpstream(t).URL)
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			for i := 0; i < 4; i++ {
				if code, _, _ := get(t, gw.URL+"/"); code != 200 {
					t.Fatalf("request %d: %d", i, code)
				}
			}
			reloadTo(t, g, path, strings.Replace(v1, "max_requests: 5", "max_requests: 10", 1))
			if !strings.Contains(logs.String(), "configuration reloaded") {
				t.Fatalf("reload failed: %s", logs)
			}
			for i := 0; i < 6; i++ {
				code, h, _ := get(t, gw.URL+"/")
				if code != 200 {
					t.Fatalf("request %d after the reload: %d, want 6 more to pass (4 of 10 used)", i, code)
				}
				if got := h.Get("RateLimit-Policy"); got != `"default";q=10;w=3600` {
					t.Errorf("RateLimit-Policy %q, want q=10", got)
				}
				if got := h.Get("X-RateLimit-Remaining"); got != strconv.Itoa(5-i) {
					t.Errorf("request %d: remaining %q, want %d", i, got, 5-i)
				}
			}
			if code, _, _ := get(t, gw.URL+"/"); code != 429 {
				t.Fatalf("the 11th request: %d, want 429", code)
			}
			if !strings.Contains(logs.String(), "counts are kept") {
				t.Errorf("the kept rule's change is not logged: %s", logs)
			}
			// Lowered again, to 8: the client holds 10, so it is refused.
			reloadTo(t, g, path, strings.Replace(v1, "max_requests: 5", "max_requests: 8", 1))
			if code, _, _ := get(t, gw.URL+"/"); code != 429 {
				t.Fatalf("at 10 of a lowered 8: %d, want 429", code)
			}
		})
	}
}

// Changes a kept limiter cannot take rebuild the rule from empty state,
// and say so in the log: a limit above the limiter's MaxLimit (max_limit
// left out: the log's is its limit), a new max_limit, a new window.
func TestReloadRebuildsAboveMaxLimitOrOnNewWindow(t *testing.T) {
	v1 := strings.Replace(reloadNumbersV1, "%ALG%", "log", 1)
	for _, tc := range []struct{ name, v2, log string }{
		{"new max_limit", strings.Replace(strings.Replace(v1, "max_requests: 5", "max_requests: 30", 1), "max_limit: 20", "max_limit: 30", 1), "its algorithm, window, key or engine settings changed"},
		{"limit above the default max_limit", strings.Replace(strings.Replace(v1, "    max_limit: 20\n", "", 1), "max_requests: 5", "max_requests: 6", 1), "above the limiter's max_limit"},
		{"new window", strings.Replace(v1, "window_size_ms: 3600000", "window_size_ms: 1800000", 1), "its algorithm, window, key or engine settings changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := v1
			if strings.Contains(tc.name, "default max_limit") {
				start = strings.Replace(v1, "    max_limit: 20\n", "", 1)
			}
			g, gw, logs := newLoggingGateway(t, start, okUpstream(t).URL)
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			for i := 0; i < 5; i++ {
				get(t, gw.URL+"/")
			}
			reloadTo(t, g, path, tc.v2)
			code, h, _ := get(t, gw.URL+"/")
			if code != 200 || h.Get("X-RateLimit-Remaining") == "0" {
				t.Errorf("after the reload: %d remaining %q, want a fresh count", code, h.Get("X-RateLimit-Remaining"))
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log lacks %q: %s", tc.log, logs)
			}
		})
	}
}

// A reload that changes a gcra rule's burst keeps its debt.
func TestReloadOfGCRABurstKeepsDebt(t *testing.T) {
	v1 := `
rate_limiting:
  sliding_window:
    window_size_ms: 3600000
    max_requests: 100
  rules:
    - name: api
      algorithm: gcra
      max_requests: 10
      burst: 2
`
	g, gw, logs := newLoggingGateway(t, v1, okUpstream(t).URL)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	get(t, gw.URL+"/")
	get(t, gw.URL+"/")
	if code, _, _ := get(t, gw.URL+"/"); code != 429 {
		t.Fatalf("third of a bucket of 2: %d", code)
	}
	reloadTo(t, g, path, strings.Replace(v1, "burst: 2", "burst: 5", 1))
	for i := 0; i < 3; i++ {
		code, h, _ := get(t, gw.URL+"/")
		if code != 200 {
			t.Fatalf("request %d after burst 2 -> 5: %d, want 3 more (2 of 5 owed) [%s]", i, code, logs)
		}
		if got := h.Get("RateLimit-Policy"); got != `"api";q=5;w=1800` {
			t.Errorf("RateLimit-Policy %q, want q=5;w=1800", got)
		}
	}
	if code, _, _ := get(t, gw.URL+"/"); code != 429 {
		t.Fatalf("after 2 + 3 of 5: %d, want 429", code)
	}
}

// A bucket deeper than GCRA holds is refused at load, naming burst.
func TestGCRABucketTooDeepNamesBurst(t *testing.T) {
	c, err := parseConfig([]byte(`
rate_limiting:
  sliding_window:
    window_size_ms: 1000
    max_requests: 10
  rules:
    - name: a
      algorithm: gcra
      window_size_ms: 31622400000
      max_requests: 1
      burst: 1000000
`))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	err = g.load(c)
	if err == nil {
		g.close()
		t.Fatal("a bucket of a million years was accepted")
	}
	if !strings.HasPrefix(err.Error(), "rate_limiting.rules[0].burst: ") || !errors.Is(err, errConfig) {
		t.Errorf("error %q does not name rate_limiting.rules[0].burst", err)
	}
}

// /debug/limiter's sum includes the engines' Invalid calls.
func TestEngineStatsSumInvalidCalls(t *testing.T) {
	g, _ := newTestGateway(t, minimal, okUpstream(t).URL)
	g.cur.Load().engines[0].Limiter.AllowN("k", 11) // above the limit of 10: invalid
	if got := (engineStats{g}).Stats().Invalid; got != 1 {
		t.Errorf("Invalid = %d, want 1", got)
	}
}
