package main

import (
	"math"

	"github.com/slidelimit/slidelimit/httplimit"
)

// rollout validates the shadow and canary fields of a rule, a tier or the
// default policy (field is its YAML path) and sets them on ru:
//
//   - dry_run puts the policy in shadow: decided, counted and advertised,
//     never refused. Absent: rate_limiting.dry_run.
//   - enforce_percent is the share of clients (keys) the policy enforces,
//     0 to 100, fractions allowed; the rest are its shadow cohort.
//     Absent: 100. A client's cohort is a fixed hash of the policy's name
//     and its key: the same on every request, reload, restart and
//     replica, and a new percentage moves only the clients between the
//     old and new thresholds (raising it only adds clients).
//
// A policy on trial takes no client away from the policy that limited it
// before: where it decides a client in shadow, the next matching rule
// that enforces the client (else the default policy) applies beside it
// (httplimit.Options.Rules), so shadow testing a rule on /login leaves
// /login under the default's limit, not unlimited.
//
// Neither is in a backend's fingerprint: a reload that changes them keeps
// the policy's counts.
func rollout(field string, dryRun *bool, enforcePercent *float64, ru *httplimit.Rule) error {
	if p := enforcePercent; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 100) {
		return fieldErr(field+".enforce_percent", "must be in [0, 100] (a percentage of clients; fractions allowed), got %v", *p)
	}
	ru.DryRun, ru.EnforcePercent = dryRun, enforcePercent
	return nil
}
