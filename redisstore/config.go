package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
)

// FailPolicy says what a decision gets when Redis cannot answer in time
// (down, slow, refusing) or the circuit breaker is open.
type FailPolicy uint8

const (
	// FailLocal decides with an in-process engine.Limiter holding this
	// node's share of the limit, Limit / Nodes (at least 1), so that N
	// nodes together admit about Limit while Redis is away. The default.
	FailLocal FailPolicy = iota
	// FailOpen admits every request of n <= Limit (availability first).
	FailOpen
	// FailClosed denies every request (the limit first).
	FailClosed
)

// String returns "local", "open" or "closed".
func (p FailPolicy) String() string {
	switch p {
	case FailLocal:
		return "local"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailPolicy(%d)", uint8(p))
}

// Defaults applied by New where a Config field is zero.
const (
	DefaultPrefix           = "slidelimit:"
	DefaultTimeout          = 50 * time.Millisecond
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = time.Second
)

// MaxKeyLen is the longest key, in bytes, that a Store or Hybrid accepts.
// A longer key is denied without a round trip, and the Context variants
// return an error wrapping ErrKeyTooLong.
const MaxKeyLen = 1024

var (
	// ErrUnavailable is wrapped by every error that says Redis did not
	// decide (timeout, connection failure, server error, breaker open).
	// A caller's own context ending is not Redis being unavailable: that
	// error wraps the context's error (context.Canceled or
	// context.DeadlineExceeded) alone.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrKeyTooLong is wrapped by the error for a key longer than
	// MaxKeyLen.
	ErrKeyTooLong = errors.New("key longer than redisstore.MaxKeyLen")
	// ErrCircuitOpen is wrapped (with ErrUnavailable) by errors of calls
	// that were not sent because the circuit breaker is open.
	ErrCircuitOpen = errors.New("circuit breaker open")
)

// Config configures a Store. Client, Limit and Window are required; the
// rest have defaults (a zero Algorithm is engine.DefaultAlgorithm, as in
// the engine).
type Config struct {
	// Client is a go-redis client: *redis.Client (single node, or the
	// Sentinel failover client of redis.NewFailoverClient),
	// *redis.ClusterClient or *redis.Ring, or a redis.UniversalClient
	// holding one. The Store does not close it. New checks its options,
	// because they decide whether Timeout holds and whether a script can
	// run twice:
	//
	//   - ContextTimeoutEnabled must be true: without it go-redis ignores
	//     the per-call deadline and waits ReadTimeout (3 s by default).
	//   - ReadTimeout and WriteTimeout must not be -2 (no socket deadline
	//     at all) nor shorter than Timeout: a socket timeout before the
	//     deadline makes go-redis resend a script that may still run.
	//   - MaxRetries must be -1 (*redis.Client, *redis.Ring; the
	//     ClusterClient's default): a retry after a broken connection runs
	//     a script again that the server may already have run, counting a
	//     request twice.
	//
	// Other implementations of redis.UniversalClient are rejected: their
	// options cannot be checked.
	Client redis.UniversalClient

	// Algorithm, Limit, Window, Penalty and Burst mean what they mean in
	// engine.Config, with the same bounds (Algorithm.MaxLimit). Window must
	// be a whole number of microseconds: the server's TIME has that
	// resolution. GCRA also wants Burst x Window/Limit below 2^51 ns (26
	// days: the script's arithmetic is in Lua doubles).
	Algorithm engine.Algorithm
	Limit     int
	Window    time.Duration
	Penalty   bool
	// Burst is engine.GCRA's bucket, as engine.Config.Burst: how many
	// requests a key with no recent traffic gets at once, then one every
	// Window/Limit. 0 means Limit. The other algorithms accept only 0 or
	// Limit (their burst is Limit).
	Burst int

	// Prefix starts every Redis key (see the package documentation for
	// the layout). Prefix must not contain '{' or '}', which delimit the
	// cluster hash tag. "" means DefaultPrefix.
	Prefix string

	// Timeout bounds each call to Redis (with the caller's context
	// deadline, if earlier). Redis itself refuses a call that reaches it
	// too late to answer in time (see "Deadlines" in the package
	// documentation). 0 means DefaultTimeout.
	Timeout time.Duration
	// OnFailure is the policy for calls Redis does not answer.
	OnFailure FailPolicy
	// Nodes is the number of processes sharing the limit; FailLocal gives
	// each Limit/Nodes (at least 1). 0 means 1.
	Nodes int
	// BreakerThreshold consecutive failing intervals open the circuit
	// breaker for BreakerCooldown: an interval is one Timeout long, and
	// however many calls fail in one interval (all the calls in flight
	// when Redis stalls) it counts once; a success starts the count over.
	// After the cool-down one probe call is let through (half-open) and
	// its success closes the breaker. Only Redis's faults count (timeouts,
	// refused or broken connections, a server that says it is down or out
	// of memory); a caller's cancelled or expired context and a per-key
	// error reply do not. 0 means the defaults.
	BreakerThreshold int
	BreakerCooldown  time.Duration

	// AllowEviction accepts servers whose maxmemory-policy can evict the
	// limiter's keys (any policy but noeviction, with a maxmemory limit).
	// New refuses them otherwise (ErrEvictionPolicy): an evicted key grants
	// its whole limit again, silently. Set it only where the limiter's
	// keys may be lost under memory pressure (Stats.EvictedKeys then shows
	// evictions on the servers).
	AllowEviction bool

	// Clock, if non-nil, replaces the server's TIME with Clock.Now()
	// (nanoseconds, truncated to microseconds) passed to the scripts. It
	// exists for deterministic tests; in production leave it nil so that
	// nodes with skewed clocks agree. With a Clock, key TTLs no longer
	// follow the timestamps, so they are set to an hour past the window.
	Clock engine.Clock
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("redisstore: "+format+": %w", append(args, engine.ErrInvalidConfig)...)
}

// normalize validates c and fills in defaults. Errors wrap
// engine.ErrInvalidConfig and name the field.
func (c Config) normalize() (Config, error) {
	if c.Client == nil {
		return c, invalid("Config.Client must not be nil")
	}
	if c.Algorithm == 0 {
		// As the engine: a zero Algorithm is engine.DefaultAlgorithm, so
		// one Config means the same window in memory and in Redis.
		c.Algorithm = engine.DefaultAlgorithm
	}
	// The engine's rules, read from the engine (Algorithm.MaxLimit), so
	// one Config means the same limiter in memory and in Redis and the
	// FailLocal engine can always be built.
	maxLimit := c.Algorithm.MaxLimit()
	if maxLimit == 0 {
		return c, invalid("Config.Algorithm %d is unknown (want one of engine.Algorithms(): %v)", uint8(c.Algorithm), engine.Algorithms())
	}
	if c.Limit <= 0 {
		return c, invalid("Config.Limit must be > 0, got %d", c.Limit)
	}
	if c.Limit > maxLimit {
		return c, invalid("Config.Limit %d exceeds %v's maximum %d", c.Limit, c.Algorithm, maxLimit)
	}
	if c.Algorithm != engine.GCRA && c.Burst != 0 && c.Burst != c.Limit {
		return c, invalid("Config.Burst %d is not supported by %v (its burst is its Limit %d; use engine.GCRA for a burst of its own)", c.Burst, c.Algorithm, c.Limit)
	}
	if c.Burst < 0 || c.Burst > maxLimit {
		return c, invalid("Config.Burst must be in [0, %d], got %d", maxLimit, c.Burst)
	}
	if c.Burst == 0 {
		c.Burst = c.Limit
	}
	if c.Window <= 0 {
		return c, invalid("Config.Window must be > 0, got %v", c.Window)
	}
	if c.Window%time.Microsecond != 0 {
		return c, invalid("Config.Window %v is not a whole number of microseconds", c.Window)
	}
	if c.Window > engine.MaxWindow {
		return c, invalid("Config.Window %v exceeds engine.MaxWindow %v", c.Window, engine.MaxWindow)
	}
	if c.Algorithm == engine.GCRA && int64(c.Window) < gcraMinToken*int64(c.Limit) {
		// The engine's rule (its FailLocal engine must build): a request
		// costs Window/Limit ns, at least gcraMinToken, so that rounding
		// costs under 1 % of the rate.
		return c, invalid("Config.Window %v is too short for Limit %d: GCRA's emission interval Window/Limit must be at least %d ns (Limit at most %d, or a longer Window)",
			c.Window, c.Limit, gcraMinToken, int64(c.Window)/gcraMinToken)
	}
	if c.Algorithm == engine.GCRA {
		// The script computes in ns relative to now, in Lua doubles: exact
		// while every such value stays below 2^53 ns. A penalty pushes a
		// key's arrival time up to two buckets ahead, plus a request.
		if t := c.gcraToken(); int64(c.Burst) > maxGCRADepth/t {
			return c, invalid("Config.Burst %d x Window/Limit %v exceeds GCRA's deepest bucket in Redis, %v", c.Burst, time.Duration(t), time.Duration(maxGCRADepth))
		}
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return c, invalid("Config.Prefix %q must not contain '{' or '}' (they delimit the cluster hash tag)", c.Prefix)
	}
	if c.Timeout < 0 {
		return c, invalid("Config.Timeout must be >= 0, got %v", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if err := checkClient(c.Client, c.Timeout); err != nil {
		return c, err
	}
	switch c.OnFailure {
	case FailLocal, FailOpen, FailClosed:
	default:
		return c, invalid("Config.OnFailure %d is unknown", uint8(c.OnFailure))
	}
	if c.Nodes < 0 {
		return c, invalid("Config.Nodes must be >= 0, got %d", c.Nodes)
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.BreakerThreshold < 0 {
		return c, invalid("Config.BreakerThreshold must be >= 0, got %d", c.BreakerThreshold)
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = DefaultBreakerThreshold
	}
	if c.BreakerCooldown < 0 {
		return c, invalid("Config.BreakerCooldown must be >= 0, got %v", c.BreakerCooldown)
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = DefaultBreakerCooldown
	}
	return c, nil
}

// localShare is the limit each node's FailLocal engine gets.
func (c Config) localShare() int { return max(1, c.Limit/c.Nodes) }

// localBurst is the burst each node's FailLocal engine gets (GCRA): its
// share of Burst, Burst/Nodes, at least 1 (0, the engine's default, for
// the other algorithms).
func (c Config) localBurst() int {
	if c.Algorithm != engine.GCRA {
		return 0
	}
	return max(1, c.Burst/c.Nodes)
}

// gcraMinToken is the engine's shortest GCRA emission interval, in ns
// (engine.New refuses a Window/MaxLimit below it).
const gcraMinToken = 200

// maxGCRADepth is the deepest GCRA bucket (Burst x Window/Limit, in ns)
// the script computes exactly: two of them (a penalty's reach) plus a
// request stay below 2^53, where Lua's doubles stop being exact.
const maxGCRADepth = 1 << 51

// gcraToken is GCRA's emission interval in ns: Window/Limit rounded up, as
// the engine's (so the rate is never exceeded).
func (c Config) gcraToken() int64 {
	return (int64(c.Window) + int64(c.Limit) - 1) / int64(c.Limit)
}

// capacity is the most one call can have admitted: Burst for GCRA (the
// bucket), Limit for the others. Decision.Limit reports it.
func (c Config) capacity() int {
	if c.Algorithm == engine.GCRA {
		return c.Burst
	}
	return c.Limit
}

// clientOptions are the go-redis options that decide whether a Store's
// deadline holds and whether a script can be sent twice, as the client
// normalized them (after init: MaxRetries 0 means none; ReadTimeout 0
// means no timeout of its own, -1 means no socket deadline at all).
type clientOptions struct {
	contextTimeout            bool
	readTimeout, writeTimeout time.Duration
	maxRetries                int
}

// checkClient rejects clients whose options break Timeout or let go-redis
// resend a script (see Config.Client).
func checkClient(c redis.UniversalClient, timeout time.Duration) error {
	var o clientOptions
	switch c := c.(type) {
	case *redis.Client:
		opt := c.Options()
		o = clientOptions{opt.ContextTimeoutEnabled, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries}
	case *redis.ClusterClient:
		opt := c.Options()
		o = clientOptions{opt.ContextTimeoutEnabled, opt.ReadTimeout, opt.WriteTimeout, max(0, opt.MaxRetries)}
	case *redis.Ring:
		opt := c.Options()
		o = clientOptions{opt.ContextTimeoutEnabled, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries}
	default:
		return invalid("Config.Client of type %T cannot be checked (want *redis.Client, *redis.ClusterClient or *redis.Ring)", c)
	}
	if !o.contextTimeout {
		return invalid("Config.Client: ContextTimeoutEnabled is false, so go-redis would ignore the per-call Timeout; set it on the client's options")
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"ReadTimeout", o.readTimeout}, {"WriteTimeout", o.writeTimeout}} {
		if t.d < 0 {
			return invalid("Config.Client: %s is -2 (no socket deadline), so go-redis would ignore the per-call Timeout", t.name)
		}
		if t.d > 0 && t.d < timeout {
			return invalid("Config.Client: %s %v is shorter than Config.Timeout %v: go-redis would give up and resend a script that may still run", t.name, t.d, timeout)
		}
	}
	if o.maxRetries > 0 {
		return invalid("Config.Client: MaxRetries is %d: a retried script may run twice (one request counted twice); set MaxRetries: -1", o.maxRetries)
	}
	return nil
}
