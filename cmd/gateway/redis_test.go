package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/redisstore"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestRedisRuleIsGlobal: two gateways with a backend: redis rule on one
// real redis-server share its limit (a global limit across gateway
// nodes), while their in-memory default rules stay per process.
func TestRedisRuleIsGlobal(t *testing.T) {
	rs := redistest.Start(t)
	cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  algorithm: log
  key: ip
  redis:
    address: %s
    prefix: "gwtest:"
    timeout_ms: 2000
    on_failure: closed
  rules:
    - name: global
      path_prefix: /api
      max_requests: 5
      backend: redis
`, rs.Addr())
	up := okUpstream(t)
	_, a := newTestGateway(t, cfg, up.URL)
	_, b := newTestGateway(t, cfg, up.URL)
	allowed := 0
	for i := 0; i < 12; i++ {
		gw := a
		if i%2 == 1 {
			gw = b
		}
		if do(t, "GET", gw.URL+"/api/x", nil).StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d of 12 requests through two gateways passed, want the shared limit 5", allowed)
	}
	res := do(t, "GET", a.URL+"/api/x", nil)
	if got := res.Header.Get("RateLimit-Policy"); got != `"global";q=5;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
}

// TestHybridRuleServesAndSurvivesReload: a hybrid rule decides from
// leases of the Redis limit; a reload that keeps the rule keeps the same
// backend (its leases are not returned and re-taken).
func TestHybridRuleServesAndSurvivesReload(t *testing.T) {
	rs := redistest.Start(t)
	cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  algorithm: log
  key: ip
  redis:
    address: %s
    timeout_ms: 2000
  rules:
    - name: leased
      max_requests: 4
      backend: hybrid
      sync_interval_ms: 50
`, rs.Addr())
	g, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	allowed := 0
	for i := 0; i < 8; i++ {
		if do(t, "GET", gw.URL+"/", nil).StatusCode == 200 {
			allowed++
		}
	}
	// One node, all inside one window: Redis never holds more than 4
	// reservations in the window and a node spends only what it
	// reserved, so at most 4; the first request waits for its lease, so
	// at least 1.
	if allowed < 1 || allowed > 4 {
		t.Errorf("%d of 8 admitted by a hybrid rule of 4", allowed)
	}
	before := g.cur.Load().resources
	c, err := parseConfig([]byte(cfg + "  dry_run: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	after := g.cur.Load().resources
	if len(before) != len(after) {
		t.Fatalf("resources %d before reload, %d after", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("resource %s was rebuilt by a reload that did not change it", before[i].fp)
		}
	}
}

// TestHybridHeadersClaimNoLease: a hybrid rule's Decision.Remaining is
// its node's lease, so every admitted response said r=0 (and
// X-RateLimit-Remaining 0) while the global quota had room. An admitted
// response now carries no RateLimit item or X-RateLimit-Remaining for it.
func TestHybridHeadersClaimNoLease(t *testing.T) {
	rs := redistest.Start(t)
	cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 10000
    max_requests: 20
  algorithm: log
  key: ip
  redis:
    address: %s
    timeout_ms: 2000
  rules:
    - name: hyb
      backend: hybrid
      sync_interval_ms: 50
`, rs.Addr())
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	admitted := 0
	for i := 0; i < 4; i++ {
		res := do(t, "GET", gw.URL+"/", nil)
		if res.StatusCode != 200 {
			continue // the hybrid's own first-request behaviour is redisstore's to test
		}
		admitted++
		if v := res.Header.Values("RateLimit"); len(v) != 0 {
			t.Errorf("admitted by the hybrid rule: RateLimit %q, want none (its Remaining is a lease)", v)
		}
		if v := res.Header.Values("X-RateLimit-Remaining"); len(v) != 0 {
			t.Errorf("admitted: X-RateLimit-Remaining %q, want none", v)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"hyb";q=20;w=10` {
			t.Errorf("RateLimit-Policy %q", got)
		}
	}
	if admitted == 0 {
		t.Fatal("the hybrid rule admitted nothing: the headers were not checked")
	}
}

// A Redis whose maxmemory-policy can evict the limiter's keys is refused
// unless rate_limiting.redis.allow_eviction accepts it.
func TestRedisThatCanEvictNeedsAllowEviction(t *testing.T) {
	rs := redistest.StartWith(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  redis:
    address: %s
    timeout_ms: 2000
  rules:
    - name: global
      max_requests: 5
      backend: redis
`, rs.Addr())
	c, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	g.metrics = newMetrics(func() float64 { return 0 }, g)
	err = g.load(c)
	if err == nil {
		g.close()
		t.Fatal("a server with allkeys-lru was accepted without allow_eviction")
	}
	if !errors.Is(err, redisstore.ErrEvictionPolicy) || !strings.HasPrefix(err.Error(), "rate_limiting.rules[0]") {
		t.Fatalf("error %q, want one naming the rule and wrapping redisstore.ErrEvictionPolicy", err)
	}
	_, gw := newTestGateway(t, strings.Replace(cfg, "    timeout_ms: 2000\n", "    timeout_ms: 2000\n    allow_eviction: true\n", 1), okUpstream(t).URL)
	if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 200 {
		t.Errorf("with allow_eviction: status %d, want 200", code)
	}
}

