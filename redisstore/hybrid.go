package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
)

// DefaultSyncInterval is how often a Hybrid renews its leases by default.
const DefaultSyncInterval = 5 * time.Millisecond

// HybridConfig configures a Hybrid: the Store's Config (Client, Algorithm,
// Limit, Window, Prefix, Timeout, OnFailure, Nodes, breaker; Clock must be
// nil, leases run on real time) plus the lease parameters.
type HybridConfig struct {
	Config
	// SyncInterval is the period of the background sync: one pipelined
	// round trip per batch of keys. 0 means DefaultSyncInterval.
	SyncInterval time.Duration
	// MaxLease caps the tokens one node reserves for one key per sync. It
	// sets both the error bound (see Hybrid) and the fastest a node can
	// admit one key, MaxLease per SyncInterval. 0 means
	// max(1, ceil(2 x Limit x SyncInterval / Window)): twice the key's
	// average share of the limit per interval.
	MaxLease int
}

// Hybrid decides in memory against leases of a global limit held in Redis.
//
// Each node reserves tokens per key in Redis (recorded in the key's
// window at the server's TIME, as requests would be) and admits requests
// locally by spending them: an atomic decrement, no network. A background
// loop, every SyncInterval, returns unused tokens and reserves new ones
// sized to the key's recent demand (at most MaxLease), for all active keys
// in one pipelined round trip. A key's first request on a node, or the
// first after its lease ran out of time, waits for one round trip.
//
// Error bound (SlidingLog). A lease is spent only within 2 x SyncInterval
// of the moment its request was sent, and a node sends for a key at most
// once per SyncInterval. A request admitted at u in the window [t-W, t]
// whose tokens the Redis window no longer counts was reserved before
// t-W, so its lease was sent in (t-W-2I, t-W): at most two leases per
// node. Redis never holds more than Limit reservations in any window, so
// with N nodes the admitted requests in any window of length W are at most
//
//	Limit + 2 x N x MaxLease
//
// (a first request of n > MaxLease leases n, and n replaces MaxLease there).
// The bound is worst case (bursts exactly at window edges); the test
// measures the overshoot of three nodes on a trace against it. The price is
// undershoot: tokens reserved but not spent are unavailable to other nodes
// until the next sync returns them. SlidingCounter keeps its own
// approximation on top. Decision.Remaining is the node's unspent lease and
// RetryAfter the time to its next sync; both are local views.
//
// When Redis fails, keys with a live lease keep spending it; the others
// are decided by OnFailure, as in a Store.
type Hybrid struct {
	s        *Store
	lease    *redis.Script
	interval int64 // ns
	maxLease int
	ttl      string
	start    time.Time

	keys sync.Map // string -> *hkey

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	allowed, denied, misses, syncs atomic.Uint64
	leased, returned, syncedKeys   atomic.Uint64
	scriptReloads, pipelineFaults  atomic.Uint64
}

// lease is a grant of tokens for one key on this node.
type lease struct {
	tokens  atomic.Int64 // unspent; swapped to 0 when the lease is retired
	granted int64
	expires int64 // monotonic ns: send + 2 x SyncInterval
	at      int64 // log: server µs of the reservation; counter: window number
	first   int64 // log: seq of the first member
}

// ret is a retired lease's unspent tokens, to give back at the next sync.
type ret struct{ at, first, unused int64 }

type hkey struct {
	key    string
	cur    atomic.Pointer[lease]
	demand atomic.Int64 // tokens asked since the last sync, admitted or not

	mu       sync.Mutex // serializes sends for the key (loop vs first request)
	lastSend int64      // monotonic ns of the last send; guarded by mu
	failed   bool       // the last send failed; guarded by mu
	pending  []ret      // guarded by mu
	quiet    int        // syncs since the key last had demand; guarded by mu
	dead     bool       // removed from the map; guarded by mu
}

// HybridStats is a snapshot of a Hybrid's counters (monotonic).
type HybridStats struct {
	Allowed, Denied uint64
	Misses          uint64 // decisions that waited for a round trip (no live lease)
	Syncs           uint64 // background batches sent
	SyncedKeys      uint64 // key entries in those batches
	Leased          uint64 // tokens granted by Redis
	Returned        uint64 // unspent tokens given back
	PipelineFaults  uint64 // batches or entries that failed
	ScriptLoads     uint64 // NOSCRIPT answers that made a batch load the script
	Keys            int    // keys tracked on this node now
	Store           Stats  // the underlying Store's faults and policy decisions
}

