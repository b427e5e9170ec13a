package main

// Overload protection: the gateway watches its own health and, past the
// configured thresholds, enters a protective state in which the rules and
// tiers listed as sheddable answer 429 (or 503) with Retry-After, while
// every other rule keeps its limits. This is the "graceful degradation"
// of the in-memory sliding-window design note ("when memory limits are
// breached or GC pauses exceed 5 ms, route traffic to a circuit breaker
// state; return 429 with Retry-After"), with what a production version
// needs beside it: hysteresis, a choice of what to shed, and a log line
// and counters for every entry and exit.
//
// Readings, one sample per overload.interval_ms (1 s):
//
//   - GC pause p99: the 99th percentile of the stop-the-world GC pauses
//     of the last gc_window_ms (10 s), from the deltas of runtime/metrics'
//     /sched/pauses/total/gc:seconds histogram (/gc/pauses:seconds before
//     Go 1.22). The runtime's buckets are about 25 % wide near 5 ms; the
//     reading is the lower edge of the bucket that holds the 99th
//     percentile, so it never claims a pause longer than one measured.
//     Below gc_min_pauses (100) pauses in the window the GC reading
//     counts as healthy: the 99th percentile of fewer than 100 pauses is
//     their maximum, which one thread the OS left waiting decides.
//     Its threshold gc_pause_p99_ms is off by default; the design note's
//     5 ms suits a host of the gateway's own. A pause is mostly the time
//     to stop the world, which on a busy host is the time the OS takes to
//     run every thread of the process once more: on 2 cores that other
//     work kept busy (load average 9), a healthy gateway under -race
//     measured GC pause p99s of 15 to 67 ms over windows of 200+ pauses
//     (5.2 ms in a run without -race), so a 5 ms default would shed on a
//     busy but healthy machine. The reading is exported either way, and alerts.yml
//     alerts on 5 ms held for 5 minutes.
//   - Heap: the live heap (/gc/heap/live:bytes, what the last GC marked)
//     against heap_budget_mb, or GOMEMLIMIT when that is 0. Live, not
//     total: with GOMEMLIMIT and GOGC=off the total sits near the limit
//     by design, while a live heap near it is what makes the GC run
//     without pause. With neither a budget nor GOMEMLIMIT there is no
//     heap threshold.
//   - Requests in flight (max_in_flight; off by default): websockets and
//     other upgraded connections count while open.
//   - The fullest in-memory key table, in percent of its key bound
//     (key_table_percent; off by default).
//
// Hysteresis: enter_after (3) consecutive samples with a reading over its
// threshold enter the state; exit_after (10) consecutive samples with
// every reading below exit_percent (80 %) of its threshold leave it. A
// sample between the two resets the count towards leaving.
//
// Shedding: in the protective state a request is shed when a sheddable
// rule would decide it (with stack: true, when any rule that applies is
// sheddable). Which rules would decide it is found by a second
// httplimit.Middleware built from the same rules, tiers, exemptions and
// preflight rule, whose limiters refuse for the sheddable rules and admit
// for the others: the same matching as the limits (a rule on trial,
// dry_run or enforce_percent, leaves its requests to the rule that would
// decide them without it, so a sheddable stand-in sheds them: see
// newShedClassifier), without consuming any quota or running any key
// function (key budgets are not charged for a shed request). A shed response carries Retry-After: retry_after_ms,
// by default exit_after x interval_ms (10 s), the least time the state
// lasts, and a problem+json body (type about:blank) naming the rule, but
// no rate-limit headers. Outside the protective state a request costs
// one atomic load more (8 ns, no allocation; no wrapper at all when
// nothing is sheddable); inside it, a request that is not shed costs that
// second match (1.7 us and 6 allocations on a busy 2-core machine,
// BenchmarkShedHandler).
//
// The watcher is on by default (overload.enabled: false turns it off,
// and its reading gauges read 0 then: no value that is no longer
// measured), so its readings are on /metrics for the alert rules
// (alerts.yml), but
// nothing is sheddable by default: a gateway that lists no sheddable rule
// only logs and counts its entries and exits.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
)

