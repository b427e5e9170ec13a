package promlimit_test

import (
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/promlimit"
	"github.com/slidelimit/slidelimit/redisstore"
)

type fixedClock struct{}

func (fixedClock) Now() int64 { return int64(time.Hour) }

func newEngine(t testing.TB, limit int) *engine.Limiter {
	t.Helper()
	e, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: limit, Window: time.Minute, Clock: fixedClock{}, MaxKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// gatewayLike builds what cmd/gateway builds: a middleware with one
// in-memory rule whose decisions reach the collector through Observe.
func gatewayLike(t *testing.T) (*promlimit.Collector, http.Handler) {
	t.Helper()
	eng := newEngine(t, 2)
	var mw *httplimit.Middleware
	c, err := promlimit.New(promlimit.Options{
		Namespace:   "slidelimit_gateway",
		Engines:     func() []promlimit.Engine { return []promlimit.Engine{{Rule: "api", Limiter: eng}} },
		Middlewares: func() []*httplimit.Middleware { return []*httplimit.Middleware{mw} },
	})
	if err != nil {
		t.Fatal(err)
	}
	mw, err = httplimit.New(httplimit.Options{
		Rules:   []httplimit.Rule{{Name: "api", Limiter: eng, Limit: 2, Window: time.Minute}},
		Observe: c.Observe,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	return c, mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

func serveN(h http.Handler, n int) {
	for range n {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
}

// The series cmd/gateway exposes keep their names, labels and types, so
// the gateway can use the collector without a dashboard change.
func TestSeriesKeepTheGatewaysNamesAndLabels(t *testing.T) {
	c, h := gatewayLike(t)
	serveN(h, 3)
	want := `
# HELP slidelimit_gateway_decisions_total Rate-limit decisions per rule and outcome: allowed, denied, dry_run_denied, key_error. With stacked rules a request counts in each rule that decided it.
# TYPE slidelimit_gateway_decisions_total counter
slidelimit_gateway_decisions_total{outcome="allowed",rule="api"} 2
slidelimit_gateway_decisions_total{outcome="denied",rule="api"} 1
slidelimit_gateway_decisions_total{outcome="dry_run_denied",rule="api"} 0
slidelimit_gateway_decisions_total{outcome="key_error",rule="api"} 0
# HELP slidelimit_gateway_backend_errors_total Decisions a rule's remote backend (Redis) failed to make; its failure policy answered (also counted in decisions_total).
# TYPE slidelimit_gateway_backend_errors_total counter
slidelimit_gateway_backend_errors_total{rule="api"} 0
# HELP slidelimit_gateway_keys Keys an in-memory rule's limiter tracks now (its memory bound caps them).
# TYPE slidelimit_gateway_keys gauge
slidelimit_gateway_keys{rule="api"} 1
# HELP slidelimit_gateway_key_overflow_total New keys that found an in-memory rule's key table full of active keys: admitted untracked (OverflowAllow) or refused (OverflowDeny). Counts from the limiter's creation.
# TYPE slidelimit_gateway_key_overflow_total counter
slidelimit_gateway_key_overflow_total{rule="api"} 0
# HELP slidelimit_gateway_requests_total Requests the middleware handled, by what happened: allowed, denied, dry_run_denied, failed_open, failed_closed, unmatched, exempt (each request once).
# TYPE slidelimit_gateway_requests_total counter
slidelimit_gateway_requests_total{outcome="allowed"} 2
slidelimit_gateway_requests_total{outcome="denied"} 1
slidelimit_gateway_requests_total{outcome="dry_run_denied"} 0
slidelimit_gateway_requests_total{outcome="exempt"} 0
slidelimit_gateway_requests_total{outcome="failed_closed"} 0
slidelimit_gateway_requests_total{outcome="failed_open"} 0
slidelimit_gateway_requests_total{outcome="unmatched"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"slidelimit_gateway_decisions_total", "slidelimit_gateway_backend_errors_total",
		"slidelimit_gateway_keys", "slidelimit_gateway_key_overflow_total", "slidelimit_gateway_requests_total"); err != nil {
		t.Error(err)
	}
	// The latency histogram: one observation per decision, under the
	// gateway's name and label.
	if n := testutil.CollectAndCount(c, "slidelimit_gateway_decision_seconds"); n != 1 {
		t.Errorf("decision_seconds series: %d, want 1 (rule api)", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "slidelimit_gateway_decision_seconds" {
			if got := mf.GetMetric()[0].GetHistogram().GetSampleCount(); got != 3 {
				t.Errorf("decision_seconds count %d, want 3", got)
			}
		}
	}
}

func TestCollectorPassesLint(t *testing.T) {
	c, h := gatewayLike(t)
	serveN(h, 3)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestEngineSeriesReadTheLimitersStats(t *testing.T) {
	eng := newEngine(t, 1)
	eng.AllowN("a", 1)
	eng.AllowN("a", 1)
	eng.AllowN("b", 1)
	eng.AllowN("c", 2) // above the limit: invalid, neither allowed nor denied
	c, err := promlimit.New(promlimit.Options{Engines: func() []promlimit.Engine { return []promlimit.Engine{{Rule: "r", Limiter: eng}} }})
	if err != nil {
		t.Fatal(err)
	}
	st := eng.Stats()
	want := `
# HELP slidelimit_engine_decisions_total Decisions an in-memory rule's limiter made, by outcome: allowed, denied, invalid (calls no wait could admit: n <= 0 or above the limit; neither allowed nor denied).
# TYPE slidelimit_engine_decisions_total counter
slidelimit_engine_decisions_total{outcome="allowed",rule="r"} 2
slidelimit_engine_decisions_total{outcome="denied",rule="r"} 1
slidelimit_engine_decisions_total{outcome="invalid",rule="r"} 1
# HELP slidelimit_keys_inserted_total Keys an in-memory rule's limiter created.
# TYPE slidelimit_keys_inserted_total counter
slidelimit_keys_inserted_total{rule="r"} 2
# HELP slidelimit_max_keys The key bound of an in-memory rule's limiter (from its MaxMemory or MaxKeys).
# TYPE slidelimit_max_keys gauge
slidelimit_max_keys{rule="r"} ` + strconv.Itoa(st.MaxKeys) + `
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"slidelimit_engine_decisions_total", "slidelimit_keys_inserted_total", "slidelimit_max_keys"); err != nil {
		t.Error(err)
	}
}

// deadRedis is a go-redis client for a port nobody listens on, with the
// options redisstore requires: every call fails at once (connection
// refused), which is what the store's fault counters are for.
func deadRedis(t *testing.T) *redis.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisSeriesCountFaultsAndPolicyDecisions(t *testing.T) {
	s, err := redisstore.New(redisstore.Config{
		Client: deadRedis(t), Algorithm: engine.SlidingLog, Limit: 5, Window: time.Minute,
		Timeout: time.Second, OnFailure: redisstore.FailOpen, BreakerThreshold: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.AllowN("k", 1)
	}
	st := s.Stats()
	if st.Errors+st.Timeouts == 0 || st.FailOpen != 3 {
		t.Fatalf("store stats %+v: want 3 failed calls decided by FailOpen", st)
	}
	c, err := promlimit.New(promlimit.Options{Stores: func() []promlimit.Store { return []promlimit.Store{{Rule: "shared", Store: s}} }})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP slidelimit_redis_calls_total Decisions, peeks and resets asked of a rule's Redis store.
# TYPE slidelimit_redis_calls_total counter
slidelimit_redis_calls_total{rule="shared"} 3
# HELP slidelimit_redis_policy_decisions_total Decisions a rule's Redis store left to its failure policy, by policy: fail_open, fail_closed, fail_local.
# TYPE slidelimit_redis_policy_decisions_total counter
slidelimit_redis_policy_decisions_total{policy="fail_closed",rule="shared"} 0
slidelimit_redis_policy_decisions_total{policy="fail_local",rule="shared"} 0
slidelimit_redis_policy_decisions_total{policy="fail_open",rule="shared"} 3
# HELP slidelimit_redis_breaker_open 1 while the circuit breaker of a rule's Redis store is open or half-open.
# TYPE slidelimit_redis_breaker_open gauge
slidelimit_redis_breaker_open{rule="shared"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"slidelimit_redis_calls_total", "slidelimit_redis_policy_decisions_total", "slidelimit_redis_breaker_open"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(onlyMetric(t, c, "slidelimit_redis_eviction_unchecked")); got != 1 || !st.EvictionUnchecked {
		t.Errorf("redis_eviction_unchecked %g (Stats.EvictionUnchecked %v), want 1: New could not reach the server to read its policy", got, st.EvictionUnchecked)
	}
	if n := testutil.CollectAndCount(c, "slidelimit_redis_faults_total"); n != 6 {
		t.Errorf("redis_faults_total series: %d, want one per kind (6)", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestHybridSeriesIncludeItsStore(t *testing.T) {
	h, err := redisstore.NewHybrid(redisstore.HybridConfig{Config: redisstore.Config{
		Client: deadRedis(t), Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute,
		Timeout: time.Second, OnFailure: redisstore.FailClosed,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.AllowN("k", 1)
	c, err := promlimit.New(promlimit.Options{Hybrids: func() []promlimit.Hybrid { return []promlimit.Hybrid{{Rule: "h", Hybrid: h}} }})
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "slidelimit_hybrid_misses_total", "slidelimit_hybrid_keys", "slidelimit_redis_calls_total"); n != 3 {
		t.Errorf("hybrid series: %d, want its misses, keys and its store's calls", n)
	}
	if got := testutil.ToFloat64(onlyMetric(t, c, "slidelimit_hybrid_misses_total")); got != float64(h.Stats().Misses) || got == 0 {
		t.Errorf("hybrid_misses_total %g, want the hybrid's Misses (%d, not 0)", got, h.Stats().Misses)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// onlyMetric is a collector of c's one series named name.
func onlyMetric(t *testing.T, c prometheus.Collector, name string) prometheus.Collector {
	t.Helper()
	ch := make(chan prometheus.Metric, 256)
	c.Collect(ch)
	close(ch)
	var found []prometheus.Metric
	for m := range ch {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d series named %s, want 1", len(found), name)
	}
	return constCollector{found[0]}
}

type constCollector struct{ m prometheus.Metric }

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.Desc() }
func (c constCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }

func TestRetainDropsTheSeriesOfRemovedRules(t *testing.T) {
	c, err := promlimit.New(promlimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs := c.Rules([]string{"old", "kept"})
	rs["old"].Observe(httplimit.Event{Rule: "old", Outcome: httplimit.OutcomeDenied})
	c.Observe(nil, httplimit.Event{Rule: "kept", Outcome: httplimit.OutcomeAllowed, Err: errors.New("redis down")})
	c.Retain([]string{"kept"})
	want := `
# HELP slidelimit_backend_errors_total Decisions a rule's remote backend (Redis) failed to make; its failure policy answered (also counted in decisions_total).
# TYPE slidelimit_backend_errors_total counter
slidelimit_backend_errors_total{rule="kept"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "slidelimit_backend_errors_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "slidelimit_decisions_total"); n != 4 {
		t.Errorf("decisions_total series after Retain: %d, want kept's 4 outcomes", n)
	}
	// A rule seen again after Retain starts a fresh series.
	c.Observe(nil, httplimit.Event{Rule: "old", Outcome: httplimit.OutcomeAllowed})
	if n := testutil.CollectAndCount(c, "slidelimit_decisions_total"); n != 8 {
		t.Errorf("decisions_total series: %d, want 8", n)
	}
}

func TestObserveOfAKnownRuleDoesNotAllocate(t *testing.T) {
	c, err := promlimit.New(promlimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := httplimit.Event{Rule: "api", Outcome: httplimit.OutcomeAllowed, Latency: time.Microsecond}
	c.Observe(nil, e)
	if n := testing.AllocsPerRun(100, func() { c.Observe(nil, e) }); n != 0 {
		t.Errorf("Observe: %g allocations, want 0", n)
	}
}

func TestNewRejectsInvalidOptionsNamingTheField(t *testing.T) {
	// ':' is for recording rules: promlint flags it in exported names.
	if _, err := promlimit.New(promlimit.Options{Namespace: "a:b"}); err == nil || !strings.Contains(err.Error(), "Options.Namespace") {
		t.Errorf("Namespace a:b: %v, want an error naming the field", err)
	}
	if _, err := promlimit.New(promlimit.Options{Buckets: []float64{1, math.NaN(), 3}}); err == nil || !strings.Contains(err.Error(), "Options.Buckets") {
		t.Errorf("NaN bucket: %v, want an error naming the field", err)
	}
	if _, err := promlimit.New(promlimit.Options{Namespace: "bad-name"}); err == nil || !strings.Contains(err.Error(), "Options.Namespace") {
		t.Errorf("bad namespace: %v", err)
	}
	if _, err := promlimit.New(promlimit.Options{Buckets: []float64{1, 1}}); err == nil || !strings.Contains(err.Error(), "Options.Buckets") {
		t.Errorf("bad buckets: %v", err)
	}
}

// Decisions, new rules, Retain and scrapes at once, under -race.
func TestConcurrentObserveRulesRetainAndCollect(t *testing.T) {
	c, err := promlimit.New(promlimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				c.Observe(nil, httplimit.Event{Rule: []string{"a", "b", "c"}[(g+i)%3], Outcome: httplimit.OutcomeAllowed})
				switch i % 50 {
				case 0:
					c.Retain([]string{"a", "b"})
				case 25:
					if _, err := reg.Gather(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// The Store's eviction, clock and invalid-call counters are exported as
// they are in its Stats.
func TestRedisSeriesExportEvictionsClockReadsAndInvalidCalls(t *testing.T) {
	s, err := redisstore.New(redisstore.Config{
		Client: deadRedis(t), Algorithm: engine.SlidingCounter, Limit: 5, Window: time.Minute,
		Timeout: time.Second, OnFailure: redisstore.FailOpen, BreakerThreshold: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.AllowN("k", 0) // never sent: invalid
	s.AllowN("k", 6) // above the limit: invalid
	s.AllowN("k", 1)
	st := s.Stats()
	if st.Invalid != 2 {
		t.Fatalf("store stats %+v: want 2 invalid calls", st)
	}
	c, err := promlimit.New(promlimit.Options{Stores: func() []promlimit.Store { return []promlimit.Store{{Rule: "r", Store: s}} }})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"slidelimit_redis_evicted_keys_total":   float64(st.EvictedKeys),
		"slidelimit_redis_clock_reads_total":    float64(st.ClockReads),
		"slidelimit_redis_evicted_keys_unknown": b2f(st.EvictedKeysUnknown),
		"slidelimit_redis_eviction_unchecked":   b2f(st.EvictionUnchecked),
	} {
		if got := testutil.ToFloat64(onlyMetric(t, c, name)); got != want {
			t.Errorf("%s = %g, want %g (Stats %+v)", name, got, want, st)
		}
	}
	want := `
# HELP slidelimit_redis_decisions_total Decisions of a rule's Redis store (by Redis or by its failure policy), by outcome: allowed, denied, invalid (n <= 0 or above the limit: never sent, neither allowed nor denied).
# TYPE slidelimit_redis_decisions_total counter
slidelimit_redis_decisions_total{outcome="allowed",rule="r"} 1
slidelimit_redis_decisions_total{outcome="denied",rule="r"} 0
slidelimit_redis_decisions_total{outcome="invalid",rule="r"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "slidelimit_redis_decisions_total"); err != nil {
		t.Error(err)
	}
}

// A Hybrid's invalid calls count under hybrid_decisions_total.
func TestHybridSeriesCountInvalidCalls(t *testing.T) {
	h, err := redisstore.NewHybrid(redisstore.HybridConfig{Config: redisstore.Config{
		Client: deadRedis(t), Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute,
		Timeout: time.Second, OnFailure: redisstore.FailClosed,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.AllowN("k", 0)
	h.AllowN("k", 101)
	if got := h.Stats().Invalid; got != 2 {
		t.Fatalf("HybridStats.Invalid %d, want 2", got)
	}
	c, err := promlimit.New(promlimit.Options{Hybrids: func() []promlimit.Hybrid { return []promlimit.Hybrid{{Rule: "h", Hybrid: h}} }})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 256)
	c.Collect(ch)
	close(ch)
	found := false
	for m := range ch {
		d := m.Desc().String()
		if !strings.Contains(d, `"slidelimit_hybrid_decisions_total"`) {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "outcome" && l.GetValue() == "invalid" {
				found = true
				if v := pb.GetCounter().GetValue(); v != 2 {
					t.Errorf("hybrid_decisions_total{outcome=invalid} = %g, want 2", v)
				}
			}
		}
	}
	if !found {
		t.Error("no hybrid_decisions_total{outcome=invalid} series")
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
