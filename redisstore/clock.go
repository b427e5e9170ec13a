package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// nodeClock estimates, for one server, a lower bound of offset = server
// clock - this process's wall clock (µs), so that a call's deadline can be
// handed to Redis in the server's own clock and the script can refuse work
// that arrives after it (see "Deadlines" in the package documentation).
//
// A reply sent at local time sent and read at recv carries the server's
// time S, taken while the script ran, between the two: so S - recv <=
// offset <= S - sent (a microsecond either way for truncation). The
// estimate is the interval [lo, hi] of the replies of the current period
// of clockPeriod (the intersection of theirs), and lo is the offset used,
// never above the true offset while the server's clock does not step back.
//
// Only replies known to be this server's feed it: a clock read (a seed,
// which replaces it) and replies whose interval meets it (within
// clockTolerance, the drift of a period). A reply that does not meet it
// came from another server (a cluster's ASK redirection during a slot
// migration, a Ring that moved the key's tag to another shard) or from a
// server whose clock stepped: it does not feed the estimate but drops it,
// so the next call reads the server's clock first. Such replies cannot lend
// this server another's offset, and a step of the server's clock by more
// than a round trip (and clockTolerance) misleads only the calls already
// sent when its first reply after the step is read.
//
// It is trusted only while it is fresh: less than clockPeriod after the
// latest reply that fed it (seen), measured on the monotonic clock, and
// while this process's wall clock has kept pace with its monotonic clock
// since the estimate was made (within clockTolerance): a step of the local
// wall clock, either way, invalidates it at once. A stale or missing one is
// refreshed by reading the server's TIME before the call (one more round
// trip, see Store.offset). So a client that hears from a server at least
// once a clockPeriod never pays that round trip.
//
// The bounds are int64 µs: any offset (hours, days, a clock restored from
// an old snapshot) is learned.
type nodeClock struct {
	est  atomic.Pointer[estimate]
	seen atomic.Int64 // monotonic ns (see instant) of the latest reply that fed est
	// direct, for a cluster master, is its node client: a clock read sent
	// to it directly cannot be redirected to another server.
	direct atomic.Pointer[redis.Client]
}

// estimate is one period's interval; immutable once published, so a reader
// sees the bounds and the instant of one update.
type estimate struct {
	at     instant // when the reply that started it was read; its period is at.mono / clockPeriodNS
	lo, hi int64   // µs
}

// instant is a moment in this process's wall clock (µs since the epoch)
// and its monotonic clock (ns since clockBase), read together: their
// difference moves only when the wall clock is stepped or slewed.
type instant struct {
	wall, mono int64
}

var clockBase = time.Now()

// instantOf converts t, which must come from time.Now (it carries the
// monotonic reading).
func instantOf(t time.Time) instant {
	return instant{wall: t.UnixMicro(), mono: int64(t.Sub(clockBase))}
}

// samePace reports whether the wall clock kept pace with the monotonic
// clock from a to b, within clockTolerance.
func (a instant) samePace(b instant) bool {
	d := (b.wall - a.wall) - (b.mono-a.mono)/1000
	return d <= clockTolerance && d >= -clockTolerance
}

// clockPeriod is how long a bound is kept as the best of its period before
// a new period starts from fresh replies, and how long an estimate is
// trusted after the latest reply that fed it (µs; clockPeriodNS in ns).
const (
	clockPeriod   = int64(time.Second / time.Microsecond)
	clockPeriodNS = int64(time.Second)
	// clockTolerance (µs) covers a period of drift and slewing (NTP slews
	// at most 500 ppm): replies within it of the estimate are this
	// server's, and wall and monotonic clocks within it keep pace.
	clockTolerance = int64(time.Millisecond / time.Microsecond)
)

// observe records a reply: the server's time serverUS, in a call sent at
// sent and read at recv. seed says it answered a clock read sent to this
// server: it replaces the estimate. nil ignores it.
func (n *nodeClock) observe(serverUS int64, sent, recv instant, seed bool) {
	if n == nil || !sent.samePace(recv) {
		return // the local wall clock stepped during the call: its bounds mean nothing
	}
	// Every reply of every call comes here, and most change nothing (a
	// bound no better than the period's): the new estimate is allocated
	// only when it is published.
	lo, hi := offsetLow(serverUS, recv.wall), serverUS-sent.wall+1
	var v *estimate // this reply's own interval, once built
	for {
		old := n.est.Load()
		var nv *estimate
		if !seed && old == nil {
			return // only a clock read, sent to this server, makes one
		}
		if !seed {
			if !old.at.samePace(recv) || lo > old.hi+clockTolerance || hi < old.lo-clockTolerance {
				// Another server's reply, or a step of either clock:
				// it does not feed the estimate, and drops it, so the
				// next call reads this server's clock first. (Kept, it
				// would go on misjudging deadlines for a period after a
				// step: refusing every call as late if the server's
				// clock went forward, risking ghost writes if back.)
				n.est.CompareAndSwap(old, nil)
				return
			}
			op, p := old.at.mono/clockPeriodNS, recv.mono/clockPeriodNS
			if p < op {
				break // an old period's reply read late; it still vouches for est
			}
			if p == op {
				if lo <= old.lo && hi >= old.hi {
					break
				}
				nv = &estimate{at: old.at, lo: max(old.lo, lo), hi: min(old.hi, hi)}
			}
		}
		if nv == nil {
			if v == nil {
				v = &estimate{at: recv, lo: lo, hi: hi}
			}
			nv = v
		}
		if n.est.CompareAndSwap(old, nv) {
			break
		}
	}
	// After est: a reader that sees this reply's time also sees an
	// estimate it fed, or a later one.
	for {
		s := n.seen.Load()
		if recv.mono <= s || n.seen.CompareAndSwap(s, recv.mono) {
			return
		}
	}
}

