package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/slidelimit/slidelimit/redisstore"
)

// redisDescs are the series of a redisstore.Stats.
type redisDescs struct {
	calls, decisions, faults, breakerOpens, breakerOpen, policy *prometheus.Desc
	evicted, evictionUnchecked, evictedUnknown, clockReads      *prometheus.Desc
}

func newRedisDescs(ns string) redisDescs {
	rule := []string{"rule"}
	return redisDescs{
		calls:        prometheus.NewDesc(ns+"redis_calls_total", "Decisions, peeks and resets asked of a rule's Redis store.", rule, nil),
		decisions:    prometheus.NewDesc(ns+"redis_decisions_total", "Decisions of a rule's Redis store (by Redis or by its failure policy), by outcome: allowed, denied, invalid (n <= 0 or above the limit: never sent, neither allowed nor denied).", []string{"rule", "outcome"}, nil),
		faults:       prometheus.NewDesc(ns+"redis_faults_total", "Calls of a rule's Redis store that Redis did not answer in time, by kind: timeout, late (reached Redis after its deadline), error, canceled (the caller left), key_too_long (never sent), short_circuit (breaker open, never sent).", []string{"rule", "kind"}, nil),
		breakerOpens: prometheus.NewDesc(ns+"redis_breaker_opens_total", "Times the circuit breaker of a rule's Redis store opened.", rule, nil),
		breakerOpen:  prometheus.NewDesc(ns+"redis_breaker_open", "1 while the circuit breaker of a rule's Redis store is open or half-open.", rule, nil),
		policy:       prometheus.NewDesc(ns+"redis_policy_decisions_total", "Decisions a rule's Redis store left to its failure policy, by policy: fail_open, fail_closed, fail_local.", []string{"rule", "policy"}, nil),
		evicted: prometheus.NewDesc(ns+"redis_evicted_keys_total",
			"Keys the Redis servers of a rule's store evicted since the store was made (INFO evicted_keys, any owner's: an evicted limiter key grants its whole limit again).", rule, nil),
		evictionUnchecked: prometheus.NewDesc(ns+"redis_eviction_unchecked",
			"1 when the store could not read a server's maxmemory-policy at start (CONFIG denied, a server unreachable): nothing but the operator guards against evicted limiter keys.", rule, nil),
		evictedUnknown: prometheus.NewDesc(ns+"redis_evicted_keys_unknown",
			"1 when the latest evicted_keys sample of a rule's store missed a server (INFO denied, a server down): redis_evicted_keys_total lacks its evictions.", rule, nil),
		clockReads: prometheus.NewDesc(ns+"redis_clock_reads_total",
			"Reads of a server's TIME a rule's store made before a call, because its estimate of the server's clock was missing or stale.", rule, nil),
	}
}

func (d *redisDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.calls, d.decisions, d.faults, d.breakerOpens, d.breakerOpen, d.policy,
		d.evicted, d.evictionUnchecked, d.evictedUnknown, d.clockReads} {
		ch <- x
	}
}

func (d *redisDescs) collect(ch chan<- prometheus.Metric, rule string, s redisstore.Stats) {
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	counter(d.calls, s.Calls, rule)
	counter(d.decisions, s.Allowed, rule, "allowed")
	counter(d.decisions, s.Denied, rule, "denied")
	counter(d.decisions, s.Invalid, rule, "invalid")
	counter(d.faults, s.Timeouts, rule, "timeout")
	counter(d.faults, s.Late, rule, "late")
	counter(d.faults, s.Errors, rule, "error")
	counter(d.faults, s.Canceled, rule, "canceled")
	counter(d.faults, s.KeysTooLong, rule, "key_too_long")
	counter(d.faults, s.ShortCircuits, rule, "short_circuit")
	counter(d.breakerOpens, s.BreakerOpens, rule)
	gauge := func(desc *prometheus.Desc, b bool) {
		v := 0.0
		if b {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, rule)
	}
	gauge(d.breakerOpen, s.BreakerOpen)
	counter(d.policy, s.FailOpen, rule, "fail_open")
	counter(d.policy, s.FailClosed, rule, "fail_closed")
	counter(d.policy, s.FailLocal, rule, "fail_local")
	counter(d.evicted, s.EvictedKeys, rule)
	gauge(d.evictionUnchecked, s.EvictionUnchecked)
	gauge(d.evictedUnknown, s.EvictedKeysUnknown)
	counter(d.clockReads, s.ClockReads, rule)
}

// hybridDescs are the series of a redisstore.HybridStats beyond its Store.
type hybridDescs struct {
	decisions, misses, late, syncs, syncedKeys, leased, returned, pipelineFaults, scriptLoads, keys *prometheus.Desc
}

func newHybridDescs(ns string) hybridDescs {
	rule := []string{"rule"}
	return hybridDescs{
		decisions:      prometheus.NewDesc(ns+"hybrid_decisions_total", "Decisions of a rule's Redis hybrid, by outcome: allowed, denied, invalid (n <= 0 or above the limit: neither allowed nor denied).", []string{"rule", "outcome"}, nil),
		misses:         prometheus.NewDesc(ns+"hybrid_misses_total", "Decisions of a rule's Redis hybrid that found no live lease and waited for one.", rule, nil),
		late:           prometheus.NewDesc(ns+"hybrid_late_total", "Misses of a rule's Redis hybrid whose wait ran past its Timeout (decided by its failure policy).", rule, nil),
		syncs:          prometheus.NewDesc(ns+"hybrid_syncs_total", "Background batches a rule's Redis hybrid sent.", rule, nil),
		syncedKeys:     prometheus.NewDesc(ns+"hybrid_synced_keys_total", "Key entries in the batches a rule's Redis hybrid sent.", rule, nil),
		leased:         prometheus.NewDesc(ns+"hybrid_leased_tokens_total", "Tokens Redis granted a rule's hybrid.", rule, nil),
		returned:       prometheus.NewDesc(ns+"hybrid_returned_tokens_total", "Unspent tokens a rule's hybrid gave back.", rule, nil),
		pipelineFaults: prometheus.NewDesc(ns+"hybrid_pipeline_faults_total", "Lease requests of a rule's hybrid that failed.", rule, nil),
		scriptLoads:    prometheus.NewDesc(ns+"hybrid_script_loads_total", "NOSCRIPT answers that made a rule's hybrid resend a batch by EVAL.", rule, nil),
		keys:           prometheus.NewDesc(ns+"hybrid_keys", "Keys a rule's hybrid tracks on this node now.", rule, nil),
	}
}

func (d *hybridDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.decisions, d.misses, d.late, d.syncs, d.syncedKeys, d.leased, d.returned, d.pipelineFaults, d.scriptLoads, d.keys} {
		ch <- x
	}
}

func (d *hybridDescs) collect(ch chan<- prometheus.Metric, rule string, s redisstore.HybridStats) {
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	counter(d.decisions, s.Allowed, rule, "allowed")
	counter(d.decisions, s.Denied, rule, "denied")
	counter(d.decisions, s.Invalid, rule, "invalid")
	counter(d.misses, s.Misses, rule)
	counter(d.late, s.Late, rule)
	counter(d.syncs, s.Syncs, rule)
	counter(d.syncedKeys, s.SyncedKeys, rule)
	counter(d.leased, s.Leased, rule)
	counter(d.returned, s.Returned, rule)
	counter(d.pipelineFaults, s.PipelineFaults, rule)
	counter(d.scriptLoads, s.ScriptLoads, rule)
	ch <- prometheus.MustNewConstMetric(d.keys, prometheus.GaugeValue, float64(s.Keys), rule)
}