// keepWarm is how many syncs without demand a key's lease is still renewed
// (with one token), so that a key with sparse traffic does not pay a round
// trip each time its lease expires between two requests.
const keepWarm = 4

// idleSyncs is how many syncs without demand a key survives before its
// entry is dropped (its lease has expired and its tokens were returned).
const idleSyncs = 16

// pipelineChunk bounds the commands of one pipeline, so a node with many
// active keys sends several moderate batches rather than one huge one.
const pipelineChunk = 512

// NewHybrid validates cfg, starts the background sync and returns a Hybrid.
// Close stops it and returns the unspent tokens.
func NewHybrid(cfg HybridConfig) (*Hybrid, error) {
	if cfg.Clock != nil {
		return nil, invalid("HybridConfig.Clock must be nil: leases run on the server's TIME and the node's monotonic clock")
	}
	s, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	c := s.cfg
	if cfg.SyncInterval < 0 {
		return nil, invalid("HybridConfig.SyncInterval must be >= 0, got %v", cfg.SyncInterval)
	}
	if cfg.SyncInterval == 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.SyncInterval*2 >= c.Window {
		return nil, invalid("HybridConfig.SyncInterval %v must be less than half the Window %v", cfg.SyncInterval, c.Window)
	}
	if cfg.MaxLease < 0 || cfg.MaxLease > c.Limit {
		return nil, invalid("HybridConfig.MaxLease must be in [0, Limit=%d], got %d", c.Limit, cfg.MaxLease)
	}
	if cfg.MaxLease == 0 {
		per := 2 * int64(c.Limit) * int64(cfg.SyncInterval)
		cfg.MaxLease = int(min(int64(c.Limit), max(1, (per+int64(c.Window)-1)/int64(c.Window))))
	}
	h := &Hybrid{
		s: s, lease: logLeaseScript, interval: int64(cfg.SyncInterval), maxLease: cfg.MaxLease,
		ttl: s.ttl, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if c.Algorithm == engine.SlidingCounter {
		h.lease = counterLeaseScript
	}
	go h.loop()
	return h, nil
}

// MaxLease returns the lease cap in use (the default filled in).
func (h *Hybrid) MaxLease() int { return h.maxLease }

// Bound returns the documented worst-case overshoot for nodes nodes:
// 2 x nodes x MaxLease requests above Limit in any window.
func (h *Hybrid) Bound(nodes int) int { return 2 * nodes * h.maxLease }

func (h *Hybrid) mono() int64 { return int64(time.Since(h.start)) }

// Allow reports whether one request for key is admitted now.
func (h *Hybrid) Allow(key string) bool { return h.AllowN(key, 1).Allowed }

// AllowN admits n requests for key, all or none, from the node's lease.
func (h *Hybrid) AllowN(key string, n int) engine.Decision {
	L := h.s.cfg.Limit
	if n <= 0 || n > L {
		h.denied.Add(1)
		return engine.Decision{Limit: L}
	}
	e := h.entry(key)
	e.demand.Add(int64(n))
	for miss := false; ; miss = true {
		now := h.mono()
		if l := e.cur.Load(); l != nil && now < l.expires {
			for {
				t := l.tokens.Load()
				if t < int64(n) {
					h.denied.Add(1)
					return engine.Decision{Limit: L, Remaining: int(t), RetryAfter: time.Duration(h.interval)}
				}
				// A retired lease is swapped to 0, so a CAS from a stale
				// load fails: no token is spent after its return is counted.
				if l.tokens.CompareAndSwap(t, t-int64(n)) {
					h.allowed.Add(1)
					return engine.Decision{Allowed: true, Limit: L, Remaining: int(t) - n, ResetAfter: h.s.cfg.Window}
				}
			}
		}
		if miss {
			break
		}
		var ok bool
		if e, ok = h.acquire(e, key, n); !ok {
			break
		}
	}
	// No live lease and none to be had: Redis failed, or was asked less
	// than a SyncInterval ago.
	e.mu.Lock()
	failed := e.failed
	e.mu.Unlock()
	var d engine.Decision
	if failed {
		d = h.s.fail(key, n, true)
	} else {
		d = engine.Decision{Limit: L, RetryAfter: time.Duration(h.interval)}
	}
	if d.Allowed {
		h.allowed.Add(1)
	} else {
		h.denied.Add(1)
	}
	return d
}

// entry returns key's live entry, creating it.
func (h *Hybrid) entry(key string) *hkey {
	if v, ok := h.keys.Load(key); ok {
		return v.(*hkey)
	}
	v, _ := h.keys.LoadOrStore(key, &hkey{key: key, lastSend: -1 << 62})
	return v.(*hkey)
}

// acquire is the miss path: one synchronous lease for e. It returns the
// entry to retry on and whether a send happened.
func (h *Hybrid) acquire(e *hkey, key string, n int) (*hkey, bool) {
	e.mu.Lock()
	for e.dead {
		e.mu.Unlock()
		e = h.entry(key)
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	now := h.mono()
	if l := e.cur.Load(); l != nil && now < l.expires {
		return e, true // another goroutine got one meanwhile
	}
	if now-e.lastSend < h.interval {
		return e, false // keep sends a SyncInterval apart (the bound needs it)
	}
	h.misses.Add(1)
	g := int64(min(h.s.cfg.Limit, max(n, h.maxLease)))
	e.demand.Store(0) // this send serves the demand so far
	batch := []*hkey{e}
	reqs := []int64{g}
	h.send(context.Background(), now, batch, reqs)
	return e, true
}

// send runs the lease script for entries (locked by the caller) with the
// given requests, in pipelines, and installs the results. now is the send
// time: leases expire at now + 2 x SyncInterval.
func (h *Hybrid) send(ctx context.Context, now int64, entries []*hkey, reqs []int64) {
	for i := 0; i < len(entries); i += pipelineChunk {
		j := min(len(entries), i+pipelineChunk)
		h.sendChunk(ctx, now, entries[i:j], reqs[i:j])
	}
}

func (h *Hybrid) sendChunk(ctx context.Context, now int64, entries []*hkey, reqs []int64) {
	cmds := make([]*redis.Cmd, len(entries))
	pipeline := func(ctx context.Context) error {
		_, err := h.s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, e := range entries {
				args := make([]any, 0, 5+3*len(e.pending))
				args = append(args, h.s.limit, h.s.winUS, reqs[i], h.ttl, len(e.pending))
				for _, r := range e.pending {
					args = append(args, r.at, r.first, r.unused)
				}
				cmds[i] = h.lease.EvalSha(ctx, p, h.s.keys(e.key), args...)
			}
			return nil
		})
		return err
	}
	run := func(ctx context.Context) error {
		err := pipeline(ctx)
		if isNoScript(err) {
			// A pipeline cannot fall back to EVAL per command: load the
			// script (on every master of a cluster) and resend once.
			h.scriptReloads.Add(1)
			if err = h.lease.Load(ctx, h.s.cfg.Client).Err(); err == nil {
				err = pipeline(ctx)
			}
		}
		return err
	}
	err := h.s.do(ctx, run)
	for i, e := range entries {
		e.lastSend = now
		var r []int64
		cerr := err
		if cmds[i] != nil && (err == nil || cmds[i].Err() == nil) {
			r, cerr = cmds[i].Int64Slice()
			if cerr == nil && len(r) != 3 {
				cerr = fmt.Errorf("lease script returned %d values, want 3", len(r))
			}
		}
		if cerr != nil {
			e.failed = true
			h.pipelineFaults.Add(1)
			continue
		}
		e.failed = false
		for _, p := range e.pending {
			h.returned.Add(uint64(p.unused))
		}
		e.pending = e.pending[:0]
		if reqs[i] == 0 {
			continue
		}
		nl := &lease{granted: r[0], expires: now + 2*h.interval, at: r[1], first: r[2]}
		nl.tokens.Store(r[0])
		h.leased.Add(uint64(r[0]))
		h.retire(e, e.cur.Swap(nl))
	}
}

