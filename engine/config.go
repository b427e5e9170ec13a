package engine

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Algorithm selects how a Limiter counts requests. The zero value means
// DefaultAlgorithm. Algorithms lists every one; String and ParseAlgorithm
// name them (one table, in algorithm.go, says everything per algorithm).
type Algorithm uint8

const (
	// SlidingLog is exact: it keeps a ring of the last Limit timestamps per
	// key (4 bytes each) and admits a request at t iff fewer than Limit
	// admitted requests lie in the closed interval [t-Window, t].
	SlidingLog Algorithm = iota + 1
	// SlidingCounter is approximate with O(1) memory per key: it keeps the
	// counts of the current and previous aligned windows in one word and
	// weights the previous count by the part of it still inside the window.
	SlidingCounter
	// GCRA is the token bucket as one time per key (the generic cell rate
	// algorithm, package gcra): Limit per Window is the rate, Config.Burst
	// the bucket (default Limit). A fresh key admits Burst requests at once,
	// then one every Window/Limit. One 8-byte word per key, like
	// SlidingCounter.
	GCRA
)

// DefaultAlgorithm is what a zero Config.Algorithm means: SlidingCounter,
// whose memory per key is constant (18-26 bytes) whatever Limit is, and
// which decides a hot key fastest. Its decisions follow the weighted
// formula (see the package doc): in the worst case about 2 x Limit - 1
// admitted in one trailing Window, Limit - 1 over the exact log; choose
// SlidingLog where every decision must be exact (its memory per key grows
// with Limit: 4 bytes per unit), GCRA for a rate with a burst of its own.
const DefaultAlgorithm = SlidingCounter

// Clock is a monotonic time source in nanoseconds. Now must never go back.
// (One that does anyway breaks no bound, but idle keys and reset records
// are judged by its readings: a step back of d delays their reuse by d.)
type Clock interface{ Now() int64 }

// OverflowPolicy says what a new key gets when the key bound is reached and
// no idle key can be reclaimed to make room for it.
type OverflowPolicy uint8

const (
	// OverflowAllow decides an untracked key as a key with empty state:
	// n <= Limit is allowed and nothing is recorded (fail open).
	OverflowAllow OverflowPolicy = iota
	// OverflowDeny denies every request of an untracked key (fail closed).
	OverflowDeny
)

// Limits of the packed representations; New rejects larger values.
const (
	// MaxLogLimit is the largest Limit SlidingLog holds: the ring position
	// and the size of the newest batch are 16-bit fields of the key's head
	// word (see package ring).
	MaxLogLimit = 65535
	// MaxCounterLimit is the largest Limit SlidingCounter holds: each of
	// the two window counts is a 20-bit field (see package atomiccounter).
	MaxCounterLimit = 1<<20 - 1
	// MaxGCRALimit is the largest Limit (and Burst, and per-call limit)
	// GCRA takes. Its emission interval is Window/MaxLimit rounded up to a
	// nanosecond, so New wants Window/MaxLimit to be at least 200 ns
	// (Window >= 200 x MaxLimit ns), where rounding costs under 1 % of the
	// rate: with a 1 s Window, MaxLimit is at most 5,000,000.
	MaxGCRALimit = 1<<30 - 1
)

// MaxWindow is the longest Window (and SweepInterval) New accepts: a year
// and a day, which keeps every sum of nanosecond durations far from
// overflowing int64.
const MaxWindow = 366 * 24 * time.Hour

// Defaults applied by New where a Config field is zero.
const (
	DefaultMaxMemory     = 256 << 20 // bytes of key state
	DefaultSweepInterval = 10 * time.Second
)

// ErrInvalidConfig is wrapped by every error New returns.
var ErrInvalidConfig = errors.New("invalid config")

