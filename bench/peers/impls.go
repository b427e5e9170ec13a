package peers

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	golimiter "github.com/sethvargo/go-limiter"

	"github.com/slidelimit/slidelimit/bench/keyset"
	"github.com/slidelimit/slidelimit/engine"
)

// Limiter is the common shape of every implementation under test.
type Limiter interface {
	// Allow decides one request for key now.
	Allow(key string) bool
	// Close stops the implementation's background work, if any.
	Close()
}

// AllowNer is implemented by limiters that admit n requests at once.
type AllowNer interface{ AllowN(key string, n int) bool }

// Peeker is implemented by limiters that can answer without consuming.
type Peeker interface{ Peek(key string) bool }

// Tracker is implemented by bounded stores that can say how many of keys
// they track now (a store that drops keys decides them untracked).
type Tracker interface{ Tracked(keys []string) int }

// Impl is one implementation under test.
type Impl struct {
	Name      string // the impl=<Name> part of benchmark names
	Algorithm string // what it computes, for the results table
	Module    string // the Go module it comes from ("" for code in this package)
	Bounded   bool   // whether it caps the number of keys it holds
	// New builds a limiter for profile p. keys > 0 is the number of keys the
	// benchmark will hold; bounded stores size themselves for it.
	New func(p keyset.Profile, keys int) (Limiter, error)
}

// Impls lists every implementation, ours first.
func Impls() []Impl {
	return []Impl{
		{"slidelimit-counter", "sliding window counter (approximate)", "github.com/slidelimit/slidelimit", true, newEngine(engine.SlidingCounter)},
		{"slidelimit-log", "sliding window log (exact)", "github.com/slidelimit/slidelimit", true, newEngine(engine.SlidingLog)},
		{"slidelimit-gcra", "GCRA (token bucket, burst = Limit)", "github.com/slidelimit/slidelimit", true, newEngine(engine.GCRA)},
		{"xrate-mutexmap", "token bucket (x/time/rate) in a map behind a sync.Mutex", "golang.org/x/time", false, newXRateMutex},
		{"xrate-syncmap", "token bucket (x/time/rate) in a sync.Map", "golang.org/x/time", false, newXRateSyncMap},
		{"httprate-counter", "sliding window counter (httprate LocalCounter, OnLimit's logic without HTTP)", "github.com/go-chi/httprate", false, newHTTPRate},
		{"golimiter-memorystore", "token bucket refilled per interval tick (go-limiter memorystore)", "github.com/sethvargo/go-limiter", false, newGoLimiter},
		{"ulule-memory", "fixed window counter (ulule/limiter memory store)", "github.com/ulule/limiter/v3", false, newUlule},
		{"throttled-gcra", "GCRA (throttled memstore, unbounded map)", "github.com/throttled/throttled/v2", false, newThrottled},
		{"textbook-log", "sliding window log: map of timestamp slices behind one sync.Mutex", "", false, newTextbookLog},
		{"ristretto-counter", "sliding window counter, state in a ristretto cache (bounded, TinyLFU admission)", "github.com/dgraph-io/ristretto/v2", true, newRistretto},
	}
}

// perSecond is p as a token rate.
func perSecond(p keyset.Profile) float64 { return float64(p.Limit) / p.Window.Seconds() }

// --- slidelimit ---

type engineLimiter struct{ l *engine.Limiter }

func newEngine(algo engine.Algorithm) func(keyset.Profile, int) (Limiter, error) {
	return func(p keyset.Profile, keys int) (Limiter, error) {
		cfg := p.EngineConfig(algo)
		if keys > 0 {
			// The same sizing as the engine suite: room for every key.
			cfg.MaxKeys = keyset.Capacity(keys)
			cfg.MaxMemory = int64(cfg.MaxKeys)*1024 + 256<<20
			// No sweep during the run: with the short Keyed window every key is
			// idle by the time the population ends, and a sweep would turn
			// "existing keys" back into new ones.
			cfg.SweepInterval = time.Hour
		}
		l, err := engine.New(cfg)
		if err != nil {
			return nil, err
		}
		return engineLimiter{l}, nil
	}
}

func (e engineLimiter) Allow(key string) bool { return e.l.Allow(key) }