// A Redis whose eviction policy cannot be read at build (here: nobody
// listens) is logged once, at build, naming the rule, and /metrics
// exports the store's eviction series.
func TestUncheckedEvictionPolicyIsLoggedAtBuild(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  redis:
    address: %s
    timeout_ms: 200
    on_failure: open
  rules:
    - name: global
      max_requests: 5
      backend: redis
`, addr)
	g, _, logs := newLoggingGateway(t, cfg, okUpstream(t).URL)
	if n := strings.Count(logs.String(), "could not check the Redis eviction policy"); n != 1 || !strings.Contains(logs.String(), `"rule":"global"`) {
		t.Fatalf("%d eviction-check lines naming the rule, want 1: %s", n, logs)
	}
	// /metrics says so too, from the store's Stats.
	if m := scrape(t, g); !strings.Contains(m, `slidelimit_gateway_redis_eviction_unchecked{rule="global"} 1`) {
		t.Errorf("/metrics lacks redis_eviction_unchecked 1 for the rule:\n%s", m)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	reloadTo(t, g, path, cfg) // the same store is kept: not logged again
	if n := strings.Count(logs.String(), "could not check the Redis eviction policy"); n != 1 {
		t.Errorf("after a reload keeping the store: %d lines, want 1", n)
	}
}

// A gcra rule on Redis takes its burst through: the bucket passes at
// once and RateLimit-Policy advertises it and its refill time.
func TestGCRARedisRuleTakesItsBurst(t *testing.T) {
	rs := redistest.Start(t)
	cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  redis:
    address: %s
    timeout_ms: 2000
    on_failure: closed
  rules:
    - name: bucket
      algorithm: gcra
      max_requests: 2
      burst: 4
      backend: redis
`, rs.Addr())
	_, gw := newTestGateway(t, cfg, okUpstream(t).URL)
	for i := 0; i < 4; i++ {
		res := do(t, "GET", gw.URL+"/", nil)
		if res.StatusCode != 200 {
			t.Fatalf("request %d of a bucket of 4: %d", i, res.StatusCode)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"bucket";q=4;w=120` {
			t.Errorf("RateLimit-Policy %q, want q=4;w=120", got)
		}
	}
	if code := do(t, "GET", gw.URL+"/", nil).StatusCode; code != 429 {
		t.Errorf("fifth request: %d, want 429", code)
	}
}

// A reload that changes a Redis rule's numbers builds a store whose key
// names carry the new ones, so the rule's counts start afresh: the log
// says so, as it does for an in-memory rule rebuilt. A reload that builds
// a new store under the same numbers (a new timeout) finds the old counts
// and says nothing of the kind.
func TestRedisRuleRebuiltWithNewNumbersIsLogged(t *testing.T) {
	rs := redistest.Start(t)
	for _, alg := range []string{"gcra", "log"} {
		t.Run(alg, func(t *testing.T) {
			cfg := fmt.Sprintf(`
rate_limiting:
  sliding_window:
    window_size_ms: 3600000
    max_requests: 100
  redis:
    address: %s
    timeout_ms: 2000
    on_failure: closed
  rules:
    - name: r%s
      algorithm: %s
      max_requests: 5
      backend: redis
`, rs.Addr(), alg, alg)
			const rebuilt = "rule rebuilt on reload: redis key names carry the numbers: counts start afresh"
			g, gw, logs := newLoggingGateway(t, cfg, okUpstream(t).URL)
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if code, _, _ := get(t, gw.URL+"/"); code != 200 {
				t.Fatalf("first request: %d", code)
			}
			sameNumbers := strings.Replace(cfg, "timeout_ms: 2000", "timeout_ms: 3000", 1)
			reloadTo(t, g, path, sameNumbers)
			if strings.Contains(logs.String(), rebuilt) {
				t.Errorf("a new timeout keeps the key names, yet the log says the counts start afresh:\n%s", logs.String())
			}
			reloadTo(t, g, path, strings.Replace(sameNumbers, "max_requests: 5", "max_requests: 10", 1))
			out := logs.String()
			if !strings.Contains(out, rebuilt) || !strings.Contains(out, `"rule":"r`+alg+`"`) {
				t.Fatalf("max_requests 5 -> 10 on a redis rule: no %q line for it in the log:\n%s", rebuilt, out)
			}
			if !strings.Contains(out, `"max_requests":10,"was":5`) {
				t.Errorf("the rebuilt line does not give the numbers:\n%s", out)
			}
		})
	}
}
