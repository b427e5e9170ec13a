package main

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus series, on a registry of its own
// (not the global one) served at /metrics on the admin listener. Only this
// command imports client_golang: engine and httplimit report through
// plain hooks, so a program that imports them compiles none of it.
type metrics struct {
	mu             sync.Mutex
	rules          map[string]bool // rule names with series; guarded by mu
	reg            *prometheus.Registry
	decisions      *prometheus.CounterVec
	backendErrors  *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	connsRefused   *prometheus.CounterVec
	connsEvicted   *prometheus.CounterVec
}

// engineCollector exports the key table of every in-memory limiter of the
// running configuration: keys tracked, and new keys that found the table
// full of active keys (admitted untracked under eviction_policy
// idle-allow, refused under idle-deny).
type engineCollector struct {
	engines func() []ruleEngine
	keys    *prometheus.Desc
	over    *prometheus.Desc
}

// ruleEngine is one rule's in-memory limiter.
type ruleEngine struct {
	rule string
	eng  *engine.Limiter
}

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.keys; ch <- c.over }

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, re := range c.engines() {
		st := re.eng.Stats()
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys), re.rule)
		ch <- prometheus.MustNewConstMetric(c.over, prometheus.CounterValue, float64(st.Overflow), re.rule)
	}
}

func newMetrics(inflight func() float64, engines func() []ruleEngine) *metrics {
	m := &metrics{
		rules: map[string]bool{},
		reg:   prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_gateway_decisions_total",
			Help: "Rate-limit decisions per rule and outcome: allowed, denied, dry_run_denied, key_error. With stacked rules a request counts in each rule that decided it.",
		}, []string{"rule", "outcome"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_gateway_backend_errors_total",
			Help: "Decisions a rule's remote backend (Redis) failed to make; its failure policy answered (also counted in decisions_total).",
		}, []string{"rule"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "slidelimit_gateway_decision_seconds",
			Help: "The middleware's own time per request and rule: key functions and backend calls, not the upstream.",
			// 1 us to about 1 s: in-memory decisions sit in the lowest
			// buckets, Redis round trips around a millisecond.
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 21),
		}, []string{"rule"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_gateway_upstream_errors_total",
			Help: "Requests the proxy could not complete, by kind: timeout (504), bad_gateway (502), body_too_large (413), client_gone.",
		}, []string{"kind"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_gateway_config_reloads_total",
			Help: "Configuration reloads (SIGHUP) by result: ok, or error (the previous configuration kept serving).",
		}, []string{"result"}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_gateway_connections_refused_total",
			Help: "Client connections answered 503 and closed unserved, by the bound they were over: max_connections, max_trusted_connections (every connection of the pool was serving a request) or max_connections_per_ip.",
		}, []string{"reason"}),
		connsEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_gateway_connections_evicted_total",
			Help: "Client connections without a request in progress (idle, or still sending a header) closed to make room for a new one in a full pool, by pool: public (max_connections) or trusted (max_trusted_connections).",
		}, []string{"pool"}),
	}
	for _, r := range []string{"max_connections", "max_trusted_connections", "max_connections_per_ip"} {
		m.connsRefused.WithLabelValues(r)
	}
	for _, p := range []string{"public", "trusted"} {
		m.connsEvicted.WithLabelValues(p)
	}
	for _, k := range []string{"timeout", "bad_gateway", "body_too_large", "client_gone"} {
		m.upstreamErrors.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	m.reg.MustRegister(m.decisions, m.backendErrors, m.latency, m.upstreamErrors, m.reloads, m.connsRefused, m.connsEvicted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slidelimit_gateway_requests_in_flight",
			Help: "Requests being served now.",
		}, inflight),
		engineCollector{
			engines: engines,
			keys: prometheus.NewDesc("slidelimit_gateway_keys",
				"Keys an in-memory rule's limiter tracks now (its memory_limit_mb bounds them).", []string{"rule"}, nil),
			over: prometheus.NewDesc("slidelimit_gateway_key_overflow_total",
				"New keys that found an in-memory rule's key table full of active keys: admitted untracked (eviction_policy idle-allow) or refused (idle-deny). Counts from the limiter's creation; a reload that rebuilds the rule starts it again.", []string{"rule"}, nil),
		},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) upstreamError(kind string) { m.upstreamErrors.WithLabelValues(kind).Inc() }

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ruleMetrics are one rule's series, resolved once per configuration so
// that a request costs a map lookup and atomic adds, not label hashing.
type ruleMetrics struct {
	outcome    [4]prometheus.Counter // by httplimit.Outcome
	backendErr prometheus.Counter
	latency    prometheus.Observer
	errLog     logThrottle // backend failures: one log line per interval
}

// logThrottle lets one log line through per errLogInterval and counts the
// events in between, so a Redis outage logs its cause without a line per
// request.
type logThrottle struct {
	next atomic.Int64 // unix ns before which nothing is logged
	held atomic.Int64 // events since the last line
}

const errLogInterval = 10 * time.Second

// tick records one event and reports whether to log it, with the number
// of events since the last line (this one included).
func (l *logThrottle) tick(now time.Time) (int64, bool) {
	n := l.held.Add(1)
	next, t := l.next.Load(), now.UnixNano()
	if t < next || !l.next.CompareAndSwap(next, t+int64(errLogInterval)) {
		return 0, false
	}
	l.held.Add(-n)
	return n, true
}

// retain deletes the series of rules that are not in names (removed or
// renamed by a reload), so /metrics lists the running configuration's
// rules only. A retiring generation may still count into the deleted
// children; those counts are not exported.
func (m *metrics) retain(names []string) {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := range m.rules {
		if keep[n] {
			continue
		}
		delete(m.rules, n)
		for o := range 4 {
			m.decisions.DeleteLabelValues(n, httplimit.Outcome(o).String())
		}
		m.backendErrors.DeleteLabelValues(n)
		m.latency.DeleteLabelValues(n)
	}
}

func (m *metrics) forRules(names []string) map[string]*ruleMetrics {
	out := make(map[string]*ruleMetrics, len(names))
	for _, n := range names {
		rm := &ruleMetrics{backendErr: m.backendErrors.WithLabelValues(n), latency: m.latency.WithLabelValues(n)}
		for o := range rm.outcome {
			rm.outcome[o] = m.decisions.WithLabelValues(n, httplimit.Outcome(o).String())
		}
		out[n] = rm
	}
	m.mu.Lock()
	for _, n := range names {
		m.rules[n] = true
	}
	m.mu.Unlock()
	return out
}