// overloadFile is the overload section of the YAML file. Absent fields
// take the defaults; a threshold set to 0 is off.
type overloadFile struct {
	Enabled         *bool    `yaml:"enabled"`           // true
	IntervalMs      int64    `yaml:"interval_ms"`       // 1000
	GCWindowMs      int64    `yaml:"gc_window_ms"`      // 10000
	GCMinPauses     int      `yaml:"gc_min_pauses"`     // 100
	GCPauseP99Ms    float64  `yaml:"gc_pause_p99_ms"`   // 0: off (the default)
	HeapPercent     *float64 `yaml:"heap_percent"`      // 80; 0: off
	HeapBudgetMB    int64    `yaml:"heap_budget_mb"`    // 0: GOMEMLIMIT
	MaxInFlight     int      `yaml:"max_in_flight"`     // 0: off
	KeyTablePercent float64  `yaml:"key_table_percent"` // 0: off
	EnterAfter      int      `yaml:"enter_after"`       // 3
	ExitAfter       int      `yaml:"exit_after"`        // 10
	ExitPercent     float64  `yaml:"exit_percent"`      // 80
	Status          int      `yaml:"status"`            // 429 or 503
	RetryAfterMs    int64    `yaml:"retry_after_ms"`    // 0: exit_after x interval_ms
	Sheddable       []string `yaml:"sheddable"`         // rule and tier names, default, preflight
}

// Defaults of the overload section: the design note's heap threshold
// (80 %); its GC pause p99 (5 ms) is left to the operator (see above).
const (
	defaultOverloadInterval = time.Second
	defaultGCWindow         = 10 * time.Second
	defaultGCMinPauses      = 100
	defaultHeapPercent      = 80.0
	defaultEnterAfter       = 3
	defaultExitAfter        = 10
	defaultExitPercent      = 80.0

	minOverloadInterval = 10 * time.Millisecond
	maxOverloadInterval = time.Minute
	// maxGCWindowSamples bounds the GC window's ring of histogram
	// snapshots (one per sample, 162 counts each on Go 1.24-1.26): at
	// most about 5 MB.
	maxGCWindowSamples = 3600
	maxHysteresis      = 100000
)

// overloadConfig is the validated overload section.
type overloadConfig struct {
	enabled         bool
	interval        time.Duration
	gcWindow        time.Duration
	gcMinPauses     uint64
	gcPauseP99      time.Duration // 0: off
	heapPercent     float64       // 0: off
	heapBudget      uint64        // bytes; 0: GOMEMLIMIT
	maxInFlight     int64         // 0: off
	keyTablePercent float64       // 0: off
	enterAfter      int
	exitAfter       int
	exitRatio       float64 // exit_percent / 100
	status          int
	retryAfter      time.Duration // whole seconds, >= 1 s
	sheddable       []string

	// classify decides which requests a sheddable rule would decide;
	// nil when nothing is sheddable.
	classify *httplimit.Middleware
	// deny writes a shed response (the CORS headers of
	// deny_cors_origins, then shedWrite).
	deny   func(http.ResponseWriter, *http.Request, httplimit.Denial)
	bodies map[string][]byte // problem body per sheddable rule
}

