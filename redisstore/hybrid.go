package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
// nil, leases run on real time; Penalty must be false, NewHybrid rejects it;
// Algorithm SlidingLog or SlidingCounter: NewHybrid rejects GCRA, see the
// package documentation) plus the lease parameters.
type HybridConfig struct {
	Config
	// SyncInterval is the period of the background sync: one pipelined
	// round trip per batch of keys. 0 means DefaultSyncInterval.
	SyncInterval time.Duration
	// MaxLease caps the tokens one node reserves for one key per sync. It
	// sets both the error bound (see Hybrid) and the fastest a node can
	// admit one key, MaxLease per SyncInterval. A request of n > MaxLease
	// is judged by a lease of n, asked for at once (a round trip, as in a
	// Store). 0 means max(1, ceil(2 x Limit x SyncInterval / Window)):
	// twice the key's average share of the limit per interval.
	MaxLease int
}

// Hybrid decides in memory against leases of a global limit held in Redis.
//
// Each node reserves tokens per key in Redis (recorded in the key's
// window at the server's TIME, as requests would be) and admits requests
// locally by spending them: an atomic decrement, no network. A background
// loop, every SyncInterval, returns unused tokens and reserves new ones
// sized to the key's recent demand (at most MaxLease), for all active keys
// in pipelined round trips (chunks of 512 keys, a few in parallel). A
// key's first request on a node, or one that finds no live lease, waits
// for the lease in flight or sends one itself; it waits at most
// Config.Timeout (or its context's deadline), then the fail policy
// decides.
//
// Lease lifetime. A lease sent at s and received at r is spent until
// max(s + 2 x SyncInterval, r + SyncInterval): however long the round
// trip, a lease lives at least one SyncInterval after it arrives, so a
// slow network slows renewals but does not starve the node. A node has at
// most one send in flight per key and sends for a key at least
// SyncInterval apart, except for a request of n that finds a live lease
// asked for fewer than n: it retires that lease (its unspent tokens go
// back in the same script run, before the grant) and asks for n at once.
// With a round trip R above SyncInterval, a key's
// leases are renewed every R and each lives SyncInterval after it arrives,
// so for R - SyncInterval of every R the key has no live lease and its
// requests wait (at most R) for the one in flight: decisions then cost
// what a Store's do, and are still admitted.
//
// Error bound (SlidingLog). Redis never holds more than Limit reservations
// in any window. The requests admitted in a window [t-W, t] spend tokens
// reserved in it (at most Limit) or reserved before t-W. A node spends
// only its current lease, and a lease that is replaced or retired has its
// tokens swapped to zero, so the tokens reserved before t-W that a node
// spends after t-W belong to the lease current at t-W or to the one send
// in flight then (at most one per key): at most two leases per node. With
// N nodes the admitted requests in any window of length W are at most
//
//	Limit + 2 x N x MaxLease
//
// where MaxLease is replaced by n when a request of n > MaxLease asked for
// a lease of n. SlidingCounter keeps its own approximation on top: its
// reservations obey the counter's rule, whose worst case is Limit - 1 over
// Limit (package engine), so its bound is
//
//	2 x Limit - 1 + 2 x N x MaxLease
//
// and leases make that approximation show: reservations made late in one
// aligned window and spent early in the next count in the previous
// window's weighted share. On the test trace (three nodes, Limit 40,
// MaxLease 2) the log peaked at 40-43 in a window, the counter at 48-55
// where the in-memory engine on the same trace peaks at 41. Bound returns
// the part above Limit. The bounds are worst cases (bursts exactly at
// window edges); the tests measure three nodes on a trace against them.
// The price is undershoot: tokens reserved but not spent are
// unavailable to other nodes until the next sync returns them.
// Decision.Remaining is the node's unspent lease and RetryAfter the time to
// its next sync; both are local views.
//
// Faults. When Redis fails, keys with a live lease keep spending it; the
// others, and requests of n larger than the live lease was asked for, are
// decided by OnFailure, as in a Store (a caller whose context ended gets
// its context's error and consumes nothing). A lease whose reply comes
// after Timeout is a fault like any other (counted in Stats().Store, decided
// by the policy for the requests that waited for it), and Redis refuses a
// lease request that reaches it after its deadline, so a lease the node
// gave up on reserves nothing (within the bound in "Deadlines" in the
// package documentation). Returns of unused tokens count once even when
// resent after a lost reply. A server that loses its data grants a fresh
// window, as for a Store.
type Hybrid struct {
	s        *Store
	lease    *script
	interval int64 // ns
	maxLease int
	node     any // this node's id in the SlidingCounter return marks
	// retSeq numbers returns on this node. One sequence for all keys, not
	// one per key entry: an entry dropped while idle and created again
	// must not reuse seqs that Redis has marked applied (its returns would
	// be skipped as resends and their tokens stay reserved).
	retSeq atomic.Int64
	start  time.Time

	keys sync.Map // string -> *hkey

	// Requests without a live lease queue their keys' lease requests here;
	// one goroutine at a time drains the queue into pipelines, so many
	// cold keys at once cost a few round trips, not one each.
	missMu   sync.Mutex
	missQ    []*job
	draining bool
	slots    chan struct{} // bounds the pipelines in flight (misses and syncs)

	stop     chan struct{}
	closed   atomic.Bool // set by Close: misses decide by exact round trips
	done     chan struct{}
	stopOnce sync.Once

	allowed, denied, invalid     atomic.Uint64
	misses, late, syncs          atomic.Uint64
	leased, returned, syncedKeys atomic.Uint64
	scriptLoads, pipelineFaults  atomic.Uint64
}