// retire takes an old lease out of use and queues its unspent tokens for
// return. Caller holds e.mu.
func (h *Hybrid) retire(e *hkey, l *lease) {
	if l == nil {
		return
	}
	if unused := l.tokens.Swap(0); unused > 0 {
		e.pending = append(e.pending, ret{at: l.at, first: l.first + l.granted - unused, unused: unused})
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// loop is the background sync: batches start at least SyncInterval apart.
func (h *Hybrid) loop() {
	defer close(h.done)
	t := time.NewTimer(time.Duration(h.interval))
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			h.sync(true)
			return
		case <-t.C:
		}
		start := h.mono()
		h.sync(false)
		t.Reset(time.Duration(max(0, start+h.interval-h.mono())))
	}
}

// sync renews the leases of keys with demand, returns unspent tokens and
// drops idle keys. final returns everything and renews nothing.
func (h *Hybrid) sync(final bool) {
	now := h.mono()
	var entries []*hkey
	var reqs []int64
	h.keys.Range(func(k, v any) bool {
		e := v.(*hkey)
		if !e.mu.TryLock() {
			return true // a first request is fetching this key's lease
		}
		if now-e.lastSend < h.interval && !final {
			e.mu.Unlock()
			return true
		}
		l := e.cur.Load()
		if final || (l != nil && now >= l.expires) {
			h.retire(e, e.cur.Swap(nil))
			l = nil
		}
		d := e.demand.Swap(0)
		if d > 0 {
			e.quiet = 0
		} else {
			e.quiet++
		}
		g := int64(0)
		if !final && (d > 0 || e.quiet <= keepWarm) {
			g = min(int64(h.maxLease), max(1, 2*d))
		}
		if g == 0 && len(e.pending) == 0 {
			if l == nil && e.quiet >= idleSyncs {
				e.dead = true
				h.keys.Delete(k)
			}
			e.mu.Unlock()
			return true
		}
		entries = append(entries, e) // stays locked until sent
		reqs = append(reqs, g)
		return true
	})
	if len(entries) == 0 {
		return
	}
	h.syncs.Add(1)
	h.syncedKeys.Add(uint64(len(entries)))
	h.send(context.Background(), now, entries, reqs)
	for _, e := range entries {
		e.mu.Unlock()
	}
}

