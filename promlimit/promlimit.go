// Package promlimit exports slidelimit's counters to Prometheus: an
// importable prometheus.Collector for the decisions of httplimit
// middleware (fed by its Observe hook), the key tables of in-memory
// engine.Limiters, and the faults and policy decisions of redisstore's
// Stores and Hybrids. It is its own module, so that engine and httplimit
// keep importing only the standard library and programs that do not use
// Prometheus compile none of client_golang.
//
// The metric names and labels are those the example gateway (cmd/gateway)
// exposes, with Options.Namespace in front ("slidelimit" by default,
// "slidelimit_gateway" gives the gateway's names):
//
//	NS_decisions_total{rule,outcome}   counter   middleware decisions: allowed, denied, dry_run_denied, key_error (Observe)
//	NS_backend_errors_total{rule}      counter   decisions a remote backend failed to make; its failure policy answered (Observe)
//	NS_decision_seconds{rule}          histogram the middleware's time per request and rule (Observe)
//	NS_keys{rule}                      gauge     keys an in-memory limiter tracks now (Engines)
//	NS_key_overflow_total{rule}        counter   new keys that found the key table full of active keys (Engines)
//
// and, beyond what the gateway exported before this package:
//
//	NS_max_keys{rule}, NS_key_bytes{rule}                       gauges    the key bound and the bytes of key state (Engines)
//	NS_keys_inserted_total{rule}, NS_keys_reclaimed_total{rule} counters  keys created, idle keys reclaimed (Engines)
//	NS_engine_decisions_total{rule,outcome}                     counter   the engine's own allowed/denied/invalid (Engines)
//	NS_requests_total{outcome}                                  counter   middleware requests by what happened to them (Middlewares)
//	NS_redis_*{rule,...}                                        Store and Hybrid decisions, faults, breaker, policy decisions, evictions, clock reads (Stores, Hybrids)
//	NS_hybrid_*{rule}                                           Hybrid leases and syncs (Hybrids)
//
// Guarantees: counters are monotonic for as long as the objects they read
// live (a Limiter, Store or Middleware that a reload replaces starts from
// zero, which Prometheus's rate() reads as a counter reset); the Observe
// series live in the Collector and survive such replacements. Collect
// reads each object's Stats once per scrape; the lists (Options.Engines,
// ...) are called once per scrape and must not name one rule twice in one
// list (the registry rejects the duplicate series at scrape). Observe on a
// rule already seen costs a lookup in a copy-on-write map and the atomic
// updates of its counters and histogram, takes no lock and never
// allocates. Every method is safe for concurrent use.
package promlimit

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
	"github.com/slidelimit/slidelimit/redisstore"
)

// Engine is one in-memory limiter, labelled by the rule it serves.
type Engine struct {
	Rule    string
	Limiter *engine.Limiter
}

// Store is one Redis store, labelled by the rule it serves. A Hybrid's own
// Store goes in Options.Hybrids only.
type Store struct {
	Rule  string
	Store *redisstore.Store
}

// Hybrid is one Redis hybrid, labelled by the rule it serves.
type Hybrid struct {
	Rule   string
	Hybrid *redisstore.Hybrid
}

// Options configures a Collector. Every field is optional.
type Options struct {
	// Namespace is the prefix of every metric name, "slidelimit" if
	// empty. cmd/gateway uses "slidelimit_gateway".
	Namespace string
	// Buckets of NS_decision_seconds, in seconds, increasing. Nil means
	// 1 µs to about 1 s in powers of two (in-memory decisions sit in the
	// lowest buckets, Redis round trips around a millisecond).
	Buckets []float64
	// Engines, Stores, Hybrids and Middlewares list what to read at each
	// scrape (called once per Collect; nil exports nothing of that kind).
	// Functions rather than slices so that a program that swaps its
	// limiters (a configuration reload) exports the current ones.
	Engines     func() []Engine
	Stores      func() []Store
	Hybrids     func() []Hybrid
	Middlewares func() []*httplimit.Middleware
}

// DefaultBuckets are NS_decision_seconds's buckets when Options.Buckets is
// nil: 1 µs to about 1 s, doubling.
var DefaultBuckets = prometheus.ExponentialBuckets(1e-6, 2, 21)

// nameRE is a metric name prefix without ':', which Prometheus reserves
// for recording rules (promlint flags it in exported names).
var nameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Collector is a prometheus.Collector of slidelimit's series. Register it
// once; feed it middleware decisions through Observe (or per-rule handles
// from Rules).
type Collector struct {
	opts          Options
	decisions     *prometheus.CounterVec
	backendErrors *prometheus.CounterVec
	latency       *prometheus.HistogramVec

	rules atomic.Pointer[map[string]*Rule] // copy on write, under mu
	mu    sync.Mutex

	engineDescs [7]*prometheus.Desc // keys, over, maxKeys, bytes, inserted, reclaimed, decisions
	reqDesc     *prometheus.Desc
	fallbacks   *prometheus.Desc
	redis       redisDescs
	hybrid      hybridDescs
}

