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

var (
	// ErrUnavailable is wrapped by every error that says Redis did not
	// decide (timeout, connection failure, server error, breaker open).
	ErrUnavailable = errors.New("redis unavailable")
	// ErrCircuitOpen is wrapped (with ErrUnavailable) by errors of calls
	// that were not sent because the circuit breaker is open.
	ErrCircuitOpen = errors.New("circuit breaker open")
)

// Config configures a Store. Client, Algorithm, Limit and Window are
// required; the rest have defaults.
type Config struct {
	// Client is any go-redis client: *redis.Client, *redis.ClusterClient,
	// a Sentinel failover client or a redis.UniversalClient. The Store does
	// not close it. Set ContextTimeoutEnabled on its options so the
	// per-call Timeout also bounds socket reads and writes; without it the
	// client's own ReadTimeout/WriteTimeout (3 s by default) apply.
	Client redis.UniversalClient

	// Algorithm, Limit, Window and Penalty mean what they mean in
	// engine.Config, with the same bounds on Limit. Window must be a whole
	// number of microseconds: the server's TIME has that resolution.
	Algorithm engine.Algorithm
	Limit     int
	Window    time.Duration
	Penalty   bool

	// Prefix starts every Redis key; keys are Prefix + "{" + key + "}" +
	// a suffix, so that all keys of one limiter key share a cluster slot.
	// Prefix must not contain '{' or '}'. "" means DefaultPrefix.
	Prefix string

	// Timeout bounds each call to Redis. 0 means DefaultTimeout.
	Timeout time.Duration
	// OnFailure is the policy for calls Redis does not answer.
	OnFailure FailPolicy
	// Nodes is the number of processes sharing the limit; FailLocal gives
	// each Limit/Nodes (at least 1). 0 means 1.
	Nodes int
	// BreakerThreshold consecutive failures open the circuit breaker for
	// BreakerCooldown; then one probe call is let through (half-open) and
	// its success closes the breaker. 0 means the defaults.
	BreakerThreshold int
	BreakerCooldown  time.Duration

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
	switch c.Algorithm {
	case engine.SlidingLog, engine.SlidingCounter:
	default:
		return c, invalid("Config.Algorithm %d is unknown (want engine.SlidingLog or engine.SlidingCounter)", uint8(c.Algorithm))
	}
	if c.Limit <= 0 {
		return c, invalid("Config.Limit must be > 0, got %d", c.Limit)
	}
	// Same bounds as the engine, so the FailLocal engine can always be
	// built and both backends accept the same configurations.
	if c.Algorithm == engine.SlidingLog && c.Limit > engine.MaxLogLimit {
		return c, invalid("Config.Limit %d exceeds SlidingLog's maximum %d", c.Limit, engine.MaxLogLimit)
	}
	if c.Algorithm == engine.SlidingCounter && c.Limit > engine.MaxCounterLimit {
		return c, invalid("Config.Limit %d exceeds SlidingCounter's maximum %d", c.Limit, engine.MaxCounterLimit)
	}
	if c.Window <= 0 {
		return c, invalid("Config.Window must be > 0, got %v", c.Window)
	}
	if c.Window%time.Microsecond != 0 {
		return c, invalid("Config.Window %v is not a whole number of microseconds", c.Window)
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
