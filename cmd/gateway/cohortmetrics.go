package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelimit/slidelimit/httplimit"
)

// cohortDecisions counts each policy's decisions by cohort (enforced: the
// clients it enforces; shadow: those it decides without refusing, under
// dry_run or outside enforce_percent) and outcome, so that a canary's two
// cohorts can be compared: their refusal rates are
//
//	sum by (rule, cohort) (rate(slidelimit_gateway_cohort_decisions_total{outcome=~"denied|dry_run_denied"}[5m]))
//	  / sum by (rule, cohort) (rate(slidelimit_gateway_cohort_decisions_total[5m]))
//
// The counters live in the gateway's registry, not in a generation's
// middleware, so they run on across reloads.
type cohortDecisions struct {
	vec  *prometheus.CounterVec
	mu   sync.Mutex
	made map[string]bool // rules with series; under mu
}

func newCohortDecisions() *cohortDecisions {
	return &cohortDecisions{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slidelimit_gateway_cohort_decisions_total",
		Help: "Rate-limit decisions per rule, cohort and outcome. cohort enforced: clients the rule enforces (outcome allowed or denied); shadow: clients it decides without refusing, under dry_run or outside enforce_percent (allowed or dry_run_denied). Compare the cohorts' refusal rates to judge a canary. Key errors have no cohort (see decisions_total).",
	}, []string{"rule", "cohort", "outcome"}), made: map[string]bool{}}
}

// cohortCounters are one rule's series: [shadow][refused].
type cohortCounters [2][2]prometheus.Counter

// forRule resolves the rule's series (made at 0 if new): the enforced
// cohort's allowed and denied, the shadow cohort's allowed and
// dry_run_denied.
func (c *cohortDecisions) forRule(rule string) *cohortCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made[rule] = true
	var cc cohortCounters
	for shadow, cohort := range [2]string{"enforced", "shadow"} {
		for refused, outcome := range [2]string{"allowed", "denied"} {
			if shadow == 1 && refused == 1 {
				outcome = "dry_run_denied"
			}
			cc[shadow][refused] = c.vec.WithLabelValues(rule, cohort, outcome)
		}
	}
	return &cc
}

// retain deletes the series of rules not in names.
func (c *cohortDecisions) retain(names []string) {
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.made {
		if !keep[n] {
			c.vec.DeletePartialMatch(prometheus.Labels{"rule": n})
			delete(c.made, n)
		}
	}
}

// observe counts one decision; key errors have no cohort.
func (cc *cohortCounters) observe(e httplimit.Event) {
	shadow := 0
	if e.Shadow {
		shadow = 1
	}
	switch e.Outcome {
	case httplimit.OutcomeAllowed:
		cc[shadow][0].Inc()
	case httplimit.OutcomeDenied, httplimit.OutcomeDryRunDenied:
		cc[shadow][1].Inc()
	}
}

// Observe counts one rule decision in promlimit's series and in its
// cohort's (it takes the place of the promoted promlimit.Rule.Observe).
func (m *ruleMetrics) Observe(e httplimit.Event) {
	m.Rule.Observe(e)
	m.cohort.observe(e)
}