// New builds a Collector. An invalid Namespace or Buckets is an error
// naming the field.
func New(opts Options) (*Collector, error) {
	if opts.Namespace == "" {
		opts.Namespace = "slidelimit"
	}
	if !nameRE.MatchString(opts.Namespace) {
		return nil, fmt.Errorf("promlimit: Options.Namespace %q is not a metric name prefix ([a-zA-Z_][a-zA-Z0-9_]*)", opts.Namespace)
	}
	if opts.Buckets == nil {
		opts.Buckets = DefaultBuckets
	}
	for i, b := range opts.Buckets {
		if math.IsNaN(b) {
			return nil, fmt.Errorf("promlimit: Options.Buckets[%d] is NaN", i)
		}
	}
	for i := 1; i < len(opts.Buckets); i++ {
		if opts.Buckets[i] <= opts.Buckets[i-1] {
			return nil, fmt.Errorf("promlimit: Options.Buckets must be increasing: [%d] %g follows %g", i, opts.Buckets[i], opts.Buckets[i-1])
		}
	}
	ns := opts.Namespace + "_"
	c := &Collector{
		opts: opts,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "decisions_total",
			Help: "Rate-limit decisions per rule and outcome: allowed, denied, dry_run_denied, key_error. With stacked rules a request counts in each rule that decided it.",
		}, []string{"rule", "outcome"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "backend_errors_total",
			Help: "Decisions a rule's remote backend (Redis) failed to make; its failure policy answered (also counted in decisions_total).",
		}, []string{"rule"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ns + "decision_seconds",
			Help:    "The middleware's own time per request and rule: key functions and backend calls, not the upstream.",
			Buckets: opts.Buckets,
		}, []string{"rule"}),
		reqDesc: prometheus.NewDesc(ns+"requests_total",
			"Requests the middleware handled, by what happened: allowed, denied, dry_run_denied, failed_open, failed_closed, unmatched, exempt (each request once).", []string{"outcome"}, nil),
		fallbacks: prometheus.NewDesc(ns+"key_fallbacks_total",
			"Requests whose key function failed and that were decided by the fallback key (also counted by outcome).", nil, nil),
	}
	empty := map[string]*Rule{}
	c.rules.Store(&empty)
	rule := []string{"rule"}
	c.engineDescs = [7]*prometheus.Desc{
		prometheus.NewDesc(ns+"keys", "Keys an in-memory rule's limiter tracks now (its memory bound caps them).", rule, nil),
		prometheus.NewDesc(ns+"key_overflow_total", "New keys that found an in-memory rule's key table full of active keys: admitted untracked (OverflowAllow) or refused (OverflowDeny). Counts from the limiter's creation.", rule, nil),
		prometheus.NewDesc(ns+"max_keys", "The key bound of an in-memory rule's limiter (from its MaxMemory or MaxKeys).", rule, nil),
		prometheus.NewDesc(ns+"key_bytes", "Bytes of key state an in-memory rule's limiter holds now.", rule, nil),
		prometheus.NewDesc(ns+"keys_inserted_total", "Keys an in-memory rule's limiter created.", rule, nil),
		prometheus.NewDesc(ns+"keys_reclaimed_total", "Idle keys an in-memory rule's limiter reclaimed (sweep or lazy reuse).", rule, nil),
		prometheus.NewDesc(ns+"engine_decisions_total", "Decisions an in-memory rule's limiter made, by outcome: allowed, denied, invalid (calls no wait could admit: n <= 0 or above the limit; neither allowed nor denied).", []string{"rule", "outcome"}, nil),
	}
	c.redis = newRedisDescs(ns)
	c.hybrid = newHybridDescs(ns)
	return c, nil
}

// Describe sends every descriptor the Collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.backendErrors.Describe(ch)
	c.latency.Describe(ch)
	for _, d := range c.engineDescs {
		ch <- d
	}
	ch <- c.reqDesc
	ch <- c.fallbacks
	c.redis.describe(ch)
	c.hybrid.describe(ch)
}

