package httplimit

import (
	"math"
)

// Rollout controls: a rule in shadow (Rule.DryRun) decides, counts and
// advertises every request but refuses none; a rule with an
// EnforcePercent below 100 enforces only that share of its keys (the
// enforced cohort) and treats the rest as shadow (the shadow cohort).
//
// Which keys are enforced. A key is enforced iff cohortHash(rule, key),
// read as a fraction of 2^64, is below EnforcePercent/100. The hash is a
// fixed function of the rule's name and the key (no per-process seed),
// so:
//
//   - a client is in the same cohort on every request, across reloads
//     and restarts, and on every gateway replica: a canary at 5 % is the
//     same 5 % of clients everywhere;
//   - the cohort is re-chosen only when the percentage changes, and then
//     only by the threshold: raising 1 % to 5 % keeps the first 1 %
//     enforced and adds 4 % (lowering it takes the last ones out first),
//     so a client that already saw enforcement keeps seeing it while a
//     rollout advances. Drawing a fresh sample per percentage would
//     instead flip clients in and out at each step;
//   - two rules at the same percentage enforce different (independent)
//     samples of the clients, since the rule name seeds the hash: one
//     unlucky 5 % do not carry every canary at once. A rule renamed on
//     reload gets a new sample.
//
// The hash is FNV-1a over the rule name, a NUL byte and the key (the key
// without the rule's namespace; a FailOpen fallback key with its own
// prefix), finished with MurmurHash3's fmix64 so that the top bits, which
// the threshold compares, depend on every byte: FNV-1a alone spreads the
// last bytes of similar keys (10.0.0.1, 10.0.0.2) over the low bits only.
// It costs about one multiply per key byte and allocates nothing.

// FNV-1a, 64 bits.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// cohortSalt is the hash state after the rule name and a NUL separator
// (no rule name contains one), computed once at New.
func cohortSalt(rule string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(rule); i++ {
		h ^= uint64(rule[i])
		h *= fnvPrime64
	}
	h *= fnvPrime64 // the NUL byte: h ^= 0, then the multiply
	return h
}

// cohortHash continues salt over key and mixes the result.
func cohortHash(salt uint64, key string) uint64 {
	h := salt
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	// fmix64 (MurmurHash3): a bijection in which every input bit flips
	// each output bit with probability about 1/2.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// cohort is a rule's rollout setting, compiled for the hot path.
type cohort struct {
	// shadow: the rule refuses nothing (Rule.DryRun, or Options.DryRun
	// inherited).
	shadow bool
	// all: every key is enforced (EnforcePercent 100, the default); else
	// a key is enforced iff its hash is below threshold (0: none is).
	all       bool
	threshold uint64
	salt      uint64
}

// two64 is 2^64 as a float64 (exact).
const two64 = 1 << 64

// newCohort compiles a rule's DryRun and EnforcePercent; where names the
// rule for the error.
func newCohort(r *Rule, dryRun bool, where string) (cohort, error) {
	c := cohort{shadow: dryRun, all: true, salt: cohortSalt(r.Name)}
	if r.DryRun != nil {
		c.shadow = *r.DryRun
	}
	if r.EnforcePercent == nil {
		return c, nil
	}
	p := *r.EnforcePercent
	if math.IsNaN(p) || p < 0 || p > 100 {
		return c, invalidf("%s (%s).EnforcePercent must be in [0, 100], got %v", where, r.Name, p)
	}
	// p/100 x 2^64, the share of the hash range that is enforced. A p a
	// hair under 100 can round to 2^64, which does not fit a uint64:
	// every key is enforced then anyway.
	f := math.Ldexp(p/100, 64)
	if f >= two64 {
		return c, nil
	}
	c.all, c.threshold = false, uint64(f)
	return c, nil
}

// mayShadow reports whether the rule may decide some key in shadow: it is
// on trial, so the rules that would decide a request without it still
// apply (see Middleware.collect).
func (c *cohort) mayShadow() bool { return c.shadow || !c.all }

// shadowFor reports whether the rule decides key in shadow: it refuses
// nothing, and counts a refusal as DryRunDenied.
func (c *cohort) shadowFor(key string) bool {
	switch {
	case c.shadow:
		return true
	case c.all:
		return false
	}
	return cohortHash(c.salt, key) >= c.threshold
}
