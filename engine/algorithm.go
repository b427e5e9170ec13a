package engine

import (
	"fmt"
	"strings"
	"time"
)

// algo is one algorithm's implementation behind a Limiter: its key table
// and state, built once by New (the algorithm's spec.build) and called
// through this interface once per decision. Each lives in its own file
// (log.go, counter.go, gcra.go). Everything an algorithm does not own (the
// clock and callers' times, the wrap guard, stats, overflow, Close) is the
// Limiter's.
//
// Why an interface: one indirect call per decision, at the top; below it
// every call is to a concrete type. Measured against the code it replaced
// (one struct with both algorithms, branching on l.flat != nil), on the
// shared 2-core machine with other jobs running (spreads of 12-137 %):
// package bench's Allow (hot key allowed/denied, 1k keys uniform/zipf)
// and AllowParallel/hotkey at -cpu 1, 8 interleaved rounds of 200 ms,
// benchstat: geomean -1.4 % for counter and log, no row significant (p >=
// 0.33). A type switch in Allow calling the concrete types directly,
// built and run in the same rounds, read -14 % geomean, but no row was
// significant either (p >= 0.16), so the interface stays: adding an
// algorithm touches no function here.
type algo interface {
	// allow is Allow at rel (the guard already checked).
	allow(key string, rel int64) bool
	// take is AllowN (perCall false: the limit in force) or AllowNWithLimit
	// (perCall: limit is the caller's) at rel, the call not yet validated.
	// take and peek return the Decision as Allowed and the rest (see
	// verdict: a Decision returned through calls costs ~9 ns a level).
	take(key string, n, limit int, perCall bool, rel int64) (bool, verdict)
	peek(key string, rel int64) (bool, verdict)
	reset(key string, rel int64)
	// allowMany appends Allow's answers for keys at rel; it checks the
	// guard itself between groups (l.guardCheck).
	allowMany(dst []bool, keys []string, rel int64) []bool
	sweep(at int64, total bool) int
	keys() int
	bytes() int64
	reclaimed() uint64
	// setLimit and setBurst change the limit in force (validated by the
	// Limiter against MaxLimit; setBurst errors for algorithms without one).
	setLimit(limit int) error
	setBurst(burst int) error
	// limits returns the limit and burst in force.
	limits() (limit, burst int)
}

// spec is the registry entry of an algorithm: adding one is a line in
// specs and a file of its own.
type spec struct {
	alg       Algorithm
	name      string   // String
	spellings []string // ParseAlgorithm accepts these (name first)
	maxLimit  int      // the largest Limit, MaxLimit and per-call limit
	maxHint   string   // appended to the error for a Limit above maxLimit
	// defaultMaxLimit is Config.MaxLimit when it is 0.
	defaultMaxLimit func(limit int) int
	// check validates the fields only this algorithm reads (Burst).
	check func(c *Config) error
	// build makes the algorithm's tables for l (l.cfg normalized) and sets
	// l.impl; it also sets the wrap guard's span and the callers' lead.
	build func(l *Limiter) error
}

var specs = [...]spec{
	{alg: SlidingLog, name: "log", spellings: []string{"log", "sliding_log", "slidinglog", "exact"},
		maxLimit: MaxLogLimit, maxHint: " (use SlidingCounter or GCRA for large limits)",
		defaultMaxLimit: func(limit int) int { return limit }, check: burstIsLimit, build: buildLog},
	{alg: SlidingCounter, name: "counter", spellings: []string{"counter", "sliding_counter", "slidingcounter", "approximate"},
		maxLimit:        MaxCounterLimit,
		defaultMaxLimit: func(int) int { return MaxCounterLimit }, check: burstIsLimit, build: buildCounter},
	{alg: GCRA, name: "gcra", spellings: []string{"gcra", "token_bucket", "tokenbucket", "bucket"},
		maxLimit:        MaxGCRALimit,
		defaultMaxLimit: func(limit int) int { return limit }, check: checkGCRA, build: buildGCRA},
}

func specOf(a Algorithm) *spec {
	for i := range specs {
		if specs[i].alg == a {
			return &specs[i]
		}
	}
	return nil
}

// Algorithms returns every algorithm, in a fixed order (SlidingLog,
// SlidingCounter, GCRA): consumers that offer a choice (config files,
// flags, benchmarks) list them from here.
func Algorithms() []Algorithm {
	out := make([]Algorithm, len(specs))
	for i := range specs {
		out[i] = specs[i].alg
	}
	return out
}

// String returns "log", "counter" or "gcra".
func (a Algorithm) String() string {
	if s := specOf(a); s != nil {
		return s.name
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm accepts "log" (also "sliding_log", "slidinglog",
// "exact"), "counter" ("sliding_counter", "slidingcounter",
// "approximate") and "gcra" ("token_bucket", "tokenbucket", "bucket"):
// the spellings config files and flags use.
func ParseAlgorithm(s string) (Algorithm, error) {
	names := make([]string, 0, len(specs))
	for i := range specs {
		for _, sp := range specs[i].spellings {
			if s == sp {
				return specs[i].alg, nil
			}
		}
		names = append(names, specs[i].name)
	}
	return 0, fmt.Errorf("engine: unknown algorithm %q (want %s): %w", s, strings.Join(names, ", "), ErrInvalidConfig)
}

// burstIsLimit is check for the window algorithms: their burst is Limit.
func burstIsLimit(c *Config) error {
	if c.Burst != 0 && c.Burst != c.Limit {
		return invalid("Config.Burst %d is for GCRA; %v's burst is its Limit (leave Burst 0)", c.Burst, c.Algorithm)
	}
	return nil
}

// checkGCRA validates GCRA's fields: the burst, and a bucket and emission
// interval the packed times hold (package gcra).
func checkGCRA(c *Config) error {
	if c.Burst > MaxGCRALimit {
		return invalid("Config.Burst %d exceeds GCRA's maximum %d", c.Burst, MaxGCRALimit)
	}
	if int64(c.Window) < int64(c.MaxLimit) {
		return invalid("Config.Window %v is shorter than MaxLimit %d ns: GCRA's emission interval (Window/MaxLimit) must be at least 1 ns", c.Window, c.MaxLimit)
	}
	b := c.Burst
	if b == 0 {
		b = c.MaxLimit // the burst follows the limit, up to MaxLimit
	}
	if tok := gcraToken(c.Window, c.MaxLimit); satMul(int64(b), tok) > gcraMaxDepth {
		return invalid("Config.Burst %d x Window/MaxLimit is a bucket of %v, above GCRA's maximum %v", b, time.Duration(satMul(int64(b), tok)), time.Duration(gcraMaxDepth))
	}
	return nil
}

// MaxLimit returns the largest Limit (and MaxLimit, and per-call limit)
// New accepts for a: MaxLogLimit, MaxCounterLimit or MaxGCRALimit; 0 for
// an unknown Algorithm. Consumers that validate limits before New (config
// files, other backends) read it here rather than naming each algorithm.
func (a Algorithm) MaxLimit() int {
	if s := specOf(a); s != nil {
		return s.maxLimit
	}
	return 0
}