// AllowN and Peek return only Allowed, but the engine builds the whole
// Decision (Remaining, RetryAfter, ResetAfter) as its callers get it: for
// SlidingLog, Remaining counts the ring's entries in the window (a binary
// search, 16 probes at the hot-key profile's Limit 65535). The token-bucket
// and textbook-log peers' AllowN compute no such figures.
func (e engineLimiter) AllowN(key string, n int) bool { return e.l.AllowN(key, n).Allowed }
func (e engineLimiter) Peek(key string) bool          { return e.l.Peek(key).Allowed }
func (e engineLimiter) Close()                        { _ = e.l.Close() }
func (e engineLimiter) Tracked([]string) int          { return e.l.Len() }

// --- golang.org/x/time/rate behind a map: the limiter most people hand-roll ---

type xrateMutex struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	r     rate.Limit
	burst int
}

func newXRateMutex(p keyset.Profile, keys int) (Limiter, error) {
	return &xrateMutex{m: make(map[string]*rate.Limiter), r: rate.Limit(perSecond(p)), burst: p.Limit}, nil
}

func (x *xrateMutex) get(key string) *rate.Limiter {
	x.mu.Lock()
	l := x.m[key]
	if l == nil {
		l = rate.NewLimiter(x.r, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l
}

func (x *xrateMutex) Allow(key string) bool         { return x.get(key).Allow() }
func (x *xrateMutex) AllowN(key string, n int) bool { return x.get(key).AllowN(time.Now(), n) }
func (x *xrateMutex) Peek(key string) bool          { return x.get(key).Tokens() >= 1 }
func (x *xrateMutex) Close()                        {}

type xrateSyncMap struct {
	m     sync.Map
	r     rate.Limit
	burst int
}

func newXRateSyncMap(p keyset.Profile, keys int) (Limiter, error) {
	return &xrateSyncMap{r: rate.Limit(perSecond(p)), burst: p.Limit}, nil
}

func (x *xrateSyncMap) get(key string) *rate.Limiter {
	if v, ok := x.m.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, _ := x.m.LoadOrStore(key, rate.NewLimiter(x.r, x.burst))
	return v.(*rate.Limiter)
}

func (x *xrateSyncMap) Allow(key string) bool         { return x.get(key).Allow() }
func (x *xrateSyncMap) AllowN(key string, n int) bool { return x.get(key).AllowN(time.Now(), n) }
func (x *xrateSyncMap) Peek(key string) bool          { return x.get(key).Tokens() >= 1 }
func (x *xrateSyncMap) Close()                        {}

// --- github.com/go-chi/httprate ---

// httprateLimiter drives httprate's exported in-memory LimitCounter the
// way RateLimiter.OnLimit does (one mutex around Get, the weighted
// estimate, and IncrementBy), without the http.ResponseWriter and header
// formatting OnLimit needs: RateLimiter has no method that decides a bare
// key. Windows are aligned to the wall clock (OnLimit offsets them by the
// limiter's start instant, which changes nothing per decision).
type httprateLimiter struct {
	mu     sync.Mutex
	c      httprate.LimitCounter
	limit  int
	window time.Duration
}

func newHTTPRate(p keyset.Profile, keys int) (Limiter, error) {
	c := httprate.NewLocalLimitCounter(p.Window)
	c.Config(p.Limit, p.Window)
	return &httprateLimiter{c: c, limit: p.Limit, window: p.Window}, nil
}

func (h *httprateLimiter) decide(key string, n int, consume bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now().UTC()
	cur := now.Truncate(h.window)
	curCount, prevCount, err := h.c.Get(key, cur, cur.Add(-h.window))
	if err != nil {
		return false
	}
	est := float64(prevCount)*(float64(h.window)-float64(now.Sub(cur)))/float64(h.window) + float64(curCount)
	if int(math.Round(est))+n > h.limit {
		return false
	}
	if consume {
		if h.c.IncrementBy(key, cur, n) != nil {
			return false
		}
	}
	return true
}

func (h *httprateLimiter) Allow(key string) bool         { return h.decide(key, 1, true) }
func (h *httprateLimiter) AllowN(key string, n int) bool { return h.decide(key, n, true) }

// Peek is OnLimit's check without the increment, as httprate answers it.
// Its counter's windows move on only in IncrementBy: once two Windows
// have passed since the last increment, Get returns 0, 0 from its window
// comparison without hashing the key or reading a map. BenchmarkPeek
// therefore runs with a Window no run outlasts (peekProfile), so that
// every implementation reads live key state.
func (h *httprateLimiter) Peek(key string) bool { return h.decide(key, 1, false) }
func (h *httprateLimiter) Close()               {}

// --- github.com/sethvargo/go-limiter memorystore ---

type goLimiter struct{ s golimiter.Store }

func newGoLimiter(p keyset.Profile, keys int) (Limiter, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.Limit), Interval: p.Window})
	if err != nil {
		return nil, fmt.Errorf("go-limiter memorystore: %w", err)
	}
	return goLimiter{s}, nil
}

