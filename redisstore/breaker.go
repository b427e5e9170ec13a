package redisstore

import "sync/atomic"

// Breaker states.
const (
	closed int32 = iota
	open
	halfOpen
)

// breaker is a consecutive-failure circuit breaker. Closed: every call
// goes to Redis. Threshold consecutive failures open it: calls are answered
// by the fail policy without touching the network until the cool-down
// ends. Then exactly one caller wins the CAS to half-open and probes; its
// success closes the breaker, its failure re-opens it for another
// cool-down. Everything is a handful of atomics, so a dead Redis costs a
// few nanoseconds per request.
type breaker struct {
	threshold int64
	cooldown  int64 // ns

	state     atomic.Int32
	failures  atomic.Int64 // consecutive failures while closed
	openUntil atomic.Int64 // monotonic ns; meaningful while open
	opens     atomic.Uint64
}

// allow reports whether a call may go to Redis now and whether it is the
// half-open probe.
func (b *breaker) allow(now int64) (ok, probe bool) {
	switch b.state.Load() {
	case closed:
		return true, false
	case open:
		// openUntil is stored before the state flips to open (see trip),
		// so a reader that sees open also sees its deadline or a later one.
		if now < b.openUntil.Load() {
			return false, false
		}
		if b.state.CompareAndSwap(open, halfOpen) {
			return true, true
		}
	}
	return false, false // half-open: the probe is in flight
}

// success records an answer from Redis.
func (b *breaker) success() {
	b.failures.Store(0)
	if b.state.Load() != closed {
		b.state.Store(closed)
	}
}

// failure records a call that Redis did not answer.
func (b *breaker) failure(now int64, probe bool) {
	if probe {
		b.trip(now)
		return
	}
	if b.failures.Add(1) >= b.threshold && b.state.Load() == closed {
		b.trip(now)
	}
}

func (b *breaker) trip(now int64) {
	b.openUntil.Store(now + b.cooldown)
	if old := b.state.Swap(open); old != open {
		b.opens.Add(1)
	}
	b.failures.Store(0)
}

// isOpen reports whether calls are being short-circuited.
func (b *breaker) isOpen() bool { return b.state.Load() != closed }