// config validates the overload section against the rest of the
// configuration c (the rules and tiers sheddable may name); origins are
// rate_limiting.deny_cors_origins, which shed responses honour as 429s do.
func (f *overloadFile) config(c *config, origins []string) (overloadConfig, error) {
	const p = "overload"
	o := overloadConfig{enabled: f.Enabled == nil || *f.Enabled}
	var err error
	if o.interval, err = msField(p+".interval_ms", f.IntervalMs, defaultOverloadInterval); err != nil {
		return o, err
	}
	if o.interval < minOverloadInterval || o.interval > maxOverloadInterval {
		return o, fieldErr(p+".interval_ms", "must be in [%d, %d] (0: %d), got %d",
			minOverloadInterval.Milliseconds(), maxOverloadInterval.Milliseconds(), defaultOverloadInterval.Milliseconds(), f.IntervalMs)
	}
	if o.gcWindow, err = msField(p+".gc_window_ms", f.GCWindowMs, defaultGCWindow); err != nil {
		return o, err
	}
	if o.gcWindow < o.interval || o.gcWindow/o.interval > maxGCWindowSamples {
		return o, fieldErr(p+".gc_window_ms", "must be from interval_ms (%d) to %d times it (0: %d), got %d",
			o.interval.Milliseconds(), maxGCWindowSamples, defaultGCWindow.Milliseconds(), f.GCWindowMs)
	}
	switch {
	case f.GCMinPauses == 0:
		o.gcMinPauses = defaultGCMinPauses
	case f.GCMinPauses < 0:
		return o, fieldErr(p+".gc_min_pauses", "must be >= 1 (0: %d), got %d", defaultGCMinPauses, f.GCMinPauses)
	default:
		o.gcMinPauses = uint64(f.GCMinPauses)
	}
	gcMs := f.GCPauseP99Ms
	if !(gcMs >= 0 && gcMs <= float64(maxOverloadInterval.Milliseconds())) {
		return o, fieldErr(p+".gc_pause_p99_ms", "must be in [0, %d] (0: off), got %v", maxOverloadInterval.Milliseconds(), gcMs)
	}
	o.gcPauseP99 = time.Duration(gcMs * float64(time.Millisecond))
	o.heapPercent = defaultHeapPercent
	if f.HeapPercent != nil {
		o.heapPercent = *f.HeapPercent
	}
	if !(o.heapPercent >= 0 && o.heapPercent <= 100) {
		return o, fieldErr(p+".heap_percent", "must be in [0, 100] (0: off), got %v", o.heapPercent)
	}
	if f.HeapBudgetMB < 0 || f.HeapBudgetMB > maxMemoryLimitMB {
		return o, fieldErr(p+".heap_budget_mb", "must be in [0, %d] (0: GOMEMLIMIT), got %d", maxMemoryLimitMB, f.HeapBudgetMB)
	}
	o.heapBudget = uint64(f.HeapBudgetMB) << 20
	if f.MaxInFlight < 0 {
		return o, fieldErr(p+".max_in_flight", "must be >= 0 (0: off), got %d", f.MaxInFlight)
	}
	o.maxInFlight = int64(f.MaxInFlight)
	if !(f.KeyTablePercent >= 0 && f.KeyTablePercent <= 100) {
		return o, fieldErr(p+".key_table_percent", "must be in [0, 100] (0: off), got %v", f.KeyTablePercent)
	}
	o.keyTablePercent = f.KeyTablePercent
	if o.enterAfter, err = hysteresis(p+".enter_after", f.EnterAfter, defaultEnterAfter); err != nil {
		return o, err
	}
	if o.exitAfter, err = hysteresis(p+".exit_after", f.ExitAfter, defaultExitAfter); err != nil {
		return o, err
	}
	exitPct := f.ExitPercent
	if exitPct == 0 {
		exitPct = defaultExitPercent
	}
	if !(exitPct > 0 && exitPct <= 100) {
		return o, fieldErr(p+".exit_percent", "must be in (0, 100] (0: %v), got %v", defaultExitPercent, f.ExitPercent)
	}
	o.exitRatio = exitPct / 100
	switch f.Status {
	case 0, http.StatusTooManyRequests:
		o.status = http.StatusTooManyRequests
	case http.StatusServiceUnavailable:
		o.status = http.StatusServiceUnavailable
	default:
		return o, fieldErr(p+".status", "must be 429 or 503, got %d", f.Status)
	}
	// The least time the state takes to leave, from its entry: a client
	// told to come back sooner finds it still on.
	retry := time.Duration(o.exitAfter) * o.interval
	if f.RetryAfterMs != 0 {
		// retry as the default: the error names it (exit_after x interval_ms).
		if retry, err = msField(p+".retry_after_ms", f.RetryAfterMs, retry); err != nil {
			return o, err
		}
	}
	o.retryAfter = max(time.Duration(ceilSec(retry))*time.Second, time.Second)

	known := map[string]bool{}
	var names []string
	for _, r := range c.opts.Rules {
		known[r.Name] = true
		names = append(names, r.Name)
	}
	for _, r := range []*httplimit.Rule{c.opts.Default, c.opts.Preflight} {
		if r != nil {
			known[r.Name] = true
			names = append(names, r.Name)
		}
	}
	shed := map[string]bool{}
	for i, n := range f.Sheddable {
		field := fmt.Sprintf("%s.sheddable[%d]", p, i)
		if !known[n] {
			return o, fieldErr(field, "%q names no rule or tier (the names: %s)", n, strings.Join(names, ", "))
		}
		if shed[n] {
			return o, fieldErr(field, "%q is listed twice", n)
		}
		shed[n] = true
		o.sheddable = append(o.sheddable, n)
	}
	if len(shed) > 0 {
		if o.classify, err = newShedClassifier(c, shed, o.retryAfter); err != nil {
			return o, fmt.Errorf("%s.sheddable: %w: %w", p, err, errConfig)
		}
		o.bodies = map[string][]byte{}
		for n := range shed {
			o.bodies[n] = shedBody(n, o.status, o.retryAfter)
		}
		o.deny = corsDeny(o.shedWrite, origins)
	}
	return o, nil
}