// lease is a grant of tokens for one key on this node.
type lease struct {
	tokens  atomic.Int64 // unspent; swapped to 0 when the lease is retired
	granted int64
	asked   int64 // what the node asked for: a lease that asked fewer than n cannot judge a request of n
	expires int64 // monotonic ns: max(send + 2 x SyncInterval, receipt + SyncInterval)
	at      int64 // log: the TIME (µs) of the script run that reserved it, which names its members; counter: window number
	first   int64 // log: index of the first member
}

// ret is a retired lease's unspent tokens, to give back at a later sync;
// seq numbers the returns of this node (increasing per key, so Redis can
// skip a return it has applied: see counterLeaseScript).
type ret struct{ at, first, unused, seq int64 }

// flight is a lease request in progress; done is closed once its result is
// installed. Requests that find no live lease wait on it.
type flight struct{ done chan struct{} }

type hkey struct {
	key         string
	name, marks string // Redis keys (marks: SlidingCounter only)
	tag         uint16
	cur         atomic.Pointer[lease]
	demand      atomic.Int64 // tokens asked since the last sync, admitted or not

	mu       sync.Mutex
	flight   *flight // the send in progress, nil if none; guarded by mu
	lastSend int64   // monotonic ns of the last send; guarded by mu
	failErr  error   // why the last send failed, nil if it did not; guarded by mu
	pending  []ret   // guarded by mu
	quiet    int     // syncs since the key last had demand; guarded by mu
	dead     bool    // removed from the map; guarded by mu
}

