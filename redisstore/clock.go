package redisstore

import (
	"math"
	"sync/atomic"
	"time"
)

// serverClock estimates, from the server TIME that every script returns, a
// lower bound of offset = server clock - this process's wall clock (µs), so
// that a call's deadline can be handed to Redis in the server's own clock
// and the script can refuse work that arrives after it (see "Deadlines" in
// the package documentation).
//
// A reply read at local time recv carries the server's time S, taken while
// the script ran, so before recv: S - recv <= offset (minus a microsecond
// for truncation). The estimate is the largest such bound seen in the
// current period of clockPeriod (the fastest reply's), so it is never above
// the true offset while the server's clock does not step back against ours;
// a step back, or a failover to a server whose clock is behind, is
// forgotten when the period ends. A bound that falls short of the offset by
// the return trip of the fastest reply only makes Redis refuse a call that
// close to its deadline; its reply could not have come back in time anyway.
//
// A single server has one estimate. A cluster or a Ring has one per hash
// tag (a tag names one slot, so one server: see keyspace), because their
// servers' clocks differ; a tag with no reply yet uses the estimate from
// any server, and before any reply at all the clocks are assumed to agree.
// Both fallbacks are off by the skew between the clocks (NTP keeps it to
// milliseconds), which is the bound documented for those cases.
type serverClock struct {
	any    atomic.Uint64
	perTag []atomic.Uint64 // nil for a single server
}

// clockPeriod is how long a bound is kept as the estimate before a new
// period starts from fresh replies (µs).
const clockPeriod = int64(time.Second / time.Microsecond)

// An entry packs the period of its bound (high 32 bits) and the bound as an
// int32 of µs (low 32 bits); 0 means none.
//
//	63            32 31             0
//	+---------------+----------------+
//	| period uint32 | bound µs, i32  |
//	+---------------+----------------+
//
// The period is µs/clockPeriod since the epoch (> 0 until 2106), so a set
// entry is never 0. A server whose clock is more than 35 minutes off ours
// (the int32 would overflow) is not recorded: its calls fall back as
// before its first reply.
func newServerClock(perTag bool) *serverClock {
	c := &serverClock{}
	if perTag {
		c.perTag = make([]atomic.Uint64, 1<<tagBits)
	}
	return c
}

// observe records the reply of a call on tag t: the server's time
// serverUS, read by this process at wall time recvUS.
func (c *serverClock) observe(t uint16, serverUS, recvUS int64) {
	lo := serverUS - recvUS - 1
	if lo < math.MinInt32 || lo > math.MaxInt32 {
		return
	}
	v := uint64(recvUS/clockPeriod)<<32 | uint64(uint32(int32(lo)))
	raise(&c.any, v)
	if c.perTag != nil {
		raise(&c.perTag[t], v)
	}
}

// raise stores v in e if v is of a later period, or of the same period
// with a larger bound.
func raise(e *atomic.Uint64, v uint64) {
	for {
		old := e.Load()
		if old != 0 && (old>>32 > v>>32 || old>>32 == v>>32 && int32(uint32(old)) >= int32(uint32(v))) {
			return
		}
		if e.CompareAndSwap(old, v) {
			return
		}
	}
}

// offset returns the estimate for tag t, or 0 and false before any reply.
func (c *serverClock) offset(t uint16) (int64, bool) {
	var v uint64
	if c.perTag != nil {
		v = c.perTag[t].Load()
	}
	if v == 0 {
		v = c.any.Load()
	}
	if v == 0 {
		return 0, false
	}
	return int64(int32(uint32(v))), true
}
