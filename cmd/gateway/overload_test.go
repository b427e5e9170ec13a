package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// overloadGateway is a gateway serving yamlCfg in front of upstream with
// its overload watcher; readings, if set, replaces the watcher's sampler
// and nothing runs it: the test calls tick.
func overloadGateway(t *testing.T, yamlCfg, upstream string, readings func(*overloadConfig) overloadReadings) (*gateway, *httptest.Server, *syncBuffer) {
	t.Helper()
	c, err := parseConfig([]byte(yamlCfg))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	g := newGateway(u, log, nil)
	g.metrics = newMetrics(func() float64 { return float64(g.inflight.count()) }, g)
	g.overload = newOverload(g, log, g.metrics.reg)
	if readings != nil {
		g.overload.sample = readings
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.Close()
		g.overload.close()
		g.close()
	})
	return g, srv, logs
}

// metricValue is the value of the unlabelled (or fully labelled) series
// name in a scrape, -1 if absent.
func metricValue(t *testing.T, g *gateway, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, g), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if err := json.Unmarshal([]byte(v), &f); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// The GC readings of the tests, against a gc_pause_p99_ms of 5.
const (
	gcBad     = 6 * time.Millisecond // over 5 ms
	gcBetween = 4500 * time.Microsecond
	gcGood    = 3 * time.Millisecond // under 80 % of 5 ms
)

// gcReading is a sample whose only notable reading is a GC pause p99
// over enough pauses to be judged.
func gcReading(p99 time.Duration) overloadReadings {
	return overloadReadings{gcP99: p99, gcPauses: 500}
}

// TestProtectiveStateEntersAfterConsecutiveBadSamplesAndLeavesWithHysteresis
// steps the watcher through injected readings: it enters only after
// enter_after bad samples in a row, and leaves only after exit_after
// samples in a row below exit_percent of the threshold (a sample between
// that level and the threshold restarts the count).
func TestProtectiveStateEntersAfterConsecutiveBadSamplesAndLeavesWithHysteresis(t *testing.T) {
	var next overloadReadings
	g, _, logs := overloadGateway(t, minimal+"overload: {gc_pause_p99_ms: 5, enter_after: 3, exit_after: 2}\n", okUpstream(t).URL,
		func(*overloadConfig) overloadReadings { return next })
	o := g.overload
	for i, s := range []struct {
		gc         time.Duration
		protective bool
	}{
		{gcBad, false},
		{gcBad, false},
		{gcGood, false}, // breaks the run: three in a row are needed
		{gcBad, false},
		{gcBad, false},
		{gcBad, true}, // third in a row: enter
		{gcGood, true},
		{gcBetween, true}, // over the exit level (4 ms): the count restarts
		{gcGood, true},
		{gcBad, true},
		{gcGood, true},
		{gcGood, false}, // second good in a row: leave
		{gcBad, false},
		{gcBad, false},
		{gcBad, true},
	} {
		next = gcReading(s.gc)
		o.tick()
		if got := o.protective.Load(); got != s.protective {
			t.Fatalf("sample %d (gc p99 %v): protective %v, want %v", i, s.gc, got, s.protective)
		}
	}
	if v := metricValue(t, g, "slidelimit_gateway_overload_entries_total"); v != 2 {
		t.Errorf("entries_total %v, want 2", v)
	}
	if v := metricValue(t, g, "slidelimit_gateway_overload_exits_total"); v != 1 {
		t.Errorf("exits_total %v, want 1", v)
	}
	if v := metricValue(t, g, "slidelimit_gateway_overload_state"); v != 1 {
		t.Errorf("state %v, want 1", v)
	}
	if v := metricValue(t, g, "slidelimit_gateway_overload_gc_pause_p99_seconds"); v != gcBad.Seconds() {
		t.Errorf("gc_pause_p99_seconds %v, want the last reading %v", v, gcBad.Seconds())
	}
	log := logs.String()
	if n := strings.Count(log, "overload: entering the protective state"); n != 2 {
		t.Errorf("%d entry lines, want 2:\n%s", n, log)
	}
	if n := strings.Count(log, "overload: leaving the protective state"); n != 1 {
		t.Errorf("%d exit lines, want 1:\n%s", n, log)
	}
	if !strings.Contains(log, `"over":["gc_pause_p99_ms"]`) {
		t.Errorf("the entry line does not say which threshold:\n%s", log)
	}
}

