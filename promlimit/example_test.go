package promlimit_test

import (
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/promlimit"
)

// A rate-limited API with its decisions, latency and key table on /metrics.
func Example() {
	eng, _ := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute})
	pm, _ := promlimit.New(promlimit.Options{
		Engines: func() []promlimit.Engine { return []promlimit.Engine{{Rule: "api", Limiter: eng}} },
	})
	prometheus.MustRegister(pm)
	mw, err := httplimit.New(httplimit.Options{
		Rules:   []httplimit.Rule{{Name: "api", Limiter: eng, Limit: 100, Window: time.Minute}},
		Observe: pm.Observe, // slidelimit_decisions_total, _backend_errors_total, _decision_seconds
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", promhttp.Handler())
	http.Handle("/api/", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
}
