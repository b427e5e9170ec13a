package engine

import (
	"context"
	"math"
	"time"
)

// Decision is the full answer for one request.
type Decision struct {
	Allowed bool
	// Limit is the most requests the key can hold: the limit in force (or
	// the call's, AllowNWithLimit); for GCRA the bucket (Burst), the most
	// one call can have admitted.
	Limit     int
	Remaining int // requests still admissible right now (after this one)
	// RetryAfter, when denied, is the earliest moment a retry can pass
	// (exact for SlidingLog and GCRA); 0 when allowed. A call that no retry can
	// pass (n <= 0, n above the limit, a per-call limit out of range) has
	// RetryAfter Never: compare with Never before doing arithmetic on it.
	RetryAfter time.Duration
	ResetAfter time.Duration // until the key's window is empty again (GCRA: its bucket full)
}

// Never is the RetryAfter of a call that can never be admitted, however
// long the caller waits: n <= 0, n greater than the limit, or (in
// AllowNWithLimit) a limit outside what the key can hold. Such a call
// records nothing and is counted in Stats.Invalid, not Stats.Denied. An
// HTTP front end should answer it as a bad request (400 or 413), not 429.
const Never = time.Duration(math.MaxInt64)

// Admissible reports whether a retry can ever pass: false for a call
// whose RetryAfter is Never.
func (d Decision) Admissible() bool { return d.RetryAfter != Never }

// RateLimiter is the Limiter-shaped API that every backend satisfies (the
// in-memory *Limiter here, the Redis store and the hybrid in package
// redisstore), so that middleware can take either. Implementations are safe
// for concurrent use and never panic on any key.
//
// The Context variants are for callers that can give up: a backend that
// makes a network call (Redis) stops waiting when ctx ends, and returns the
// decision its failure policy made together with an error saying why. The
// in-memory Limiter never blocks, ignores ctx and never returns an error.
type RateLimiter interface {
	// AllowN admits n requests for key, all or none.
	AllowN(key string, n int) Decision
	// Peek reports what AllowN(key, 1) would decide, consuming nothing.
	Peek(key string) Decision
	// Reset forgets key's state.
	Reset(key string)

	// AllowNContext is AllowN that stops waiting for a remote backend
	// when ctx ends.
	AllowNContext(ctx context.Context, key string, n int) (Decision, error)
	// PeekContext is Peek that stops waiting when ctx ends.
	PeekContext(ctx context.Context, key string) (Decision, error)
	// ResetContext is Reset that stops waiting when ctx ends.
	ResetContext(ctx context.Context, key string) error
}

// Stats is a snapshot of a Limiter's counters. Counters are monotonic;
// under concurrent use they may miss the latest operations.
type Stats struct {
	Keys      int    // keys tracked now
	MaxKeys   int    // the key bound derived from Config.MaxMemory / MaxKeys
	Allowed   uint64 // decisions that admitted
	Denied    uint64 // decisions that denied because the window was full
	Invalid   uint64 // calls that can never be admitted (RetryAfter Never): not in Allowed or Denied
	Inserts   uint64 // keys created
	Reclaimed uint64 // idle keys reclaimed (sweep or lazy reuse)
	Overflow  uint64 // decisions made for keys that could not be tracked (bound reached)
	Bytes     int64  // bytes of key state allocated now
}