// HybridStats is a snapshot of a Hybrid's counters (monotonic).
type HybridStats struct {
	Allowed, Denied uint64
	Invalid         uint64 // calls of n <= 0 or n > Limit (RetryAfter engine.Never), not in Denied
	Misses          uint64 // decisions that found no live lease and waited for one
	Late            uint64 // of those, the ones whose wait ran past Timeout (decided by the policy)
	Syncs           uint64 // background batches sent
	SyncedKeys      uint64 // key entries in those batches
	Leased          uint64 // tokens granted by Redis
	Returned        uint64 // unspent tokens given back
	PipelineFaults  uint64 // lease requests that failed
	ScriptLoads     uint64 // NOSCRIPT answers that made a batch resend by EVAL
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

// pipelineChunk bounds the commands of one pipeline, and chunkParallelism
// (twice over: syncs and misses share the bound) how many are in flight at
// once, so a node with many active keys sends moderate batches side by
// side rather than one huge one or one after another (each chunk's leases
// count from its own send and receipt).
const (
	pipelineChunk    = 512
	chunkParallelism = 4
)

// NewHybrid validates cfg, starts the background sync and returns a Hybrid.
// Close stops it and returns the unspent tokens.
func NewHybrid(cfg HybridConfig) (*Hybrid, error) {
	if cfg.Clock != nil {
		return nil, invalid("HybridConfig.Clock must be nil: leases run on the server's TIME and the node's monotonic clock")
	}
	if cfg.Penalty {
		// A penalty records denied requests too. A Hybrid denies in
		// memory, from its lease, without telling Redis, so the other
		// nodes would never see the penalty: the key would be punished on
		// one node only, and the overshoot bound would not be the
		// penalty's. Refused rather than silently ignored.
		return nil, invalid("HybridConfig.Penalty is not supported by a Hybrid (denials are decided in memory and never reach Redis); use a Store for penalty keys")
	}
	if cfg.Algorithm == engine.GCRA {
		// A lease is tokens reserved from the global state and spent
		// later; the unspent ones go back. SlidingLog and SlidingCounter
		// can take a token back (by name, or from the window it was
		// counted in), because their state is a count. GCRA's is one time,
		// max(TAT, now) + n x T: once the bucket has refilled past the
		// lease (TAT <= now), the lease's tokens are no longer in the TAT,
		// and taking n x T off it would give back capacity the key never
		// had: more than the rate. Not returning them would waste every
		// unspent lease, each sync. Neither bound is the one a Hybrid
		// promises, so GCRA is refused here: use a Store.
		return nil, invalid("HybridConfig.Algorithm GCRA is not supported by a Hybrid (its leases cannot be returned to a GCRA bucket without exceeding the rate); use a Store")
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
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24)
	h := &Hybrid{
		s: s, lease: logLeaseScript, interval: int64(cfg.SyncInterval), maxLease: cfg.MaxLease,
		node: hex.EncodeToString(id[:]), start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
		slots: make(chan struct{}, 2*chunkParallelism),
	}
	if c.Algorithm == engine.SlidingCounter {
		h.lease = counterLeaseScript
	}
	s.loadScripts(h.lease)
	go h.loop()
	return h, nil
}

// MaxLease returns the lease cap in use (the default filled in).
func (h *Hybrid) MaxLease() int { return h.maxLease }

// Bound returns the documented worst-case overshoot for nodes nodes: how
// many requests above Limit any window of length Window may admit, for
// requests of n <= MaxLease (see Hybrid for larger ones).
// SlidingLog: 2 x nodes x MaxLease. SlidingCounter: Limit - 1 more, its
// own approximation (see Hybrid).
func (h *Hybrid) Bound(nodes int) int {
	b := 2 * nodes * h.maxLease
	if h.s.cfg.Algorithm == engine.SlidingCounter {
		b += h.s.cfg.Limit - 1
	}
	return b
}

func (h *Hybrid) mono() int64 { return int64(time.Since(h.start)) }

// Allow reports whether one request for key is admitted now.
func (h *Hybrid) Allow(key string) bool { return h.AllowN(key, 1).Allowed }

// AllowN admits n requests for key, all or none, from the node's lease.
func (h *Hybrid) AllowN(key string, n int) engine.Decision {
	d, _ := h.AllowNContext(context.Background(), key, n)
	return d
}

// AllowNContext is AllowN. A decision with a live lease never waits; one
// without waits for a lease at most Config.Timeout or until ctx ends, and
// then returns the fail policy's decision with an error, as a Store does.
func (h *Hybrid) AllowNContext(ctx context.Context, key string, n int) (engine.Decision, error) {
	L := h.s.cfg.Limit
	if n <= 0 || n > L {
		h.invalid.Add(1) // as the engine: never admissible, not a denial
		return engine.Decision{Limit: L, RetryAfter: engine.Never}, nil
	}
	if err := h.s.checkKey("allow", key); err != nil {
		h.denied.Add(1)
		return engine.Decision{Limit: L}, err
	}
	e := h.entry(key)
	e.demand.Add(int64(n))
	if d, ok := h.spend(e, n, h.mono()); ok {
		return d, nil
	}
	if h.closed.Load() {
		// No sync will return a lease taken now: decide by one exact
		// round trip, as a Store, reserving nothing beyond n.
		d, err := h.s.AllowNContext(ctx, key, n)
		if d.Allowed {
			h.allowed.Add(1)
		} else {
			h.denied.Add(1)
		}
		return d, err
	}
	return h.miss(ctx, e, key, n)
}

// spend decides from e's lease if it is live and was asked for at least n
// tokens. A lease that asked for fewer (renewed at the key's usual demand,
// below a request of n > MaxLease) says nothing about whether Redis has
// room for n: such a request takes the miss path, which asks for n.
func (h *Hybrid) spend(e *hkey, n int, now int64) (engine.Decision, bool) {
	l := e.cur.Load()
	if l == nil || now >= l.expires {
		return engine.Decision{}, false
	}
	L := h.s.cfg.Limit
	for {
		t := l.tokens.Load()
		if t < int64(n) {
			if l.asked < int64(n) {
				return engine.Decision{}, false
			}
			h.denied.Add(1)
			return engine.Decision{Limit: L, Remaining: int(t), RetryAfter: time.Duration(h.interval)}, true
		}
		// A retired lease is swapped to 0, so a CAS from a stale load
		// fails: no token is spent after its return is counted.
		if l.tokens.CompareAndSwap(t, t-int64(n)) {
			h.allowed.Add(1)
			return engine.Decision{Allowed: true, Limit: L, Remaining: int(t) - n, ResetAfter: h.s.cfg.Window}, true
		}
	}
}

// entry returns key's live entry, creating it.
func (h *Hybrid) entry(key string) *hkey {
	if v, ok := h.keys.Load(key); ok {
		return v.(*hkey)
	}
	e := &hkey{key: key, lastSend: -1 << 62}
	e.name, e.tag = h.s.ks.state(key)
	if h.s.cfg.Algorithm == engine.SlidingCounter {
		e.marks = h.s.ks.marks(key)
	}
	v, _ := h.keys.LoadOrStore(key, e)
	return v.(*hkey)
}

// errLeaseWait is the cause of a decision whose wait for a lease ran past
// its budget.
var errLeaseWait = errors.New("no lease within the timeout")

// miss is the path of a decision without a live lease: wait for the lease
// in flight, or send one, within the decision's budget (Timeout or ctx's
// deadline, whichever is first). One send per key at a time, at least a
// SyncInterval after the last; after a failed send the policy decides
// until the next one is due.
func (h *Hybrid) miss(ctx context.Context, e *hkey, key string, n int) (engine.Decision, error) {
	h.misses.Add(1)
	deadline, own := time.Now().Add(h.s.cfg.Timeout), true
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, own = d, false
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			// The caller gave up (also when its context ended while a
			// flight it waited for completed): its context's error, and
			// nothing consumed, whatever the last send did.
			return h.policy(key, n, err)
		}
		e.mu.Lock()
		for e.dead {
			e.mu.Unlock()
			e = h.entry(key)
			e.mu.Lock()
		}
		now := h.mono()
		if d, ok := h.spend(e, n, now); ok {
			e.mu.Unlock()
			return d, nil
		}
		// undersized: a live lease that asked for fewer than n tokens. It
		// may send at once (the send asks for n, so the next lease can
		// judge the request), not only a SyncInterval after the last.
		l := e.cur.Load()
		undersized := l != nil && now < l.expires && l.asked < int64(n)
		f := e.flight
		var wake <-chan struct{}
		switch {
		case f != nil:
			wake = f.done
		case e.failErr != nil && now-e.lastSend < h.interval:
			err := e.failErr
			e.mu.Unlock()
			return h.policy(key, n, err)
		case now-e.lastSend < h.interval && !undersized:
			// A send that returned tokens only (the key had gone quiet):
			// the next may go once a SyncInterval has passed.
		default:
			// The lease here is expired or undersized (a live one that
			// could judge the request decided it in spend): retire it
			// first, so its unspent tokens go back in the same script
			// run, before the grant, and this node's own reservation
			// never stands between it and n (kept, a Limit-10 key with
			// one token held could never be granted 9).
			h.retire(e, e.cur.Swap(nil))
			f = &flight{done: make(chan struct{})}
			e.flight = f
			e.demand.Store(0) // this send serves the demand so far
			j := h.newJob(e, int64(min(h.s.cfg.Limit, max(n, h.maxLease))), f)
			wake = f.done
			h.queueMiss(j)
		}
		wait := time.Until(deadline)
		if wake == nil {
			wait = min(wait, time.Duration(e.lastSend+h.interval-now))
		}
		e.mu.Unlock()
		if wait <= 0 {
			if err := ctx.Err(); err != nil {
				return h.policy(key, n, err)
			}
			if !own {
				// The caller's own deadline, shorter than Timeout: its
				// problem, as in a Store.
				return h.policy(key, n, context.DeadlineExceeded)
			}
			h.late.Add(1)
			return h.policy(key, n, fmt.Errorf("%w: %w: %w", ErrUnavailable, context.DeadlineExceeded, errLeaseWait))
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return h.policy(key, n, ctx.Err())
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// policy is the decision of a request that got no lease: the fail
// policy's, consuming nothing when the caller gave up (err is then the
// context's error alone).
func (h *Hybrid) policy(key string, n int, err error) (engine.Decision, error) {
	d := h.s.fail(key, n, errors.Is(err, ErrUnavailable))
	if d.Allowed {
		h.allowed.Add(1)
	} else {
		h.denied.Add(1)
	}
	return d, fmt.Errorf("redisstore: hybrid allow %q: %w", key, err)
}

// job is one key's lease request: g tokens (0: returns only) and the
// returns to send, copied under the key's lock when the job is made, and
// the flight to close once its result is installed.
type job struct {
	e    *hkey
	g    int64
	rets []ret
	f    *flight
	nc   *nodeClock // the clock of the key's server, and its estimate, set at send
	off  int64
}

// newJob makes e's request. Caller holds e.mu and has set e.flight = f.
func (h *Hybrid) newJob(e *hkey, g int64, f *flight) *job {
	return &job{e: e, g: g, rets: append([]ret(nil), e.pending...), f: f}
}

// queueMiss queues a lease request of the miss path and makes sure a
// goroutine is draining the queue.
func (h *Hybrid) queueMiss(j *job) {
	h.missMu.Lock()
	h.missQ = append(h.missQ, j)
	start := !h.draining
	h.draining = true
	h.missMu.Unlock()
	if start {
		go h.drainMisses()
	}
}

// drainMisses sends the queued lease requests in chunks, without waiting
// for one batch before taking the next (h.slots bounds them), and exits
// when the queue is empty.
func (h *Hybrid) drainMisses() {
	for {
		h.missMu.Lock()
		q := h.missQ
		h.missQ = nil
		if len(q) == 0 {
			h.draining = false
			h.missMu.Unlock()
			return
		}
		h.missMu.Unlock()
		h.sendChunks(q, nil)
	}
}

// sendChunks sends jobs in pipelines of pipelineChunk, at most cap(h.slots)
// in flight; with wg it returns at once and marks each chunk done on wg,
// else it also returns at once (each chunk closes its flights).
func (h *Hybrid) sendChunks(jobs []*job, wg *sync.WaitGroup) {
	for i := 0; i < len(jobs); i += pipelineChunk {
		chunk := jobs[i:min(len(jobs), i+pipelineChunk)]
		h.slots <- struct{}{}
		if wg != nil {
			wg.Add(1)
		}
		go func() {
			h.sendChunk(chunk)
			<-h.slots
			if wg != nil {
				wg.Done()
			}
		}()
	}
}

// args builds the lease script's command for j (see the lease scripts'
// ARGV): verb is evalsha or eval.
func (h *Hybrid) args(j *job, verb string, dlWall int64) []any {
	counter := h.lease == counterLeaseScript
	a := make([]any, 0, 12+3*len(j.rets))
	code := h.lease.shaArg
	if verb == "eval" {
		code = h.lease.srcArg
	}
	if counter {
		a = append(a, verb, code, "2", j.e.name, j.e.marks)
	} else {
		a = append(a, verb, code, oneKey, j.e.name)
	}
	a = append(a, h.s.limit, h.s.winUS, j.g, h.s.ttl, dlWall+j.off, len(j.rets))
	for _, r := range j.rets {
		if counter {
			a = append(a, r.at, r.unused, r.seq)
		} else {
			a = append(a, r.at, r.first, r.unused)
		}
	}
	if counter {
		a = append(a, h.node)
	}
	return a
}

// sendChunk sends jobs in one pipeline (resending by EVAL those the server
// answered NOSCRIPT), installs each result and closes the jobs' flights.
// Jobs that share a flight are adjacent; it is closed after the last.
func (h *Hybrid) sendChunk(jobs []*job) {
	cmds := make([]*redis.IntSliceCmd, len(jobs))
	// send is taken before roundTrip, not inside it: a call the open
	// breaker short-circuits must still count as a send, or the key's next
	// send would be due at once and a waiting request would resend in a
	// loop until its deadline.
	send := h.mono()
	recv := send
	var sentWall, recvWall time.Time
	err := h.s.roundTrip(context.Background(), func(ctx context.Context, deadline time.Time) error {
		if err := h.offsets(ctx, jobs); err != nil {
			return err
		}
		sentWall = time.Now()
		dlWall := serverDeadline(sentWall, deadline)
		err := h.pipeline(ctx, jobs, cmds, "evalsha", dlWall, nil)
		var again []int
		for i, c := range cmds {
			if isNoScript(c.Err()) {
				again = append(again, i)
			}
		}
		if len(again) > 0 {
			h.scriptLoads.Add(1)
			err = h.pipeline(ctx, jobs, cmds, "eval", dlWall, again)
		}
		recv, recvWall = h.mono(), time.Now()
		var re redis.Error
		if errors.As(err, &re) && !serverDown(err) {
			err = nil // a per-key error reply: that entry fails, the server is fine
		}
		for _, c := range cmds {
			if r := c.Val(); err == nil && c.Err() == nil && len(r) == 5 && r[0] == -1 {
				err = errLate // judged below per entry too; the breaker counts the stall once
			}
		}
		return err
	})
	for i, j := range jobs {
		var r [4]int64
		cerr := err
		// A command of a failed pipeline may still hold a reply (read
		// before the connection broke): the server applied it, so it is
		// installed. One without a reply was never answered: the
		// pipeline's error is its cause (go-redis leaves such a command
		// without an error of its own when the dial itself failed).
		if c := cmds[i]; c != nil && c.Err() == nil && (err == nil || len(c.Val()) > 0) {
			r, cerr = h.s.reply(j.nc, c.Val(), sentWall, recvWall, false)
		} else if c != nil && cerr == nil {
			cerr = c.Err()
		}
		h.install(j, r, cerr, send, recv)
		if i == len(jobs)-1 || jobs[i+1].f != j.f {
			close(j.f.done)
		}
	}
}

// offsets sets each job's server clock and its estimate, first reading in
// one pipeline the TIME of the servers whose estimate is missing or stale
// (see nodeClock), once per server.
func (h *Hybrid) offsets(ctx context.Context, jobs []*job) error {
	now := instantOf(time.Now())
	var stale map[*nodeClock]*redis.IntSliceCmd
	var direct map[*nodeClock]string
	for _, j := range jobs {
		j.nc = h.s.clock.node(ctx, j.e.name, j.e.tag)
		var ok bool
		if j.off, ok = j.nc.offset(now); !ok {
			if j.nc.direct.Load() != nil {
				// A cluster master: read from its own node client.
				if direct == nil {
					direct = map[*nodeClock]string{}
				}
				direct[j.nc] = j.e.name
				continue
			}
			if stale == nil {
				stale = map[*nodeClock]*redis.IntSliceCmd{}
			}
			if stale[j.nc] == nil {
				stale[j.nc] = redis.NewIntSliceCmd(ctx, "eval", timeScript.srcArg, oneKey, j.e.name)
			}
		}
	}
	if stale == nil && direct == nil {
		return nil
	}
	offs := map[*nodeClock]int64{}
	for nc, name := range direct {
		off, err := h.s.readClock(ctx, nc, name)
		if err != nil {
			return err
		}
		offs[nc] = off
	}
	if stale != nil {
		p := h.s.cfg.Client.Pipeline()
		for _, c := range stale {
			_ = p.Process(ctx, c)
		}
		sent := time.Now()
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		recv := time.Now()
		for nc, c := range stale {
			h.s.clockReads.Add(1)
			if _, err := h.s.reply(nc, c.Val(), sent, recv, true); err != nil {
				return err
			}
			offs[nc] = offsetLow(c.Val()[4], recv.UnixMicro())
		}
	}
	for _, j := range jobs {
		if off, ok := offs[j.nc]; ok {
			j.off = off
		}
	}
	return nil
}

// pipeline sends the commands of jobs (only those at the indexes in only,
// if not nil) in one pipeline, storing them in cmds.
func (h *Hybrid) pipeline(ctx context.Context, jobs []*job, cmds []*redis.IntSliceCmd, verb string, dlWall int64, only []int) error {
	p := h.s.cfg.Client.Pipeline()
	queue := func(i int) {
		cmds[i] = redis.NewIntSliceCmd(ctx, h.args(jobs[i], verb, dlWall)...)
		_ = p.Process(ctx, cmds[i])
	}
	if only == nil {
		for i := range jobs {
			queue(i)
		}
	} else {
		for _, i := range only {
			queue(i)
		}
	}
	_, err := p.Exec(ctx)
	return err
}

// install applies one lease reply (or failure) to its key and clears the
// key's flight.
func (h *Hybrid) install(j *job, r [4]int64, err error, send, recv int64) {
	e := j.e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flight = nil
	e.lastSend = send
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err) // a per-key error reply or a late refusal
		}
		e.failErr = err
		h.pipelineFaults.Add(1)
		return // the returns stay pending; resending them is safe (see the lease scripts)
	}
	e.failErr = nil
	if len(e.pending) >= len(j.rets) {
		e.pending = append(e.pending[:0], e.pending[len(j.rets):]...)
	}
	for _, p := range j.rets {
		h.returned.Add(uint64(p.unused))
	}
	if j.g == 0 {
		return
	}
	nl := &lease{granted: r[0], asked: j.g, expires: max(send+2*h.interval, recv+h.interval), at: r[1], first: r[2]}
	nl.tokens.Store(r[0])
	h.leased.Add(uint64(r[0]))
	if e.dead {
		// Reset raced with this lease: its tokens stay reserved until they
		// leave the window (the key was deleted; returning them could
		// subtract from requests recorded after the Reset).
		nl.tokens.Store(0)
	}
	h.retire(e, e.cur.Swap(nl))
}

