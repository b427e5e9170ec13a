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
// A reply read at local time recv carries the server's time S, taken while
// the script ran, so before recv: S - recv <= offset (minus a microsecond
// for truncation). The estimate is the largest such bound seen in the
// current period of clockPeriod (the fastest reply's), so it is never above
// the true offset while the server's clock does not step back against ours.
// It is trusted only while it is fresh: while less than clockPeriod has
// passed since the latest reply of its period was read (seen). A stale or
// missing one is refreshed by reading the server's TIME before the call
// (one more round trip, see Store.offset). So a client that hears from a
// server at least once a clockPeriod never pays that round trip, and a
// step back of the server's clock (or a failover to a server whose clock
// is behind) misleads only the calls sent less than two periods after it:
// an estimate made before the step is replaced by the first reply of the
// next period, or goes stale a period after the last reply it had.
//
// The bound is an int64 of µs: any offset (hours, days, a clock restored
// from an old snapshot) is learned.
type nodeClock struct {
	est  atomic.Pointer[estimate]
	seen atomic.Int64 // wall µs of the latest reply read; counts for est only in est's period
}

// estimate is one period's best bound; immutable once published, so a
// reader sees period and bound of one reply. A new one is allocated only
// when it improves the estimate (a new period, or a faster reply).
type estimate struct {
	recv  int64 // wall µs when the reply that made it was read; its period is recv / clockPeriod
	bound int64 // µs
}

// clockPeriod is how long a bound is kept as the best of its period before
// a new period starts from fresh replies, and how long an estimate is
// trusted after the latest reply of its period (µs).
const clockPeriod = int64(time.Second / time.Microsecond)

// observe records a reply: the server's time serverUS, read by this
// process at wall time recvUS. nil ignores it.
func (n *nodeClock) observe(serverUS, recvUS int64) {
	if n == nil {
		return
	}
	v := estimate{recv: recvUS, bound: serverUS - recvUS - 1}
	p := recvUS / clockPeriod
	for {
		old := n.est.Load()
		if old != nil && (old.recv/clockPeriod > p || old.recv/clockPeriod == p && old.bound >= v.bound) {
			break
		}
		nv := v
		if n.est.CompareAndSwap(old, &nv) {
			break
		}
	}
	// After est: a reader that sees this reply's time also sees an
	// estimate of its period or later (or takes est's own recv).
	for {
		s := n.seen.Load()
		if recvUS <= s || n.seen.CompareAndSwap(s, recvUS) {
			return
		}
	}
}

// offset returns the estimate if it is fresh at wall time nowUS, else 0 and
// false.
func (n *nodeClock) offset(nowUS int64) (int64, bool) {
	if n == nil {
		return 0, false
	}
	e := n.est.Load()
	if e == nil {
		return 0, false
	}
	last := n.seen.Load()
	if last/clockPeriod != e.recv/clockPeriod || last < e.recv {
		// A reply of another period (a later one, whose estimate this
		// load missed; or an old one read late): only est's own time
		// vouches for it.
		last = e.recv
	}
	if nowUS-last >= clockPeriod {
		return 0, false
	}
	return e.bound, true
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
//     with the old master's estimate, and its reply feeds it, off by the
//     skew between the two servers, until go-redis's map catches up.
//   - *redis.Ring, whose shard for a key go-redis does not expose: one clock
//     per hash tag (a tag names one shard). A tag whose estimate is not
//     fresh reads its shard's TIME first, like any stale estimate.
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
	c.routes[t].Store(&route{master: m, clock: nc})
	return nc
}
