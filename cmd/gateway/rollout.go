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
// Neither is in a backend's fingerprint: a reload that changes them keeps
// the policy's counts.
func rollout(field string, dryRun *bool, enforcePercent *float64, ru *httplimit.Rule) error {
	if p := enforcePercent; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 100) {
		return fieldErr(field+".enforce_percent", "must be in [0, 100] (a percentage of clients; fractions allowed), got %v", *p)
	}
	ru.DryRun, ru.EnforcePercent = dryRun, enforcePercent
	return nil
}
