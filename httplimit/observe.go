package httplimit

import (
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// Outcome is what a rule did with a request, as Options.Observe sees it.
type Outcome uint8

const (
	OutcomeAllowed      Outcome = iota // admitted by the rule
	OutcomeDenied                      // refused by the rule
	OutcomeDryRunDenied                // would have been refused by a rule in shadow; passed on
	OutcomeKeyError                    // the rule's key function failed
)

// String returns a label fit for a metric: "allowed", "denied",
// "dry_run_denied" or "key_error".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeDenied:
		return "denied"
	case OutcomeDryRunDenied:
		return "dry_run_denied"
	case OutcomeKeyError:
		return "key_error"
	}
	return "unknown"
}

// Event is one rule's part in one request, passed to Options.Observe.
type Event struct {
	Rule    string // the rule's name
	Outcome Outcome
	// Latency is the time from before the first key function to the
	// report: key functions and backend calls of every applied rule.
	Latency time.Duration
	// Err is the key function's error with OutcomeKeyError; with any
	// other outcome a non-nil Err is a backend error (a remote store
	// failed or timed out) and Decision is its failure policy's answer.
	Err      error
	Decision engine.Decision
	// Shadow says the rule decided this key in shadow (Rule.DryRun or
	// Options.DryRun, or the key outside Rule.EnforcePercent): its
	// refusals are OutcomeDryRunDenied. False with OutcomeKeyError (no
	// key, no cohort). Count by (Rule, Shadow) to compare a canary's
	// enforced cohort with its shadow cohort.
	Shadow bool
}

// RuleStats counts what one rule decided. Under MatchAll (and where a
// rule on trial decides a key in shadow and the rule that enforces it
// stands in beside it: see Options.Rules) a request counts once in each
// rule that admitted it and took a unit, and a refused one only in the
// rules that refused it. BackendErrors also counts in the
// outcome it came with.
//
// The two cohorts (Rule.DryRun, Rule.EnforcePercent): Denied counts only
// the enforced cohort's refusals and DryRunDenied only the shadow
// cohort's would-be refusals; Allowed counts both cohorts, ShadowAllowed
// the shadow cohort's part. Enforced and Shadow split them.
type RuleStats struct {
	Rule          string
	Allowed       uint64
	Denied        uint64
	DryRunDenied  uint64
	KeyErrors     uint64
	BackendErrors uint64
	ShadowAllowed uint64
}

// CohortStats counts one cohort's decisions of a rule.
type CohortStats struct {
	Allowed uint64
	// Refused is what the cohort's rule refused (Denied) in the enforced
	// cohort, and would have refused (DryRunDenied) in the shadow cohort.
	Refused uint64
}

// Enforced returns the enforced cohort's counts: the keys the rule
// enforces.
func (s RuleStats) Enforced() CohortStats {
	return CohortStats{Allowed: s.Allowed - s.ShadowAllowed, Refused: s.Denied}
}

// Shadow returns the shadow cohort's counts: the keys the rule decides
// without refusing (Rule.DryRun, or outside Rule.EnforcePercent). Its
// Refused over Allowed + Refused is the refusal rate the rule would have
// there, comparable with Enforced's.
func (s RuleStats) Shadow() CohortStats {
	return CohortStats{Allowed: s.ShadowAllowed, Refused: s.DryRunDenied}
}

// RuleStats returns per-rule counters, in Options.Rules order, then the
// default rule, then the preflight rule, summed over stripes (concurrent requests may be missed, as
// with Stats). It allocates the slice and is meant for scrapes, not for
// every request.
func (m *Middleware) RuleStats() []RuleStats {
	out := make([]RuleStats, 0, m.nRules)
	add := func(ru *rule) {
		rs := RuleStats{Rule: ru.name}
		for s := range m.stripes {
			c := m.ruleCounters(uint32(s), ru)
			// shadowAllowed before allowed: admit adds to allowed first,
			// so every shadow admission read here has its allowed unit
			// in the later read, and ShadowAllowed <= Allowed (Enforced
			// subtracts them). Read the other way round, admissions
			// between the two loads (many, when the reader is preempted)
			// made Enforced().Allowed wrap to near 2^64.
			rs.ShadowAllowed += c.shadowAllowed.Load()
			rs.Allowed += c.allowed.Load()
			rs.Denied += c.denied.Load()
			rs.DryRunDenied += c.dryRunDenied.Load()
			rs.KeyErrors += c.keyErrors.Load()
			rs.BackendErrors += c.backendErrors.Load()
		}
		out = append(out, rs)
	}
	for i := range m.rules {
		add(&m.rules[i])
	}
	if m.def != nil {
		add(m.def)
	}
	if m.preflight != nil {
		add(m.preflight)
	}
	return out
}
