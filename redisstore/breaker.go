package redisstore

import "sync/atomic"

// Breaker states.
const (
	closed int32 = iota
	open
	halfOpen
)

// breaker is a circuit breaker that counts failing intervals, not failed
// calls. Closed: every call goes to Redis. A failure counts only if no
// failure was counted in its interval (interval ns long, aligned to the
// breaker's clock) yet, so the calls in flight when Redis stalls, which all
// time out together, count once; threshold such intervals without a
// success between them open the breaker. Open: calls are answered by the
// fail policy without touching the network until the cool-down ends. Then
// exactly one caller wins the CAS to half-open and probes; its success
// closes the breaker, its failure re-opens it for another cool-down.
//
// Everything is a handful of atomics, so a dead Redis costs a few
// nanoseconds per request, and a success on a healthy Redis only loads
// (streak and state are written when they change), so callers on many
// cores do not bounce a cache line.
type breaker struct {
	threshold int64
	cooldown  int64 // ns
	interval  int64 // ns

	state     atomic.Int32
	streak    atomic.Int64 // failing intervals since the last success, while closed
	lastFail  atomic.Int64 // interval index of the last counted failure; starts at -1
	openUntil atomic.Int64 // ns on the breaker's clock; meaningful while open
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
	if b.streak.Load() != 0 {
		b.streak.Store(0)
	}
	if b.state.Load() != closed {
		b.state.Store(closed)
	}
}

// failure records a Redis fault of a call that ended at now.
func (b *breaker) failure(now int64, probe bool) {
	if probe {
		b.trip(now)
		return
	}
	iv := now / b.interval
	for {
		last := b.lastFail.Load()
		if iv <= last {
			return // this interval already counted
		}
		if b.lastFail.CompareAndSwap(last, iv) {
			break
		}
	}
	if b.streak.Add(1) >= b.threshold && b.state.Load() == closed {
		b.trip(now)
	}
}

// abandon ends a half-open probe that got no verdict (its caller gave up):
// the breaker goes back to open with its cool-down over, so the next call
// probes.
func (b *breaker) abandon() { b.state.CompareAndSwap(halfOpen, open) }

func (b *breaker) trip(now int64) {
	b.openUntil.Store(now + b.cooldown)
	if old := b.state.Swap(open); old != open {
		b.opens.Add(1)
	}
	b.streak.Store(0)
}

// isOpen reports whether calls are being short-circuited.
func (b *breaker) isOpen() bool { return b.state.Load() != closed }
