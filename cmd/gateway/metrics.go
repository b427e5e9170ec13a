package main

import (
	"net/http"

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
	reg            *prometheus.Registry
	decisions      *prometheus.CounterVec
	backendErrors  *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	reloads        *prometheus.CounterVec
}

func newMetrics(inflight func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
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
	}
	for _, k := range []string{"timeout", "bad_gateway", "body_too_large", "client_gone"} {
		m.upstreamErrors.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	m.reg.MustRegister(m.decisions, m.backendErrors, m.latency, m.upstreamErrors, m.reloads,
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
// that a request costs a map lookup and atomic adds, not label hashing.
type ruleMetrics struct {
	outcome    [4]prometheus.Counter // by httplimit.Outcome
	backendErr prometheus.Counter
	latency    prometheus.Observer
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
	return out
}