// retire takes an old lease out of use and queues its unspent tokens for
// return. Caller holds e.mu.
func (h *Hybrid) retire(e *hkey, l *lease) {
	if l == nil {
		return
	}
	if unused := l.tokens.Swap(0); unused > 0 && !e.dead {
		seq := h.retSeq.Add(1)
		e.pending = append(e.pending, ret{at: l.at, first: l.first + l.granted - unused, unused: unused, seq: seq})
	}
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
// drops idle keys; the chunks go out side by side and sync returns when
// all are installed. final returns everything and renews nothing, after
// waiting for sends in flight.
func (h *Hybrid) sync(final bool) {
	now := h.mono()
	var jobs []*job
	var f *flight
	h.keys.Range(func(k, v any) bool {
		e := v.(*hkey)
		e.mu.Lock()
		for final && e.flight != nil {
			f := e.flight
			e.mu.Unlock()
			<-f.done
			e.mu.Lock()
		}
		if e.flight != nil || (!final && now-e.lastSend < h.interval) {
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
		if len(jobs)%pipelineChunk == 0 {
			f = &flight{done: make(chan struct{})} // one per chunk
		}
		e.flight = f
		jobs = append(jobs, h.newJob(e, g, f))
		e.mu.Unlock()
		return true
	})
	if len(jobs) == 0 {
		return
	}
	h.syncs.Add(1)
	h.syncedKeys.Add(uint64(len(jobs)))
	var wg sync.WaitGroup
	h.sendChunks(jobs, &wg)
	wg.Wait()
}

// Peek reports what AllowN(key, 1) would decide from the node's lease, or
// asks Redis (one round trip) when the key has no live lease.
func (h *Hybrid) Peek(key string) engine.Decision {
	d, _ := h.PeekContext(context.Background(), key)
	return d
}

// PeekContext is Peek; a round trip to Redis, if one is needed, is bounded
// as in Store.PeekContext.
func (h *Hybrid) PeekContext(ctx context.Context, key string) (engine.Decision, error) {
	if v, ok := h.keys.Load(key); ok {
		if l := v.(*hkey).cur.Load(); l != nil && h.mono() < l.expires {
			t := l.tokens.Load()
			return engine.Decision{Allowed: t >= 1, Limit: h.s.cfg.Limit, Remaining: int(t)}, nil
		}
	}
	return h.s.PeekContext(ctx, key)
}

// Reset forgets key on this node and in Redis.
func (h *Hybrid) Reset(key string) { _ = h.ResetContext(context.Background(), key) }

// ResetContext is Reset under ctx.
func (h *Hybrid) ResetContext(ctx context.Context, key string) error {
	if v, ok := h.keys.LoadAndDelete(key); ok {
		e := v.(*hkey)
		e.mu.Lock()
		e.dead = true
		if l := e.cur.Swap(nil); l != nil {
			l.tokens.Store(0)
		}
		e.pending = nil // the key's deletion drops them with it
		e.mu.Unlock()
	}
	return h.s.ResetContext(ctx, key)
}

// Stats returns a snapshot of the Hybrid's counters.
func (h *Hybrid) Stats() HybridStats {
	n := 0
	h.keys.Range(func(any, any) bool { n++; return true })
	return HybridStats{
		Allowed: h.allowed.Load(), Denied: h.denied.Load(), Invalid: h.invalid.Load(), Misses: h.misses.Load(), Late: h.late.Load(),
		Syncs: h.syncs.Load(), SyncedKeys: h.syncedKeys.Load(), Leased: h.leased.Load(),
		Returned: h.returned.Load(), PipelineFaults: h.pipelineFaults.Load(), ScriptLoads: h.scriptLoads.Load(), Keys: n,
		Store: h.s.Stats(),
	}
}

// Close stops the background sync after one last batch that returns every
// unspent token, and releases the Store. Decisions after Close still work,
// each by one round trip deciding exactly its n requests, as a Store does
// (no lease is taken: nothing would return it). A miss already waiting for
// a lease when Close is called may still install one; its unspent tokens
// then count in Redis until they leave the window. Safe to call more than
// once.
func (h *Hybrid) Close() error {
	h.closed.Store(true)
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	return h.s.Close()
}

var _ engine.RateLimiter = (*Hybrid)(nil)