// TestEachThresholdTripsAndOnlyWhenJudgeable: every reading enters the
// state past its threshold; the GC p99 of fewer than gc_min_pauses pauses,
// a heap with no budget and the thresholds that are off by default never
// do.
func TestEachThresholdTripsAndOnlyWhenJudgeable(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		r             overloadReadings
		enters        bool
	}{
		{"gc off by default", "", gcReading(time.Second), false},
		{"gc over", "gc_pause_p99_ms: 5", gcReading(gcBad), true},
		{"gc under", "gc_pause_p99_ms: 5", gcReading(5 * time.Millisecond), false},
		{"gc over but too few pauses", "gc_pause_p99_ms: 5", overloadReadings{gcP99: 50 * time.Millisecond, gcPauses: 99}, false},
		{"gc threshold off", "gc_pause_p99_ms: 0", gcReading(time.Second), false},
		{"gc threshold fractional", "gc_pause_p99_ms: 2.5", gcReading(3 * time.Millisecond), true},
		{"heap over 80 %", "", overloadReadings{heapLive: 81 << 20, heapBudget: 100 << 20}, true},
		{"heap at 80 %", "", overloadReadings{heapLive: 80 << 20, heapBudget: 100 << 20}, false},
		{"heap without budget", "", overloadReadings{heapLive: 1 << 40}, false},
		{"heap threshold off", "heap_percent: 0", overloadReadings{heapLive: 99 << 20, heapBudget: 100 << 20}, false},
		{"in flight off by default", "", overloadReadings{inFlight: 1 << 20}, false},
		{"in flight over", "max_in_flight: 100", overloadReadings{inFlight: 101}, true},
		{"in flight at", "max_in_flight: 100", overloadReadings{inFlight: 100}, false},
		{"key table off by default", "", overloadReadings{keyTable: 100}, false},
		{"key table over", "key_table_percent: 90", overloadReadings{keyTable: 95}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, _ := overloadGateway(t, minimal+"overload: {enter_after: 1, "+tc.section+"}\n", okUpstream(t).URL,
				func(*overloadConfig) overloadReadings { return tc.r })
			g.overload.tick()
			if got := g.overload.protective.Load(); got != tc.enters {
				t.Errorf("protective %v, want %v", got, tc.enters)
			}
		})
	}
}

// TestHeapBudgetDefaultsToGOMEMLIMIT: with no heap_budget_mb the real
// sampler reads the budget from the runtime's memory limit, and with
// neither the budget is 0 (no heap threshold).
func TestHeapBudgetDefaultsToGOMEMLIMIT(t *testing.T) {
	g, _, _ := overloadGateway(t, minimal, okUpstream(t).URL, nil)
	c := g.overloadSection()
	s := newRuntimeSampler(g)
	if r := s.read(c); r.heapBudget != memLimit() || r.heapLive == 0 {
		t.Errorf("budget %d (GOMEMLIMIT %d), live heap %d", r.heapBudget, memLimit(), r.heapLive)
	}
	c2, err := parseConfig([]byte(minimal + "overload: {heap_budget_mb: 64}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.read(&c2.overload); r.heapBudget != 64<<20 {
		t.Errorf("budget %d, want heap_budget_mb's %d", r.heapBudget, 64<<20)
	}
}

// TestGCWindowP99FromHistogramDeltas: the p99 is that of the pauses since
// the snapshot gc_window_ms ago, read at the lower edge of its bucket.
func TestGCWindowP99FromHistogramDeltas(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004, 0.008}
	c := &overloadConfig{interval: time.Second, gcWindow: 2 * time.Second}
	s := &runtimeSampler{}
	snap := func(counts ...uint64) (time.Duration, uint64) {
		return s.gcWindow(&rtmetrics.Float64Histogram{Counts: counts, Buckets: buckets}, c)
	}
	if p, n := snap(10, 0, 0, 0); p != 0 || n != 0 {
		t.Fatalf("first snapshot: p99 %v over %d pauses, want nothing yet", p, n)
	}
	// 100 short pauses and 2 in [4, 8) ms: the p99 (rank 101) is 4 ms.
	if p, n := snap(110, 0, 0, 2); p != 4*time.Millisecond || n != 102 {
		t.Errorf("p99 %v over %d, want 4ms over 102", p, n)
	}
	// 300 more short ones: the 2 long pauses are under 1 % of the 402.
	if p, n := snap(410, 0, 0, 2); p != 0 || n != 402 {
		t.Errorf("p99 %v over %d, want 0 over 402", p, n)
	}
	// The window spans 2 intervals (3 snapshots): the long pauses have
	// left it.
	if p, n := snap(710, 0, 0, 2); p != 0 || n != 600 {
		t.Errorf("p99 %v over %d, want 0 over 600 (the long pauses left the window)", p, n)
	}
	// 7 long pauses in 307: over 1 %.
	if p, n := snap(710, 0, 0, 9); p != 4*time.Millisecond || n != 307 {
		t.Errorf("p99 %v over %d, want 4ms over 307", p, n)
	}
}