// Collect sends the Observe series and a snapshot of every listed object's
// Stats.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.backendErrors.Collect(ch)
	c.latency.Collect(ch)
	if c.opts.Engines != nil {
		d := &c.engineDescs
		for _, e := range c.opts.Engines() {
			if e.Limiter == nil {
				continue
			}
			st := e.Limiter.Stats()
			ch <- prometheus.MustNewConstMetric(d[0], prometheus.GaugeValue, float64(st.Keys), e.Rule)
			ch <- prometheus.MustNewConstMetric(d[1], prometheus.CounterValue, float64(st.Overflow), e.Rule)
			ch <- prometheus.MustNewConstMetric(d[2], prometheus.GaugeValue, float64(st.MaxKeys), e.Rule)
			ch <- prometheus.MustNewConstMetric(d[3], prometheus.GaugeValue, float64(st.Bytes), e.Rule)
			ch <- prometheus.MustNewConstMetric(d[4], prometheus.CounterValue, float64(st.Inserts), e.Rule)
			ch <- prometheus.MustNewConstMetric(d[5], prometheus.CounterValue, float64(st.Reclaimed), e.Rule)
			ch <- prometheus.MustNewConstMetric(d[6], prometheus.CounterValue, float64(st.Allowed), e.Rule, "allowed")
			ch <- prometheus.MustNewConstMetric(d[6], prometheus.CounterValue, float64(st.Denied), e.Rule, "denied")
			ch <- prometheus.MustNewConstMetric(d[6], prometheus.CounterValue, float64(st.Invalid), e.Rule, "invalid")
		}
	}
	if c.opts.Middlewares != nil {
		var sum httplimit.Stats
		n := 0
		for _, m := range c.opts.Middlewares() {
			if m == nil {
				continue
			}
			s := m.Stats()
			sum.Allowed += s.Allowed
			sum.Denied += s.Denied
			sum.DryRunDenied += s.DryRunDenied
			sum.FailedOpen += s.FailedOpen
			sum.FailedClosed += s.FailedClosed
			sum.Unmatched += s.Unmatched
			sum.Exempt += s.Exempt
			sum.Fallbacks += s.Fallbacks
			n++
		}
		if n > 0 {
			for _, o := range []struct {
				name string
				v    uint64
			}{
				{"allowed", sum.Allowed}, {"denied", sum.Denied}, {"dry_run_denied", sum.DryRunDenied},
				{"failed_open", sum.FailedOpen}, {"failed_closed", sum.FailedClosed},
				{"unmatched", sum.Unmatched}, {"exempt", sum.Exempt},
			} {
				ch <- prometheus.MustNewConstMetric(c.reqDesc, prometheus.CounterValue, float64(o.v), o.name)
			}
			ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(sum.Fallbacks))
		}
	}
	if c.opts.Stores != nil {
		for _, s := range c.opts.Stores() {
			if s.Store != nil {
				c.redis.collect(ch, s.Rule, s.Store.Stats())
			}
		}
	}
	if c.opts.Hybrids != nil {
		for _, h := range c.opts.Hybrids() {
			if h.Hybrid != nil {
				st := h.Hybrid.Stats()
				c.redis.collect(ch, h.Rule, st.Store)
				c.hybrid.collect(ch, h.Rule, st)
			}
		}
	}
}

// Rule is one rule's Observe series, resolved once so that a decision
// costs atomic adds, not label hashing.
type Rule struct {
	outcome    [4]prometheus.Counter // by httplimit.Outcome
	backendErr prometheus.Counter
	latency    prometheus.Observer
}

// Observe counts one rule decision: its outcome, its latency (Event.Latency,
// which httplimit measures only while Options.Observe is set) and, when
// Err is set on an outcome other than key_error, a backend error.
func (r *Rule) Observe(e httplimit.Event) {
	if int(e.Outcome) < len(r.outcome) {
		r.outcome[e.Outcome].Inc()
	}
	r.latency.Observe(e.Latency.Seconds())
	if e.Err != nil && e.Outcome != httplimit.OutcomeKeyError {
		r.backendErr.Inc()
	}
}

// Observe has the shape of httplimit.Options.Observe: set it there (or call
// it from your own hook) and every rule decision is counted under the
// rule's name. A rule's series are made on its first decision, or ahead of
// time by Rules.
func (c *Collector) Observe(_ *http.Request, e httplimit.Event) {
	if r := (*c.rules.Load())[e.Rule]; r != nil {
		r.Observe(e)
		return
	}
	c.Rules([]string{e.Rule})[e.Rule].Observe(e)
}

// Rules returns the series of the named rules, making those not seen yet
// (with every outcome at 0, so they are exported before the first
// decision). A program that builds its hook per configuration resolves its
// rules here once and calls Rule.Observe.
func (c *Collector) Rules(names []string) map[string]*Rule {
	out := make(map[string]*Rule, len(names))
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := *c.rules.Load()
	var next map[string]*Rule
	for _, n := range names {
		if r := cur[n]; r != nil {
			out[n] = r
			continue
		}
		if next == nil {
			next = make(map[string]*Rule, len(cur)+len(names))
			for k, v := range cur {
				next[k] = v
			}
		}
		r := &Rule{backendErr: c.backendErrors.WithLabelValues(n), latency: c.latency.WithLabelValues(n)}
		for o := range r.outcome {
			r.outcome[o] = c.decisions.WithLabelValues(n, httplimit.Outcome(o).String())
		}
		next[n] = r
		out[n] = r
	}
	if next != nil {
		c.rules.Store(&next)
	}
	return out
}

// Retain deletes the Observe series of every rule not in names (removed or
// renamed by a reload), so the scrape lists the running configuration's
// rules only. A retiring hook may still count into a deleted rule's
// handles; those counts are not exported.
func (c *Collector) Retain(names []string) {
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := *c.rules.Load()
	next := make(map[string]*Rule, len(cur))
	for n, r := range cur {
		if keep[n] {
			next[n] = r
			continue
		}
		for o := range r.outcome {
			c.decisions.DeleteLabelValues(n, httplimit.Outcome(o).String())
		}
		c.backendErrors.DeleteLabelValues(n)
		c.latency.DeleteLabelValues(n)
	}
	c.rules.Store(&next)
}