// Config configures a Limiter. Limit and Window are required; every other
// field has a default where it is zero.
type Config struct {
	Algorithm Algorithm     // 0: DefaultAlgorithm (SlidingCounter)
	Limit     int           // requests admitted per Window
	Window    time.Duration // length of the sliding window (SlidingLog counts in ticks of at least 1 µs: a shorter Window acts as 1 µs)
	Clock     Clock         // nil: the engine's own monotonic clock

	// Burst is GCRA's bucket: how many requests a key with no recent
	// traffic gets at once (then one every Window/Limit). 0 means Limit,
	// and then the burst follows the limit when SetLimit changes it (until
	// SetBurst sets one). The other algorithms reject a Burst other than 0
	// or Limit: their burst is Limit.
	Burst int

	// MaxLimit is the largest limit SetLimit may set while serving, fixed
	// at New. 0 means Limit for SlidingLog (each key's ring holds MaxLimit
	// ticks: 4 bytes each) and GCRA (its clock ticks at Window/MaxLimit),
	// and MaxCounterLimit for SlidingCounter (whose state does not depend
	// on it). SlidingLog's per-call limits (AllowNWithLimit) go up to
	// MaxLimit too.
	MaxLimit int

	// Penalty records denied requests too, so a client that keeps hammering
	// stays blocked until it backs off for a whole Window. SlidingLog then
	// admits a request iff fewer than Limit requests (admitted or not) lie
	// in [t-Window, t]; SlidingCounter counts denied requests in the window;
	// GCRA pushes the key's arrival time on as if the request were admitted,
	// to at most two buckets ahead of its time (Burst x Window/Limit each),
	// so a client that keeps hammering is admitted again once it pauses for
	// one bucket's time (a Window with the default Burst) plus Window/Limit.
	Penalty bool

	// MaxMemory bounds the bytes of key state (index, slabs, rings) and
	// the Limiter's own fixed parts, as the heap holds them (see "Memory
	// bound and eviction" in the package doc). 0 means DefaultMaxMemory.
	// The bound is converted to a key capacity at New; Stats reports both.
	MaxMemory int64
	// MaxKeys, if > 0, caps the number of tracked keys below what MaxMemory
	// allows. The cap is on the whole table, not split over shards
	// (Config().MaxKeys reports the cap in force; see "Memory bound and
	// eviction" in the package doc for when overflow starts).
	MaxKeys int
	// SweepInterval is how often the background sweep reclaims idle keys
	// (keys whose window holds nothing). 0 means DefaultSweepInterval.
	// New lowers it to a quarter of the span the algorithm's packed times
	// can tell apart (at least 1 ms), so that the background sweep, not a
	// decision inline, keeps state within that span: with SlidingCounter
	// the span is 2^22 Windows, so a Window under about 2.4 µs lowers the
	// default (Config() reports the interval in force).
	SweepInterval time.Duration
	// Shards is the number of key-table shards, rounded up to a power of
	// two. 0 picks 16 x GOMAXPROCS, at least 64.
	Shards int
	// Overflow says what a new key gets when the bound is reached and every
	// tracked key is active. See OverflowPolicy.
	Overflow OverflowPolicy
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("engine: "+format+": %w", append(args, ErrInvalidConfig)...)
}

// normalize validates c and fills in defaults.
func (c Config) normalize() (Config, error) {
	if c.Algorithm == 0 {
		c.Algorithm = DefaultAlgorithm
	}
	spec := specOf(c.Algorithm)
	if spec == nil {
		return c, invalid("Config.Algorithm %d is unknown (want one of %v)", uint8(c.Algorithm), Algorithms())
	}
	if c.Limit <= 0 {
		return c, invalid("Config.Limit must be > 0, got %d", c.Limit)
	}
	if c.Limit > spec.maxLimit {
		return c, invalid("Config.Limit %d exceeds %v's maximum %d%s", c.Limit, c.Algorithm, spec.maxLimit, spec.maxHint)
	}
	if c.Window <= 0 {
		return c, invalid("Config.Window must be > 0, got %v", c.Window)
	}
	if c.Window > MaxWindow {
		return c, invalid("Config.Window %v exceeds the maximum %v", c.Window, MaxWindow)
	}
	if c.MaxLimit < 0 {
		return c, invalid("Config.MaxLimit must be >= 0, got %d", c.MaxLimit)
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = spec.defaultMaxLimit(c.Limit)
	}
	if c.MaxLimit < c.Limit || c.MaxLimit > spec.maxLimit {
		return c, invalid("Config.MaxLimit %d must be in [Limit %d, %d] for %v", c.MaxLimit, c.Limit, spec.maxLimit, c.Algorithm)
	}
	if c.Burst < 0 {
		return c, invalid("Config.Burst must be >= 0, got %d", c.Burst)
	}
	if err := spec.check(&c); err != nil {
		return c, err
	}
	if c.MaxMemory < 0 {
		return c, invalid("Config.MaxMemory must be >= 0, got %d", c.MaxMemory)
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = DefaultMaxMemory
	}
	if c.MaxKeys < 0 {
		return c, invalid("Config.MaxKeys must be >= 0, got %d", c.MaxKeys)
	}
	if c.SweepInterval < 0 {
		return c, invalid("Config.SweepInterval must be >= 0, got %v", c.SweepInterval)
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.SweepInterval > MaxWindow {
		return c, invalid("Config.SweepInterval %v exceeds the maximum %v", c.SweepInterval, MaxWindow)
	}
	if c.Shards < 0 || c.Shards > 1<<16 {
		return c, invalid("Config.Shards must be in [0, 65536], got %d", c.Shards)
	}
	if c.Shards == 0 {
		c.Shards = max(64, 16*runtime.GOMAXPROCS(0))
	}
	c.Shards = nextPow2(c.Shards)
	switch c.Overflow {
	case OverflowAllow, OverflowDeny:
	default:
		return c, invalid("Config.Overflow %d is unknown", uint8(c.Overflow))
	}
	return c, nil
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