func hysteresis(field string, v, def int) (int, error) {
	if v == 0 {
		return def, nil
	}
	if v < 0 || v > maxHysteresis {
		return 0, fieldErr(field, "must be in [1, %d] samples (0: %d), got %d", maxHysteresis, def, v)
	}
	return v, nil
}

// ceilSec is d in whole seconds, rounded up.
func ceilSec(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// shedBody is the RFC 9457 problem body of a request shed for rule. Rule
// names are [A-Za-z0-9_.-] (checked at load), so they need no escaping.
func shedBody(rule string, status int, retry time.Duration) []byte {
	return []byte(`{"type":"about:blank","title":"` + http.StatusText(status) + `","status":` + strconv.Itoa(status) +
		`,"detail":"the gateway is overloaded and sheds the requests of policy \"` + rule +
		`\"; retry in ` + strconv.FormatInt(ceilSec(retry), 10) + " s\"}\n")
}

// shedWrite answers a shed request: status, Retry-After and the problem
// body. No rate-limit headers: no quota was looked at. A request with an
// Origin gets Retry-After exposed to scripts, as the middleware's 429s
// expose theirs (readable from the origins of deny_cors_origins).
func (o *overloadConfig) shedWrite(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
	h := w.Header()
	if len(r.Header["Origin"]) > 0 {
		h.Add("Access-Control-Expose-Headers", "Retry-After")
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Retry-After", strconv.FormatInt(ceilSec(o.retryAfter), 10))
	w.WriteHeader(o.status)
	_, _ = w.Write(o.bodies[d.Rule])
}

// newShedClassifier builds the middleware that finds, for a request, the
// sheddable rule that would decide it: c's rules, tiers, default and
// preflight rule with the same matching (methods, paths, tiers, stacking,
// exemptions, and the rules on trial: dry_run, enforce_percent), each on a
// fixed verdict: refused for the sheddable ones, admitted for the others.
// Its key function is a constant, so nothing that keys a real decision (a
// key budget in particular) runs for it.
//
// Rules on trial. The real middleware leaves a request that a rule on
// trial decides in shadow to the rule that enforced it before (the next
// match, or the default): that rule applies too, and if it is sheddable
// the request is shed. So the classifier keeps a rule's dry_run, and
// finds the same stand-ins; a canary rule (enforce_percent below 100) is
// classified as if every key were in its shadow cohort (the cohort needs
// the key), so its stand-ins apply to all of its requests, as they do to
// most at a small percentage. A sheddable rule is shed whether it enforces
// or not, so it enforces in the classifier (its refusal reaches OnDeny):
// where it matches, it sheds, also in the corner where the real
// middleware would skip it (a sheddable dry_run rule matching after
// another rule on trial, in first-match order).
func newShedClassifier(c *config, shed map[string]bool, retry time.Duration) (*httplimit.Middleware, error) {
	yes, none := true, 0.0
	fake := func(r *httplimit.Rule) *httplimit.Rule {
		if r == nil {
			return nil
		}
		d := engine.Decision{Allowed: true, Limit: r.Engine.Limit, Remaining: r.Engine.Limit}
		if shed[r.Name] {
			d = engine.Decision{Limit: r.Engine.Limit, RetryAfter: retry, ResetAfter: retry}
		}
		f := &httplimit.Rule{Name: r.Name, Method: r.Method, PathPrefix: r.PathPrefix, Tier: r.Tier,
			Limiter: fixedVerdict{d}, Limit: r.Engine.Limit, Window: r.Engine.Window}
		switch {
		case shed[r.Name]:
			// Enforces, whatever its dry_run or enforce_percent (see above).
		case r.DryRun != nil && *r.DryRun, r.DryRun == nil && c.opts.DryRun:
			f.DryRun = &yes
		case r.EnforcePercent != nil && *r.EnforcePercent < 100:
			f.EnforcePercent = &none
		}
		return f
	}
	opts := httplimit.Options{
		MatchAll: c.opts.MatchAll, Tier: c.opts.Tier, Exempt: c.opts.Exempt,
		Default: fake(c.opts.Default), Preflight: fake(c.opts.Preflight),
		Key:      func(*http.Request) (string, error) { return "-", nil },
		Upstream: httplimit.UpstreamUnchecked,
		OnDeny: func(w http.ResponseWriter, _ *http.Request, d httplimit.Denial) {
			if p, ok := w.(*shedProbe); ok {
				p.rule = d.Rule
			}
		},
	}
	for i := range c.opts.Rules {
		opts.Rules = append(opts.Rules, *fake(&c.opts.Rules[i]))
	}
	return httplimit.New(opts)
}

// fixedVerdict is a limiter that answers every call with d.
type fixedVerdict struct{ d engine.Decision }

func (f fixedVerdict) AllowN(string, int) engine.Decision { return f.d }
func (f fixedVerdict) Peek(string) engine.Decision        { return f.d }
func (f fixedVerdict) Reset(string)                       {}
func (f fixedVerdict) AllowNContext(context.Context, string, int) (engine.Decision, error) {
	return f.d, nil
}
func (f fixedVerdict) PeekContext(context.Context, string) (engine.Decision, error) { return f.d, nil }
func (f fixedVerdict) ResetContext(context.Context, string) error                   { return nil }

// shedProbe is the ResponseWriter the classifier answers into: it keeps
// the name of the sheddable rule that refused, and drops the rest.
type shedProbe struct {
	h    http.Header
	rule string
}

func (p *shedProbe) Header() http.Header {
	if p.h == nil {
		p.h = http.Header{}
	}
	return p.h
}
func (p *shedProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *shedProbe) WriteHeader(int)             {}

var nopHandler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// overloadReadings is one sample of the gateway's health.
type overloadReadings struct {
	gcP99      time.Duration // p99 of the GC pauses in the window (bucket's lower edge)
	gcPauses   uint64        // GC pauses in the window
	heapLive   uint64        // bytes
	heapBudget uint64        // bytes; 0: none
	inFlight   int64
	keyTable   float64 // the fullest in-memory key table, percent of its bound
}

// over lists the readings above their thresholds scaled by scale (1 to
// enter; exitRatio to tell a sample good enough to leave).
func (c *overloadConfig) over(r overloadReadings, scale float64) []string {
	var out []string
	if c.gcPauseP99 > 0 && r.gcPauses >= c.gcMinPauses && float64(r.gcP99) > float64(c.gcPauseP99)*scale {
		out = append(out, "gc_pause_p99_ms")
	}
	if c.heapPercent > 0 && r.heapBudget > 0 && float64(r.heapLive)*100 > c.heapPercent*scale*float64(r.heapBudget) {
		out = append(out, "heap_percent")
	}
	if c.maxInFlight > 0 && float64(r.inFlight) > float64(c.maxInFlight)*scale {
		out = append(out, "max_in_flight")
	}
	if c.keyTablePercent > 0 && r.keyTable > c.keyTablePercent*scale {
		out = append(out, "key_table_percent")
	}
	return out
}

// overloadSource is what the watcher reads besides the runtime: the
// running configuration's overload section (nil before the first load),
// the requests in flight and the in-memory limiters.
type overloadSource interface {
	overloadSection() *overloadConfig
	inFlightCount() int64
	currentEngines() []ruleEngine
}

func (g *gateway) overloadSection() *overloadConfig {
	if gen := g.cur.Load(); gen != nil {
		return &gen.cfg.overload
	}
	return nil
}

func (g *gateway) inFlightCount() int64 { return g.inflight.count() }

// overload is the watcher and the protective state, one per process; it
// outlives reloads (each sample reads the running configuration's
// section).
type overload struct {
	log *slog.Logger
	src overloadSource
	// sample reads the health; tests replace it to inject readings.
	sample func(*overloadConfig) overloadReadings
	// rt is the runtime sampler behind sample (nil where a test replaced
	// it): tick makes it forget its GC window while the watcher is off.
	rt *runtimeSampler

	// protective is read by every request (shedHandler) and written by
	// tick alone.
	protective atomic.Bool
	shedNow    atomic.Uint64 // requests shed since the state was entered

	mu      sync.Mutex // serializes tick: the sampler goroutine, or a test
	badRun  int        // consecutive samples over a threshold (outside the state)
	goodRun int        // consecutive samples below the exit level (inside it)
	since   time.Time  // when the state was entered
	seen    *overloadConfig

	stop, done chan struct{}
	closeOnce  sync.Once

	state, gcP99, gcPauses, heapLive, heapBudget prometheus.Gauge
	entries, exits                               prometheus.Counter
	shed                                         *prometheus.CounterVec
}

// newOverload makes the watcher and registers its series on reg; start
// runs it.
func newOverload(src overloadSource, log *slog.Logger, reg prometheus.Registerer) *overload {
	const ns = "slidelimit_gateway_overload_"
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + name, Help: help})
	}
	o := &overload{
		log: log, src: src,
		state:      gauge("state", "1 while the gateway is in its protective state (sheddable rules answer overload.status), 0 otherwise."),
		gcP99:      gauge("gc_pause_p99_seconds", "The 99th percentile of the GC stop-the-world pauses of the last overload.gc_window_ms (the lower edge of its runtime histogram bucket), at the last sample."),
		gcPauses:   gauge("gc_pauses", "GC stop-the-world pauses in the last overload.gc_window_ms, at the last sample (below overload.gc_min_pauses the p99 is not judged)."),
		heapLive:   gauge("heap_live_bytes", "The live heap (what the last GC marked), at the last sample."),
		heapBudget: gauge("heap_budget_bytes", "The heap budget overload.heap_percent is of: overload.heap_budget_mb, else GOMEMLIMIT; 0 when neither is set."),
		entries: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "entries_total",
			Help: "Times the gateway entered its protective state."}),
		exits: prometheus.NewCounter(prometheus.CounterOpts{Name: ns + "exits_total",
			Help: "Times the gateway left its protective state."}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + "shed_total",
			Help: "Requests answered overload.status in the protective state, by the sheddable rule or tier that would have decided them."}, []string{"rule"}),
	}
	o.rt = newRuntimeSampler(src)
	o.sample = o.rt.read
	reg.MustRegister(o.state, o.gcP99, o.gcPauses, o.heapLive, o.heapBudget, o.entries, o.exits, o.shed)
	return o
}

