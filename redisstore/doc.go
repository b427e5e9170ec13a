// Package redisstore keeps sliding-window rate-limit state in Redis or
// Valkey, so that every process sharing the server (or cluster) enforces one
// global limit per key. A Store satisfies engine.RateLimiter, so middleware
// takes it or an in-memory *engine.Limiter interchangeably.
//
// # Semantics
//
// Decisions are the engine's (same Allowed, Remaining, RetryAfter and
// ResetAfter; the differential test pins this on random traces), at the
// server clock's resolution of one microsecond. SlidingLog keeps the last
// Limit timestamps of a key in a sorted set and is exact: a request of n at
// t is admitted iff at most Limit-n recorded requests lie in [t-Window, t].
// SlidingCounter keeps the two aligned window counts in one hash and admits
// iff prev*(Window-elapsed)/Window + cur + n <= Limit.
//
// # Atomicity and time
//
// Each decision is one Lua script (EVALSHA, EVAL on NOSCRIPT): one round
// trip, atomic on the server, so concurrent callers on any number of nodes
// admit exactly Limit. The scripts read the server's TIME, never the
// caller's clock, so nodes with skewed clocks agree. Requires Redis >= 5 or
// Valkey (scripts replicated by effects). Keys are
// Prefix + "{" + key + "}" + suffix: the hash tag puts all keys of one
// limiter key in one cluster slot, so Cluster and Sentinel setups work
// through redis.UniversalClient. Every key has a TTL of about the window
// (two for the counter), so idle keys vanish by themselves.
//
// # Faults
//
// The engine.RateLimiter methods have no error: each call runs under
// Config.Timeout, and a call Redis does not answer is decided by
// Config.OnFailure (FailLocal: an in-process engine with Limit/Nodes;
// FailOpen; FailClosed). A consecutive-failure circuit breaker stops
// sending while Redis is down, so a dead server costs a few atomic loads per
// request, and probes once per cool-down to recover by itself. Every fault
// is counted in Stats; nothing panics. The ...Context variants return the
// policy's decision together with an error wrapping ErrUnavailable.
//
// # Hybrid
//
// Hybrid decides in memory against leases of the global limit that a
// background loop renews in batches; see its documentation for the error
// bound it guarantees.
package redisstore