// offsetLow is the lower bound of the offset that the server's time
// serverUS gives when its reply is read at recvWall (µs): S - recv, less a
// microsecond for truncation. A clock read returns it even when observe
// ignores the reply (the local wall clock stepped during the read).
func offsetLow(serverUS, recvWall int64) int64 {
	return serverUS - recvWall - 1
}

// offset returns the estimate's lower bound if it is fresh at now, else 0
// and false.
func (n *nodeClock) offset(now instant) (int64, bool) {
	if n == nil {
		return 0, false
	}
	e := n.est.Load()
	if e == nil || !e.at.samePace(now) {
		return 0, false
	}
	last := max(n.seen.Load(), e.at.mono)
	if now.mono-last >= clockPeriodNS || now.mono < e.at.mono {
		return 0, false
	}
	return e.lo, true
}

// serverClock holds one nodeClock per server: the servers' clocks differ,
// and a server ahead of the others must not lend its offset to a server
// whose guard it would weaken.
//
//   - *redis.Client (one server, or Sentinel's failover client, whose
//     failover a stale estimate's refresh covers): one clock.
//   - *redis.ClusterClient: one clock per master, found from the key's slot
//     in go-redis's slot map (MasterForKey, no round trip). While a slot
//     moves (resharding, failover) go-redis may still name the old master
//     for a call that MOVED or ASK send to the new one: that call is judged
//     with the old master's estimate (its own risk: its deadline is off by
//     the skew between the two servers), and its reply, which does not
//     meet that estimate (unless the two clocks agree within a round trip
//     and clockTolerance), does not feed it but drops it: the master's next
//     call reads its clock first. A master's clock is read from its own
//     node client, which never follows a redirection.
//   - *redis.Ring, whose shard for a key go-redis does not expose: one clock
//     per hash tag (a tag names one shard). A tag whose estimate is not
//     fresh reads its shard's TIME first, like any stale estimate; when the
//     Ring moves the tag to another shard, that shard's replies do not meet
//     the old estimate (unless the two clocks agree within a round trip),
//     so they drop it and the tag's clock is read again, from the new shard.
type serverClock struct {
	single  *nodeClock
	cluster *redis.ClusterClient

	tags []nodeClock // Ring, and a cluster whose slot map cannot be read

	mu     sync.Mutex
	byAddr map[string]*nodeClock // cluster masters; guarded by mu
	routes []atomic.Pointer[route]
}

// route caches a cluster hash tag's master and its clock, so the lookup by
// address (a map under a lock) is made only when the slot's master changes.
type route struct {
	master *redis.Client
	clock  *nodeClock
}

func newServerClock(client redis.UniversalClient) *serverClock {
	c := &serverClock{}
	switch cl := client.(type) {
	case *redis.Client:
		c.single = &nodeClock{}
	case *redis.ClusterClient:
		c.cluster = cl
		c.byAddr = map[string]*nodeClock{}
		c.routes = make([]atomic.Pointer[route], 1<<tagBits)
		c.tags = make([]nodeClock, 1<<tagBits)
	default:
		c.tags = make([]nodeClock, 1<<tagBits)
	}
	return c
}

// node returns the clock of the server that holds the key name (hash tag
// t).
func (c *serverClock) node(ctx context.Context, name string, t uint16) *nodeClock {
	if c.single != nil {
		return c.single
	}
	if c.cluster == nil {
		return &c.tags[t]
	}
	m, err := c.cluster.MasterForKey(ctx, name)
	if err != nil {
		// No slot map yet and none to be had: the call will most likely
		// fail too; the tag's own clock serves meanwhile.
		return &c.tags[t]
	}
	if r := c.routes[t].Load(); r != nil && r.master == m {
		return r.clock
	}
	addr := m.Options().Addr
	c.mu.Lock()
	nc := c.byAddr[addr]
	if nc == nil {
		nc = &nodeClock{}
		c.byAddr[addr] = nc
	}
	c.mu.Unlock()
	nc.direct.Store(m)
	c.routes[t].Store(&route{master: m, clock: nc})
	return nc
}