func (g goLimiter) Allow(key string) bool {
	_, _, _, ok, err := g.s.Take(context.Background(), key)
	return ok && err == nil
}

func (g goLimiter) Peek(key string) bool {
	tokens, remaining, err := g.s.Get(context.Background(), key)
	// An unknown key reads as (0, 0): it has a full bucket.
	return err == nil && (remaining > 0 || tokens == 0)
}

func (g goLimiter) Close() { _ = g.s.Close(context.Background()) }

// --- github.com/ulule/limiter/v3 memory store ---

type ululeLimiter struct{ l *ulule.Limiter }

func newUlule(p keyset.Profile, keys int) (Limiter, error) {
	return ululeLimiter{ulule.New(ululemem.NewStore(), ulule.Rate{Period: p.Window, Limit: int64(p.Limit)})}, nil
}

func (u ululeLimiter) Allow(key string) bool {
	c, err := u.l.Get(context.Background(), key)
	return err == nil && !c.Reached
}

func (u ululeLimiter) AllowN(key string, n int) bool {
	c, err := u.l.Increment(context.Background(), key, int64(n))
	return err == nil && !c.Reached
}

func (u ululeLimiter) Peek(key string) bool {
	c, err := u.l.Peek(context.Background(), key)
	return err == nil && !c.Reached
}

func (u ululeLimiter) Close() {}

// --- github.com/throttled/throttled/v2 GCRA ---

type throttledLimiter struct{ g *throttled.GCRARateLimiterCtx }

func newThrottled(p keyset.Profile, keys int) (Limiter, error) {
	st, err := memstore.NewCtx(0)
	if err != nil {
		return nil, fmt.Errorf("throttled memstore: %w", err)
	}
	// Burst Limit-1 plus the request itself: Limit at once, then Limit per Window.
	g, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate: throttled.PerDuration(p.Limit, p.Window), MaxBurst: p.Limit - 1,
	})
	if err != nil {
		return nil, fmt.Errorf("throttled GCRA: %w", err)
	}
	return throttledLimiter{g}, nil
}

func (t throttledLimiter) decide(key string, n int) bool {
	limited, _, err := t.g.RateLimitCtx(context.Background(), key, n)
	return err == nil && !limited
}

func (t throttledLimiter) Allow(key string) bool         { return t.decide(key, 1) }
func (t throttledLimiter) AllowN(key string, n int) bool { return t.decide(key, n) }

// No Peek: RateLimitCtx with quantity 0 updates nothing but also never
// reports limited, so it cannot answer "would this pass".
func (t throttledLimiter) Close() {}

// --- textbook sliding log ---

// textbookLog is the sliding log found in tutorials: a map from key to the
// timestamps of its admitted requests, all behind one mutex. A request at
// t is admitted iff fewer than limit timestamps lie in [t-window, t].
type textbookLog struct {
	mu     sync.Mutex
	m      map[string][]int64
	limit  int
	window int64
	start  time.Time
}

func newTextbookLog(p keyset.Profile, keys int) (Limiter, error) {
	return &textbookLog{m: make(map[string][]int64), limit: p.Limit, window: int64(p.Window), start: time.Now()}, nil
}

