package engine

import (
	"context"
	"time"
)

// Decision is the full answer for one request.
type Decision struct {
	Allowed    bool
	Limit      int
	Remaining  int           // requests still admissible right now (after this one)
	RetryAfter time.Duration // when denied: the earliest moment a retry can pass (exact for SlidingLog); 0 when allowed
	ResetAfter time.Duration // until the key's window is empty again
}

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
	Denied    uint64 // decisions that denied
	Inserts   uint64 // keys created
	Reclaimed uint64 // idle keys reclaimed (sweep or lazy reuse)
	Overflow  uint64 // decisions made for keys that could not be tracked (bound reached)
	Bytes     int64  // bytes of key state allocated now
}
