package main

import (
	"net/http"

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
	upstreamErrors *prometheus.CounterVec
	reloads        *prometheus.CounterVec
}

func newMetrics(inflight func() float64) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
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
	m.reg.MustRegister(m.upstreamErrors, m.reloads,
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