// start runs the sampler until close.
func (o *overload) start() {
	o.stop, o.done = make(chan struct{}), make(chan struct{})
	go o.run()
}

// close stops the sampler; it may be called more than once.
func (o *overload) close() {
	o.closeOnce.Do(func() {
		if o.stop != nil {
			close(o.stop)
			<-o.done
		}
	})
}

func (o *overload) run() {
	defer close(o.done)
	t := time.NewTimer(o.interval())
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
			o.tick()
			t.Reset(o.interval())
		}
	}
}

func (o *overload) interval() time.Duration {
	if c := o.src.overloadSection(); c != nil && c.enabled {
		return c.interval
	}
	// Off, or not loaded yet: look again at the default pace, to notice
	// a reload that turns it on.
	return defaultOverloadInterval
}

// tick takes one sample of the running configuration's readings and
// moves the state.
func (o *overload) tick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.src.overloadSection()
	if c != o.seen {
		o.seen = c
		if c != nil {
			o.describe(c)
		}
	}
	if c == nil || !c.enabled {
		if o.protective.Load() {
			o.leave("overload protection turned off by a reload", overloadReadings{})
		}
		o.badRun = 0
		// No reading is taken while off: zero the gauges rather than
		// leave the last sample's on /metrics, where alerts.yml would go
		// on firing (or staying silent) on a value no longer measured.
		o.export(overloadReadings{})
		if o.rt != nil {
			// The GC window's snapshots stop while off: the first
			// windows after a reload turns it on again would span the
			// whole pause, judging pauses long gone.
			o.rt.forget()
		}
		return
	}
	r := o.sample(c)
	o.export(r)
	if !o.protective.Load() {
		over := c.over(r, 1)
		if len(over) == 0 {
			o.badRun = 0
			return
		}
		o.badRun++
		if o.badRun >= c.enterAfter {
			o.enter(c, r, over)
		}
		return
	}
	if len(c.over(r, c.exitRatio)) > 0 {
		o.goodRun = 0
		return
	}
	o.goodRun++
	if o.goodRun >= c.exitAfter {
		o.leave("every reading below exit_percent of its threshold", r)
	}
}