// TestShedOnlySheddableRulesInTheProtectiveState: in the protective state
// a request a sheddable rule or tier would decide gets 429 with
// Retry-After and a problem body, without reaching the upstream and
// without spending quota; the others keep their limits; outside it
// nothing is shed.
func TestShedOnlySheddableRulesInTheProtectiveState(t *testing.T) {
	const cfg = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 3
  algorithm: log
  key: ip
  rules:
    - name: search
      path_prefix: /search
    - name: login
      path_prefix: /login
      max_requests: 2
overload:
  gc_pause_p99_ms: 5
  enter_after: 1
  exit_after: 1
  sheddable: [search]
`
	up, hits := countUpstream(t)
	next := gcReading(gcGood)
	g, gw, _ := overloadGateway(t, cfg, up.URL, func(*overloadConfig) overloadReadings { return next })
	if code := do(t, "GET", gw.URL+"/search", nil).StatusCode; code != 200 {
		t.Fatalf("normal state: /search %d", code)
	}
	next = gcReading(gcBad)
	g.overload.tick()
	if !g.overload.protective.Load() {
		t.Fatal("not protective")
	}
	before := hits.Load()
	for range 5 {
		code, hdr, body := get(t, gw.URL+"/search/q?x=1")
		if code != 429 {
			t.Fatalf("shed /search: %d, want 429", code)
		}
		if ra := hdr.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After %q, want 1 (exit_after x interval_ms)", ra)
		}
		if ct := hdr.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type %q", ct)
		}
		if rl := hdr.Get("RateLimit-Policy") + hdr.Get("X-RateLimit-Limit"); rl != "" {
			t.Errorf("a shed response carries rate-limit headers %q: no quota was looked at", rl)
		}
		var p map[string]any
		if err := json.Unmarshal([]byte(body), &p); err != nil || p["status"] != 429.0 || !strings.Contains(p["detail"].(string), `policy "search"`) {
			t.Errorf("problem body %q (%v)", body, err)
		}
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("the upstream saw %d shed requests", n)
	}
	// login and the default keep their own limits.
	for i, want := range []int{200, 200, 429} {
		if code := do(t, "GET", gw.URL+"/login", nil).StatusCode; code != want {
			t.Errorf("login %d in the protective state: %d, want %d", i, code, want)
		}
	}
	if code := do(t, "GET", gw.URL+"/other", nil).StatusCode; code != 200 {
		t.Errorf("default rule in the protective state: %d", code)
	}
	if v := metricValue(t, g, `slidelimit_gateway_overload_shed_total{rule="search"}`); v != 5 {
		t.Errorf("shed_total{search} %v, want 5", v)
	}
	next = gcReading(gcGood)
	g.overload.tick()
	if g.overload.protective.Load() {
		t.Fatal("still protective")
	}
	// Shedding spent none of search's 3: one was used before, 2 are left.
	for i, want := range []int{200, 200, 429} {
		if code := do(t, "GET", gw.URL+"/search", nil).StatusCode; code != want {
			t.Errorf("search %d after the state: %d, want %d", i, code, want)
		}
	}
}

// TestShedFollowsTheRulesThatWouldDecide: with stack: true a request is
// shed when any rule that applies to it is sheddable (the stacked limits
// refuse the same way); with first-match rules only the deciding rule
// counts. Tiers, the default policy and 503 work the same way; exempt
// paths are never shed.
func TestShedFollowsTheRulesThatWouldDecide(t *testing.T) {
	const tierKey = "0123456789abcdef0123"
	rules := `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  key: ip
  exempt:
    paths: [/healthz]
  tiers:
    - name: free
      api_keys: ["` + tierKey + `"]
  rules:
    - name: login
      method: POST
      path_prefix: /login
    - name: all
      method: POST
`
	for _, tc := range []struct {
		name, extra, sheddable string
		status                 int
		method, path, apiKey   string
		shed                   bool
	}{
		{"stacked: a sheddable rule applies", "  stack: true\n", "[all]", 0, "POST", "/login", "", true},
		{"first match: login decides", "  stack: false\n", "[all]", 0, "POST", "/login", "", false},
		{"first match: all decides", "  stack: false\n", "[all]", 0, "POST", "/x", "", true},
		{"tier", "", "[free]", 0, "GET", "/x", tierKey, true},
		{"not the tier", "", "[free]", 0, "GET", "/x", "", false},
		{"default", "", "[default]", 503, "GET", "/x", "", true},
		{"exempt", "", "[default]", 0, "GET", "/healthz", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rules + tc.extra + "overload: {gc_pause_p99_ms: 5, enter_after: 1, sheddable: " + tc.sheddable
			if tc.status != 0 {
				cfg += ", status: 503"
			}
			cfg += "}\n"
			g, gw, _ := overloadGateway(t, cfg, okUpstream(t).URL, func(*overloadConfig) overloadReadings { return gcReading(gcBad) })
			g.overload.tick()
			hdr := map[string]string{}
			if tc.apiKey != "" {
				hdr["X-API-Key"] = tc.apiKey
			}
			want := 200
			if tc.shed {
				want = max(tc.status, 429)
			}
			if code := do(t, tc.method, gw.URL+tc.path, hdr).StatusCode; code != want {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, code, want)
			}
		})
	}
}

// TestShedResponsesReadableFromDenyCORSOrigins: a shed 429 carries the
// CORS headers of deny_cors_origins, as the limits' 429s do, and exposes
// Retry-After to the script; another origin gets no Allow-Origin.
func TestShedResponsesReadableFromDenyCORSOrigins(t *testing.T) {
	cfg := minimal + "  deny_cors_origins: [\"https://app.example\"]\noverload: {max_in_flight: 1, enter_after: 1, sheddable: [default]}\n"
	g, gw, _ := overloadGateway(t, cfg, okUpstream(t).URL, func(*overloadConfig) overloadReadings { return overloadReadings{inFlight: 2} })
	g.overload.tick()
	res := do(t, "GET", gw.URL+"/", map[string]string{"Origin": "https://app.example"})
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		res.Header.Get("Access-Control-Allow-Credentials") != "true" || res.Header.Get("Vary") != "Origin" ||
		res.Header.Get("Access-Control-Expose-Headers") != "Retry-After" || res.Header.Get("Retry-After") != "10" {
		t.Errorf("shed 429 for a listed origin: %d %v", res.StatusCode, res.Header)
	}
	res = do(t, "GET", gw.URL+"/", map[string]string{"Origin": "https://evil.example"})
	if res.StatusCode != 429 || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("shed 429 for another origin: %d, Allow-Origin %q", res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
	}
}

// TestOverloadConfigErrorsNameTheField: every invalid overload value is
// refused at load, naming its YAML path.
func TestOverloadConfigErrorsNameTheField(t *testing.T) {
	rules := minimal + "  rules:\n    - name: search\n"
	for _, tc := range []struct{ section, want string }{
		{"sheddable: [serch]", `overload.sheddable[0]: "serch" names no rule or tier (the names: search, default, preflight)`},
		{"sheddable: [search, search]", `overload.sheddable[1]: "search" is listed twice`},
		{"status: 500", "overload.status: must be 429 or 503, got 500"},
		{"heap_percent: 120", "overload.heap_percent: must be in [0, 100]"},
		{"heap_percent: .nan", "overload.heap_percent: must be a finite decimal number"},
		{"gc_pause_p99_ms: -1", "overload.gc_pause_p99_ms: must be in [0, 60000]"},
		{"gc_pause_p99_ms: .inf", "overload.gc_pause_p99_ms: must be a finite decimal number"},
		{"interval_ms: 5", "overload.interval_ms: must be in [10, 60000]"},
		{"interval_ms: -1", "overload.interval_ms: must be in [1,"},
		{"gc_window_ms: 500", "overload.gc_window_ms: must be from interval_ms (1000)"},
		{"gc_min_pauses: -1", "overload.gc_min_pauses: must be >= 1"},
		{"enter_after: -2", "overload.enter_after: must be in [1, 100000]"},
		{"exit_after: 100001", "overload.exit_after: must be in [1, 100000]"},
		{"exit_percent: 101", "overload.exit_percent: must be in (0, 100]"},
		{"max_in_flight: -1", "overload.max_in_flight: must be >= 0"},
		{"key_table_percent: 101", "overload.key_table_percent: must be in [0, 100]"},
		{"heap_budget_mb: -1", "overload.heap_budget_mb: must be in [0, 1048576]"},
		{"retry_after_ms: -1", "overload.retry_after_ms: must be in [1,"},
		{"enabled: 1", "overload.enabled: must be true or false"},
		{"sheddable: search", "overload.sheddable: must be a list"},
		{"sheddabel: [search]", "overload.sheddabel: unknown field"},
	} {
		_, err := parseConfig([]byte(rules + "overload: {" + tc.section + "}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.section, err, tc.want)
		}
	}
	c, err := parseConfig([]byte(rules + "overload: {retry_after_ms: 2500, sheddable: [search]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.overload.retryAfter != 3*time.Second {
		t.Errorf("retry_after_ms 2500: %v, want whole seconds rounded up (3s)", c.overload.retryAfter)
	}
}

// TestOverloadOffByReloadLeavesTheState: a reload with enabled: false
// takes the gateway out of the protective state (logged and counted as
// an exit), and a configuration without sheddable rules sheds nothing
// even in the state.
func TestOverloadOffByReloadLeavesTheState(t *testing.T) {
	const cfg = minimal + "  rules:\n    - name: search\n      path_prefix: /search\noverload: {gc_pause_p99_ms: 5, enter_after: 1, sheddable: [search]}\n"
	g, gw, logs := overloadGateway(t, cfg, okUpstream(t).URL, func(*overloadConfig) overloadReadings { return gcReading(gcBad) })
	g.overload.tick()
	if code := do(t, "GET", gw.URL+"/search", nil).StatusCode; code != 429 {
		t.Fatalf("shed: %d", code)
	}
	c, err := parseConfig([]byte(strings.Replace(cfg, "sheddable: [search]", "sheddable: []", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	if code := do(t, "GET", gw.URL+"/search", nil).StatusCode; code != 200 || !g.overload.protective.Load() {
		t.Fatalf("nothing sheddable, still protective (%v): %d, want 200", g.overload.protective.Load(), code)
	}
	c, err = parseConfig([]byte(strings.Replace(cfg, "enter_after: 1", "enabled: false", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	g.overload.tick()
	if g.overload.protective.Load() {
		t.Fatal("still protective with overload.enabled: false")
	}
	if code := do(t, "GET", gw.URL+"/search", nil).StatusCode; code != 200 {
		t.Errorf("overload off: %d", code)
	}
	if !strings.Contains(logs.String(), "overload protection turned off by a reload") {
		t.Errorf("no exit line:\n%s", logs.String())
	}
}

// TestBusyHealthyGatewayNeverEntersTheProtectiveState runs the real
// watcher with the default thresholds and pace (and GOMEMLIMIT set, so
// the heap is judged) while goroutines keep every core busy, another
// allocates as a busy gateway does, and clients send requests as fast as
// they can: it samples, reads GC windows of 100+ pauses, and never
// enters the state. (With gc_pause_p99_ms: 5 it would: see overload.go.)
func TestBusyHealthyGatewayNeverEntersTheProtectiveState(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 5 s of load; -short skips it")
	}
	// A memory limit, so that the heap threshold (80 % of it) is judged.
	prev := debug.SetMemoryLimit(1 << 30)
	defer debug.SetMemoryLimit(prev)
	g, gw, logs := overloadGateway(t, minimal, okUpstream(t).URL, nil)
	var (
		mu       sync.Mutex
		maxR     overloadReadings
		samples  int
		judged   int // samples whose GC window had gc_min_pauses pauses
		realRead = g.overload.sample
	)
	g.overload.sample = func(c *overloadConfig) overloadReadings {
		r := realRead(c)
		mu.Lock()
		defer mu.Unlock()
		samples++
		if r.gcPauses >= c.gcMinPauses {
			judged++
			maxR.gcP99 = max(maxR.gcP99, r.gcP99)
		}
		maxR.gcPauses = max(maxR.gcPauses, r.gcPauses)
		maxR.heapLive = max(maxR.heapLive, r.heapLive)
		maxR.heapBudget = r.heapBudget
		maxR.inFlight = max(maxR.inFlight, r.inFlight)
		return r
	}
	g.overload.start()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var spins atomic.Int64
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() { // a busy core (the GC must stop it too), yielding to the requests now and then
			defer wg.Done()
			for i := int64(1); ; i++ {
				if i%(1<<16) == 0 {
					runtime.Gosched()
					select {
					case <-stop:
						spins.Add(i)
						return
					default:
					}
				}
			}
		}()
	}
	// Garbage as a busy gateway makes it (about 1 MB a millisecond at
	// most, less on a starved machine), so that GC pauses come by the
	// hundred per window and their p99 is judged, not left out for want
	// of pauses.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var keep [][]byte
		for i := 1; ; i++ {
			keep = append(keep, make([]byte, 16<<10))
			if len(keep) > 256 { // about 4 MB live
				keep = keep[:0]
			}
			if i%64 == 0 {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}
	}()
	var requests atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := client.Get(gw.URL + "/")
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				requests.Add(1)
			}
		}()
	}
	// Until the watcher has judged the GC p99 of enter_after (3) + 2
	// windows in a row, enough to enter; a machine too starved to make
	// that many pauses gets 30 s.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		n := judged
		mu.Unlock()
		if n >= defaultEnterAfter+2 {
			break
		}
	}
	close(stop)
	wg.Wait()
	g.overload.close()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d requests, %d samples, %d with the GC judged; highest readings: gc p99 %v (judged windows), pauses per window %d, live heap %d kB, in flight %d",
		requests.Load(), samples, judged, maxR.gcP99, maxR.gcPauses, maxR.heapLive>>10, maxR.inFlight)
	if judged < defaultEnterAfter || maxR.heapLive == 0 || maxR.heapBudget != 1<<30 {
		t.Errorf("the watcher judged the GC in %d of its %d samples (want %d at least): %+v", judged, samples, defaultEnterAfter, maxR)
	}
	if v := metricValue(t, g, "slidelimit_gateway_overload_entries_total"); v != 0 {
		t.Errorf("a busy healthy gateway entered the protective state %v times:\n%s", v, logs.String())
	}
}

// BenchmarkShedHandler is what the overload wrapper adds to a request:
// outside the protective state (one atomic load), and inside it for a
// request no sheddable rule decides (the second match) and for one that
// is shed (the match and the 429). The wrapped handler does nothing.
func BenchmarkShedHandler(b *testing.B) {
	const cfg = minimal + "  rules:\n    - {name: search, path_prefix: /search}\n    - {name: login, path_prefix: /login}\noverload: {enter_after: 1, max_in_flight: 1, sheddable: [search]}\n"
	c, err := parseConfig([]byte(cfg))
	if err != nil {
		b.Fatal(err)
	}
	o := newOverload(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	h := o.handler(c, nopHandler)
	for _, bc := range []struct {
		name, path string
		protective bool
	}{
		{"normal", "/search", false},
		{"protective/not-shed", "/login", true},
		{"protective/shed", "/search", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o.protective.Store(bc.protective)
			r := httptest.NewRequest("GET", bc.path, nil)
			w := &shedBenchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
		})
	}
}

type shedBenchWriter struct{ h http.Header }

func (d *shedBenchWriter) Header() http.Header         { return d.h }
func (d *shedBenchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *shedBenchWriter) WriteHeader(int)             {}

// TestOverloadOffByReloadZeroesItsReadings: the reading gauges of a
// watcher turned off by a reload read 0, not the last sample taken while
// it was on (alerts.yml would go on firing on a 6 ms GC pause p99 and a
// full heap that nothing measures any more).
func TestOverloadOffByReloadZeroesItsReadings(t *testing.T) {
	const cfg = minimal + "overload: {gc_pause_p99_ms: 5, heap_budget_mb: 100}\n"
	g, _, _ := overloadGateway(t, cfg, okUpstream(t).URL, func(*overloadConfig) overloadReadings {
		r := gcReading(gcBad)
		r.heapLive, r.heapBudget = 90<<20, 100<<20
		return r
	})
	g.overload.tick()
	const p = "slidelimit_gateway_overload_"
	if v := metricValue(t, g, p+"gc_pause_p99_seconds"); v != gcBad.Seconds() {
		t.Fatalf("gc_pause_p99_seconds %v while on, want %v", v, gcBad.Seconds())
	}
	c, err := parseConfig([]byte(strings.Replace(cfg, "gc_pause_p99_ms: 5", "enabled: false", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.load(c); err != nil {
		t.Fatal(err)
	}
	g.overload.tick()
	for _, name := range []string{"gc_pause_p99_seconds", "gc_pauses", "heap_live_bytes", "heap_budget_bytes"} {
		if v := metricValue(t, g, p+name); v != 0 {
			t.Errorf("%s%s %v with overload.enabled: false, want 0", p, name, v)
		}
	}
}

// TestShedFollowsTheRulesOnTrialAndTheirStandIns: a rule on trial (dry_run)
// leaves its requests to the rule that decided them before (here the
// default), so a sheddable default sheds them in the protective state;
// a sheddable rule in dry_run is shed too (shedding is not a rate-limit
// refusal: the rule was listed to be shed); the rules that apply to
// neither keep serving.
func TestShedFollowsTheRulesOnTrialAndTheirStandIns(t *testing.T) {
	const cfg = `
rate_limiting:
  sliding_window:
    window_size_ms: 60000
    max_requests: 100
  key: ip
  rules:
    - name: new
      path_prefix: /login
      dry_run: true
    - name: trial
      path_prefix: /trial
      dry_run: true
    - name: keep
      path_prefix: /keep
overload:
  gc_pause_p99_ms: 5
  enter_after: 1
  sheddable: [%s]
`
	for _, c := range []struct {
		sheddable string
		shed      map[string]string // path -> the rule named in the shed body
	}{
		{"default", map[string]string{"/login": "default", "/trial": "default", "/other": "default"}},
		{"trial", map[string]string{"/trial": "trial"}},
		{"new", map[string]string{"/login": "new"}},
	} {
		g, gw, _ := overloadGateway(t, fmt.Sprintf(cfg, c.sheddable), okUpstream(t).URL, func(*overloadConfig) overloadReadings { return gcReading(gcBad) })
		g.overload.tick()
		for _, path := range []string{"/login", "/trial", "/keep", "/other"} {
			code, _, body := get(t, gw.URL+path)
			want, shed := c.shed[path]
			switch {
			case shed && (code != 429 || !strings.Contains(body, `policy \"`+want+`\"`)):
				t.Errorf("sheddable %s: %s answered %d %q, want 429 shed for %s", c.sheddable, path, code, body, want)
			case !shed && code != 200:
				t.Errorf("sheddable %s: %s answered %d, want 200", c.sheddable, path, code)
			}
		}
	}
}