// Peek reports what AllowN(key, 1) would decide from the node's lease, or
// asks Redis (one round trip) when the key has no live lease.
func (h *Hybrid) Peek(key string) engine.Decision {
	if v, ok := h.keys.Load(key); ok {
		if l := v.(*hkey).cur.Load(); l != nil && h.mono() < l.expires {
			t := l.tokens.Load()
			return engine.Decision{Allowed: t >= 1, Limit: h.s.cfg.Limit, Remaining: int(t)}
		}
	}
	return h.s.Peek(key)
}

// Reset forgets key on this node and in Redis.
func (h *Hybrid) Reset(key string) {
	if v, ok := h.keys.LoadAndDelete(key); ok {
		e := v.(*hkey)
		e.mu.Lock()
		e.dead = true
		if l := e.cur.Swap(nil); l != nil {
			l.tokens.Store(0)
		}
		e.pending = nil // the DEL below drops them with the key
		e.mu.Unlock()
	}
	h.s.Reset(key)
}

// Stats returns a snapshot of the Hybrid's counters.
func (h *Hybrid) Stats() HybridStats {
	n := 0
	h.keys.Range(func(any, any) bool { n++; return true })
	return HybridStats{
		Allowed: h.allowed.Load(), Denied: h.denied.Load(), Misses: h.misses.Load(),
		Syncs: h.syncs.Load(), SyncedKeys: h.syncedKeys.Load(), Leased: h.leased.Load(),
		Returned: h.returned.Load(), PipelineFaults: h.pipelineFaults.Load(), ScriptLoads: h.scriptReloads.Load(), Keys: n,
		Store: h.s.Stats(),
	}
}

// Close stops the background sync after one last batch that returns every
// unspent token, and releases the Store. Decisions after Close still work
// (from leases until they expire, then by round trips). Safe to call more
// than once.
func (h *Hybrid) Close() error {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	return h.s.Close()
}

// AllowNContext is AllowN. Hybrid decides from leases renewed in the
// background, so a decision waits on Redis only when the key has no live
// lease; that wait is bounded by Config.Timeout.
func (h *Hybrid) AllowNContext(_ context.Context, key string, n int) (engine.Decision, error) {
	return h.AllowN(key, n), nil
}

// PeekContext is Peek.
func (h *Hybrid) PeekContext(_ context.Context, key string) (engine.Decision, error) {
	return h.Peek(key), nil
}

// ResetContext is Reset.
func (h *Hybrid) ResetContext(_ context.Context, key string) error {
	h.Reset(key)
	return nil
}

var _ engine.RateLimiter = (*Hybrid)(nil)