// export sets the reading gauges to r.
func (o *overload) export(r overloadReadings) {
	o.gcP99.Set(r.gcP99.Seconds())
	o.gcPauses.Set(float64(r.gcPauses))
	o.heapLive.Set(float64(r.heapLive))
	o.heapBudget.Set(float64(r.heapBudget))
}

func (o *overload) enter(c *overloadConfig, r overloadReadings, over []string) {
	o.since = time.Now()
	o.badRun, o.goodRun = 0, 0
	o.shedNow.Store(0)
	o.protective.Store(true)
	o.state.Set(1)
	o.entries.Inc()
	o.log.Warn("overload: entering the protective state",
		append([]any{"over", over, "samples", c.enterAfter, "sheddable", c.sheddable, "status", c.status,
			"retry_after", c.retryAfter.String()}, r.attrs()...)...)
}

func (o *overload) leave(why string, r overloadReadings) {
	o.protective.Store(false)
	o.badRun, o.goodRun = 0, 0
	o.state.Set(0)
	o.exits.Inc()
	o.log.Info("overload: leaving the protective state",
		append([]any{"why", why, "lasted", time.Since(o.since).Round(time.Millisecond).String(), "shed", o.shedNow.Load()}, r.attrs()...)...)
}

// describe logs what a newly loaded section watches.
func (o *overload) describe(c *overloadConfig) {
	if !c.enabled {
		o.log.Info("overload: protection off (overload.enabled: false)")
		return
	}
	heap := "off"
	if c.heapPercent > 0 {
		switch b := c.heapBudget; {
		case b > 0:
			heap = fmt.Sprintf("%v%% of heap_budget_mb %d", c.heapPercent, b>>20)
		case memLimit() > 0:
			heap = fmt.Sprintf("%v%% of GOMEMLIMIT %d MB", c.heapPercent, memLimit()>>20)
		default:
			heap = "off: neither heap_budget_mb nor GOMEMLIMIT is set"
		}
	}
	gc := "off"
	if c.gcPauseP99 > 0 {
		gc = c.gcPauseP99.String()
	}
	o.log.Info("overload: watching", "interval", c.interval.String(), "gc_pause_p99", gc,
		"gc_window", c.gcWindow.String(), "gc_min_pauses", c.gcMinPauses, "heap", heap,
		"max_in_flight", c.maxInFlight, "key_table_percent", c.keyTablePercent,
		"enter_after", c.enterAfter, "exit_after", c.exitAfter, "exit_percent", c.exitRatio*100, "sheddable", c.sheddable)
}