// TestGCWindowStartsAfreshAfterTheWatcherWasOff: while the watcher is off
// (overload.enabled: false) no snapshot is taken, so when a reload turns
// it on again the GC window starts afresh instead of spanning the time it
// was off: long pauses from before are not judged again.
func TestGCWindowStartsAfreshAfterTheWatcherWasOff(t *testing.T) {
	g, _, _ := overloadGateway(t, minimal+"overload: {enabled: false}\n", okUpstream(t).URL, nil)
	buckets := []float64{0, 0.001, 0.002, 0.004, 0.008}
	c := &overloadConfig{interval: time.Second, gcWindow: 10 * time.Second}
	s := g.overload.rt
	snap := func(counts ...uint64) (time.Duration, uint64) {
		return s.gcWindow(&rtmetrics.Float64Histogram{Counts: counts, Buckets: buckets}, c)
	}
	snap(0, 0, 0, 0)  // on, before 200 long pauses happened
	g.overload.tick() // off: no snapshot while the pauses happen
	if p, n := snap(10, 0, 0, 200); p != 0 || n != 0 {
		t.Errorf("first window after being off: p99 %v over %d pauses, want none judged yet", p, n)
	}
	if p, n := snap(400, 0, 0, 200); p != 0 || n != 390 {
		t.Errorf("second window: p99 %v over %d pauses, want 0 over the 390 short ones since", p, n)
	}
}

// TestRetryAfterMsErrorSaysItsRealDefault: a bad retry_after_ms is refused
// with the default it falls back to when 0, exit_after x interval_ms (here
// 5 x 2 s), not "0s".
func TestRetryAfterMsErrorSaysItsRealDefault(t *testing.T) {
	_, err := parseConfig([]byte(minimal + "overload: {retry_after_ms: -1, exit_after: 5, interval_ms: 2000}\n"))
	if err == nil || !strings.Contains(err.Error(), "overload.retry_after_ms: must be in [1, 31622400000] ms (0: the default 10s), got -1") {
		t.Errorf("error %v, want one naming the default 10s", err)
	}
}
