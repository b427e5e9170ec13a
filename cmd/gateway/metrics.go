package main

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/promlimit"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus series, on a registry of its own
// (not the global one) served at /metrics on the admin listener. The rate
// limiting series (decisions, backend errors, decision latency, key
// tables) come from promlimit's Collector, under the namespace
// slidelimit_gateway; the proxy's and the listener's are the gateway's
// own. Only this command and promlimit import client_golang: engine and
// httplimit report through plain hooks, so a program that imports them
// compiles none of it.
type metrics struct {
	reg            *prometheus.Registry
	limits         *promlimit.Collector
	upstreamErrors *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	connsRefused   *prometheus.CounterVec
	connsEvicted   *prometheus.CounterVec
	cohorts        *cohortDecisions // decisions by rollout cohort (cohortmetrics.go)
}

// ruleEngine is one rule's in-memory limiter.
type ruleEngine = promlimit.Engine

// limiterSource lists the running configuration's backends by kind (the
// gateway), read at each scrape.
type limiterSource interface {
	currentEngines() []ruleEngine
	currentStores() []promlimit.Store
	currentHybrids() []promlimit.Hybrid
}

func newMetrics(inflight func() float64, src limiterSource) *metrics {
	limits, err := promlimit.New(promlimit.Options{Namespace: "slidelimit_gateway",
		Engines: src.currentEngines, Stores: src.currentStores, Hybrids: src.currentHybrids})
	if err != nil {
		panic(err) // a constant namespace and the default buckets: cannot fail
	}
	m := &metrics{
		reg:    prometheus.NewRegistry(),
		limits: limits,
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
	m.cohorts = newCohortDecisions()
	m.reg.MustRegister(m.cohorts.vec, m.limits, m.upstreamErrors, m.reloads, m.connsRefused, m.connsEvicted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slidelimit_gateway_requests_in_flight",
			Help: "Requests being served now.",
		}, inflight),
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
// that a request costs a map lookup and atomic adds, not label hashing,
// and the throttle of its backend-failure log lines.
type ruleMetrics struct {
	*promlimit.Rule
	cohort *cohortCounters // Observe (cohortmetrics.go) counts into both
	errLog logThrottle     // backend failures: one log line per interval
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
	m.limits.Retain(names)
	m.cohorts.retain(names)
}

// forRules returns the series of the named rules, made if new.
func (m *metrics) forRules(names []string) map[string]*ruleMetrics {
	rules := m.limits.Rules(names)
	out := make(map[string]*ruleMetrics, len(rules))
	for n, r := range rules {
		out[n] = &ruleMetrics{Rule: r, cohort: m.cohorts.forRule(n)}
	}
	return out
}