func (r overloadReadings) attrs() []any {
	return []any{"gc_pause_p99", r.gcP99.String(), "gc_pauses", r.gcPauses, "heap_live_bytes", r.heapLive,
		"heap_budget_bytes", r.heapBudget, "in_flight", r.inFlight, "key_table_percent", r.keyTable}
}

// handler wraps next (the generation's middleware and proxy) with
// shedding for configuration c; next itself when c sheds nothing.
func (o *overload) handler(c *config, next http.Handler) http.Handler {
	oc := &c.overload
	if o == nil || !oc.enabled || oc.classify == nil {
		return next
	}
	h := &shedHandler{o: o, c: oc, next: next, probe: oc.classify.Handler(nopHandler), counters: map[string]prometheus.Counter{}}
	for _, n := range oc.sheddable {
		h.counters[n] = o.shed.WithLabelValues(n)
	}
	return h
}

type shedHandler struct {
	o        *overload
	c        *overloadConfig
	next     http.Handler
	probe    http.Handler
	counters map[string]prometheus.Counter // per sheddable rule
}

func (h *shedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.o.protective.Load() {
		h.next.ServeHTTP(w, r)
		return
	}
	p := &shedProbe{}
	h.probe.ServeHTTP(p, r)
	if p.rule == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	h.o.shedNow.Add(1)
	if c := h.counters[p.rule]; c != nil {
		c.Inc()
	}
	h.c.deny(w, r, httplimit.Denial{Rule: p.rule, RetryAfter: h.c.retryAfter})
}