func (t *textbookLog) decide(key string, n int, consume bool) bool {
	now := int64(time.Since(t.start))
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.m[key]
	i := 0
	for i < len(ts) && ts[i] < now-t.window {
		i++
	}
	ts = ts[i:]
	ok := len(ts)+n <= t.limit
	if ok && consume {
		for range n {
			ts = append(ts, now)
		}
	}
	if consume || i > 0 {
		t.m[key] = ts
	}
	return ok
}

func (t *textbookLog) Allow(key string) bool         { return t.decide(key, 1, true) }
func (t *textbookLog) AllowN(key string, n int) bool { return t.decide(key, n, true) }
func (t *textbookLog) Peek(key string) bool          { return t.decide(key, 1, false) }
func (t *textbookLog) Close()                        {}

// --- ristretto-backed sliding counter ---

// ristrettoCounter keeps one packed sliding-counter word per key in a
// ristretto cache: the "bounded store" option of the design. Ristretto's
// Set is asynchronous and its TinyLFU admission may refuse a new key, so a
// key can go untracked (decided as empty: fail open); Tracked reports how
// many of a key set survived.
type ristrettoCounter struct {
	c      *ristretto.Cache[string, *counterWord]
	limit  uint64
	window int64
	start  time.Time
}

func newRistretto(p keyset.Profile, keys int) (Limiter, error) {
	if p.Limit > 0xffff {
		return nil, fmt.Errorf("ristretto counter: Limit %d exceeds the 16-bit count field", p.Limit)
	}
	maxCost := int64(keyset.Capacity(keys))
	c, err := ristretto.NewCache(&ristretto.Config[string, *counterWord]{
		NumCounters: 10 * maxCost, // ristretto's advice: 10x the number of items
		MaxCost:     maxCost,      // every key costs 1: MaxCost is the key bound
		BufferItems: 64,
		// Without this ristretto adds its own per-item overhead to each
		// cost and MaxCost would hold a fraction of the keys.
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("ristretto: %w", err)
	}
	return &ristrettoCounter{c: c, limit: uint64(p.Limit), window: int64(p.Window), start: time.Now()}, nil
}

func (r *ristrettoCounter) word(key string) *counterWord {
	if w, ok := r.c.Get(key); ok {
		return w
	}
	w := new(counterWord)
	r.c.Set(key, w, 1)
	return w
}

func (r *ristrettoCounter) Allow(key string) bool { return r.AllowN(key, 1) }
func (r *ristrettoCounter) AllowN(key string, n int) bool {
	return r.word(key).decide(int64(time.Since(r.start)), r.window, r.limit, uint64(n), true)
}
func (r *ristrettoCounter) Peek(key string) bool {
	return r.word(key).decide(int64(time.Since(r.start)), r.window, r.limit, 1, false)
}
func (r *ristrettoCounter) Close() { r.c.Close() }

func (r *ristrettoCounter) Tracked(keys []string) int {
	r.c.Wait() // apply buffered Sets first
	n := 0
	for _, k := range keys {
		if _, ok := r.c.Get(k); ok {
			n++
		}
	}
	return n
}

// counterWord is a sliding window counter in one word:
//
//	63            32 31       16 15        0
//	+---------------+-----------+-----------+
//	| window number | prev count| cur count |
//	+---------------+-----------+-----------+
//
// The window number is now/window modulo 2^32 (a key idle for exactly a
// multiple of 2^32 windows would alias; benchmarks run for seconds);
// counts are at most 65535.
type counterWord struct{ v atomic.Uint64 }

func (c *counterWord) decide(now, window int64, limit, n uint64, consume bool) bool {
	w := uint64(now/window) & 0xffffffff
	elapsed := now % window
	for {
		old := c.v.Load()
		win, prev, cur := old>>32, old>>16&0xffff, old&0xffff
		switch {
		case win == w:
		case (win+1)&0xffffffff == w:
			prev, cur = cur, 0
		default:
			prev, cur = 0, 0
		}
		est := prev*uint64(window-elapsed)/uint64(window) + cur
		if est+n > limit {
			return false
		}
		if !consume {
			return true
		}
		// Publish the rolled window and the new count in one CAS: a
		// concurrent decider either sees the old word or this one.
		if c.v.CompareAndSwap(old, w<<32|prev<<16|(cur+n)) {
			return true
		}
	}
}