// memLimit is GOMEMLIMIT (or what debug.SetMemoryLimit set), 0 if none.
func memLimit() uint64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return uint64(l)
	}
	return 0
}

// runtimeSampler reads the runtime's and the gateway's health. The GC
// window is a ring of cumulative pause-histogram snapshots, one per
// sample: the pauses of the window are the newest snapshot less the one
// gc_window_ms older.
type runtimeSampler struct {
	src     overloadSource
	samples []rtmetrics.Sample // GC pauses, live heap
	buckets []float64
	ring    [][]uint64
	next    int // ring slot the next snapshot goes to
	filled  int // snapshots in the ring
}

func newRuntimeSampler(src overloadSource) *runtimeSampler {
	s := &runtimeSampler{src: src, samples: []rtmetrics.Sample{
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/gc/heap/live:bytes"},
	}}
	rtmetrics.Read(s.samples)
	if s.samples[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		// Before Go 1.22; the name is kept as a deprecated alias after.
		s.samples[0].Name = "/gc/pauses:seconds"
		rtmetrics.Read(s.samples)
	}
	return s
}

func (s *runtimeSampler) read(c *overloadConfig) overloadReadings {
	var r overloadReadings
	rtmetrics.Read(s.samples)
	if s.samples[0].Value.Kind() == rtmetrics.KindFloat64Histogram {
		r.gcP99, r.gcPauses = s.gcWindow(s.samples[0].Value.Float64Histogram(), c)
	}
	if s.samples[1].Value.Kind() == rtmetrics.KindUint64 {
		r.heapLive = s.samples[1].Value.Uint64()
	}
	r.heapBudget = c.heapBudget
	if r.heapBudget == 0 {
		r.heapBudget = memLimit()
	}
	r.inFlight = s.src.inFlightCount()
	for _, e := range s.src.currentEngines() {
		if st := e.Limiter.Stats(); st.MaxKeys > 0 {
			r.keyTable = max(r.keyTable, float64(st.Keys)*100/float64(st.MaxKeys))
		}
	}
	return r
}

// forget drops the GC window's snapshots: the next read starts afresh.
func (s *runtimeSampler) forget() { s.ring, s.next, s.filled = nil, 0, 0 }

// gcWindow records h's counts and returns the p99 and the number of the
// pauses since the oldest snapshot of the window.
func (s *runtimeSampler) gcWindow(h *rtmetrics.Float64Histogram, c *overloadConfig) (time.Duration, uint64) {
	size := int(c.gcWindow/c.interval) + 1 // snapshots spanning gc_window
	if len(s.ring) != size || !slices.Equal(s.buckets, h.Buckets) {
		// First sample, or a reload changed the window: start afresh.
		s.ring, s.next, s.filled = make([][]uint64, size), 0, 0
		s.buckets = slices.Clone(h.Buckets)
	}
	if s.ring[s.next] == nil {
		s.ring[s.next] = make([]uint64, len(h.Counts))
	}
	copy(s.ring[s.next], h.Counts)
	newest := s.ring[s.next]
	s.next = (s.next + 1) % size
	s.filled = min(s.filled+1, size)
	oldest := s.ring[(s.next-s.filled+size)%size]
	var total uint64
	for i := range newest {
		total += newest[i] - oldest[i]
	}
	if total == 0 {
		return 0, 0
	}
	return histP99(s.buckets, newest, oldest, total), total
}

// histP99 is the lower edge of the bucket holding the 99th percentile of
// the counts newest - oldest (total of them). buckets[i] and buckets[i+1]
// bound counts[i]; the first edge may be -Inf.
func histP99(buckets []float64, newest, oldest []uint64, total uint64) time.Duration {
	rank := (total*99 + 99) / 100 // ceil(0.99 total), >= 1
	var seen uint64
	for i := range newest {
		seen += newest[i] - oldest[i]
		if seen >= rank {
			lo := buckets[i]
			if lo <= 0 || math.IsInf(lo, 0) {
				return 0
			}
			return time.Duration(lo * float64(time.Second))
		}
	}
	return 0
}
