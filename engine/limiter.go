package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/slidelimit/slidelimit/internal/offheap"
	"github.com/slidelimit/slidelimit/shard"
)

// Limiter is a per-key rate limiter (sliding window or GCRA). It is safe for
// concurrent use by any number of goroutines; see the package doc for its
// guarantees.
type Limiter struct {
	cfg    Config
	window int64 // ns
	impl   algo  // the algorithm: its tables and state (algorithm.go)
	res    int64 // SlidingLog's tick in ns (0 for the others)

	// setMu serializes SetLimit and SetBurst.
	setMu sync.Mutex
	// implMu guards l.impl against ReadFrom's swap for Len and Stats, the
	// calls a metrics collector makes from its own goroutine, perhaps
	// registered before the restore ran. Decisions do not take it: none
	// may run during ReadFrom (the package doc), and the hot path stays
	// free of locks.
	implMu sync.RWMutex

	clock Clock // user clock, or nil for the engine's own (coarse)
	// epoch is the clock reading the engine's times count from: New's
	// reading, or (ReadFrom) the reading that puts the restored keys' times
	// where the wall clock says they are (see snapshot.go). Written only by
	// New and by ReadFrom (under sweepMu, which the background sweep takes
	// before it reads the clock; no decision may run during ReadFrom).
	epoch int64
	// wall reads the wall clock as Unix ns for snapshots (nil:
	// time.Now().UnixNano()); tests set it to inject a gap.
	wall func() int64

	stats *stats

	// The wrap guard (see Time in the package doc): before deciding at a
	// time rel >= sweepDue, the Limiter sweeps at that time, so that no
	// live state is ever older than the packed time fields can tell.
	sweepDue atomic.Int64
	guard    int64 // ns between guaranteed sweeps, in clock time
	sweepMu  sync.Mutex

	// A caller's time is bounded to within lead behind and ahead in front
	// of the clock (see at): horizon is the latest reading of a
	// Config.Clock the Limiter noted, at most noteStep behind the clock.
	horizon  atomic.Int64
	lead     int64
	ahead    int64
	noteStep int64

	closeOnce sync.Once
	closed    atomic.Bool
	done      chan struct{}
	swept     sync.WaitGroup
}

// limiterBytes is the heap a Limiter takes besides its shards and tables:
// its struct, its stats stripes, the algorithm's struct and its table's
// (the largest of each kind), and limiterExtraBytes for the rest.
// Stats.Bytes includes it, and MaxMemory bounds it with the tables.
var limiterBytes = offheap.HeapBytes(int64(unsafe.Sizeof(Limiter{}))) +
	offheap.HeapBytes(int64(unsafe.Sizeof(stats{}))) +
	offheap.HeapBytes(int64(max(unsafe.Sizeof(counterAlgo{}), unsafe.Sizeof(logAlgo{}), unsafe.Sizeof(gcraAlgo{})))) +
	offheap.HeapBytes(int64(max(unsafe.Sizeof(shard.Flat{}), unsafe.Sizeof(shard.Table{})))) +
	limiterExtraBytes

// limiterExtraBytes covers the done channel (96 bytes), the sweep's ticker
// and timer, its goroutine (the runtime's g, when none is free to reuse)
// and the algorithms' small parts (GCRA's rate): New's heap growth past the
// rest measured 150 to 1,530 bytes (TestHeapWithinStatsBytesAndMaxMemory).
const limiterExtraBytes = 1536

// stats are striped so that two cores deciding rarely write the same cache
// line: see count.
//
// xsync.Counter does the same job (stripes per P); we measured it in place
// of these stripes through the engine (BenchmarkAllowParallel in ./bench,
// -cpu 1,2, -count 6 interleaved, benchtime 300ms, on the shared 2-core
// machine with other jobs running, so spreads were 11-290 %): median ns/op
// striped vs xsync, counter/distinct 137 vs 314 (p=0.03) and 130 vs 353
// (-cpu 2, p=0.07), counter/hotkey 39 vs 54 (p=0.02) and 43 vs 47,
// log/distinct 590 vs 589 and 596 vs 606, log/hotkey 36 vs 49 and 48 vs 48;
// geomean +38 % for xsync. It never won, so the stripes stay and the
// engine does not import xsync.
const statStripes = 64

type stripe struct {
	allowed atomic.Uint64
	denied  atomic.Uint64
	_       [shard.CacheLine - 16]byte
}

type stats struct {
	s        [statStripes]stripe
	inserts  atomic.Uint64
	overflow atomic.Uint64
	invalid  atomic.Uint64 // calls that can never be admitted (rare: one counter)
}

// count adds one decision. The stripe is picked by the address of the
// calling goroutine's stack, not by the key: a goroutine keeps adding to
// one line, which stays in its core's cache, and goroutines running on
// different cores add to different lines (unless two of them draw the same
// of 64), whether they decide for one hot key or for many keys. Striping
// by key hash, as before, made two cores deciding for distinct keys bounce
// every line between them: 6-7 ns per decision on one core, 27-32 ns
// (wall) on two; by stack, BenchmarkStats measures 6.0 ns on one core and
// 3.1 ns (wall) on two. A stack may move when it grows; a stripe is only a
// place to add, so that changes nothing.
func (s *stats) count(allowed bool) {
	var here byte
	sp := uint64(uintptr(unsafe.Pointer(&here))) >> 11 // goroutine stacks are 2 KiB or more apart
	st := &s.s[(sp*0x9E3779B97F4A7C15)>>(64-6)]        // top 6 bits: statStripes = 64
	if allowed {
		st.allowed.Add(1)
	} else {
		st.denied.Add(1)
	}
}

// minSweepInterval is the shortest sweep interval New sets on its own.
const minSweepInterval = time.Millisecond

// chunkBytes is the size of one slab chunk; a shard allocates its slab in
// such chunks as keys arrive.
const chunkBytes = 64 << 10

// New validates cfg and returns a Limiter. It starts one background
// goroutine (the sweep), which Close stops.
func New(cfg Config) (*Limiter, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	l := &Limiter{cfg: c, window: int64(c.Window), clock: c.Clock, stats: &stats{}, done: make(chan struct{})}
	if err := specOf(c.Algorithm).build(l); err != nil {
		return nil, err
	}
	// The background sweep must come well within the wrap guard's span, or
	// a decision past sweepDue sweeps every key inline while others wait
	// (with a SlidingCounter Window under ~2.4 µs the span, 2^22 Windows,
	// is shorter than the default interval).
	if span := time.Duration(l.guard / 4); l.cfg.SweepInterval > span {
		l.cfg.SweepInterval = max(span, minSweepInterval)
	}
	l.sweepDue.Store(l.guard)
	if l.clock == nil {
		coarseAcquire()
		l.epoch = coarseNow()
	} else {
		l.epoch = l.clock.Now()
	}
	l.swept.Add(1)
	go l.sweepLoop()
	return l, nil
}

// setBounds sets the wrap guard's span and the callers' lead (see at and
// catchUp): each algorithm's build calls it first, with what its packed
// times can tell apart.
func (l *Limiter) setBounds(guard, lead int64) {
	l.guard, l.lead = guard, lead
	// A time ahead of the clock dates its key ahead, and a key is not
	// reclaimed (nor, after a Reset, its record reused) before its newest
	// time is a Window old: one Window ahead at most keeps both within two
	// Windows of the clock (see Time in the package doc).
	l.ahead = min(l.lead, l.window)
	l.noteStep = max(1, min(l.lead/8, l.ahead))
}

// relNow is the clock's reading as ns since the epoch: the tables' Now.
func (l *Limiter) relNow() int64 { return l.rel(l.now()) }

// newFlat makes the one-level table for an algorithm whose state is one
// word (SlidingCounter, GCRA), with MaxKeys derived from MaxMemory.
func (l *Limiter) newFlat(free, moved uint64, idle func(w uint64, rel int64) (bool, int64)) (*shard.Flat, error) {
	c := l.cfg
	perKey := int64(shard.FlatBytesPerKey)
	fixed := int64(c.Shards)*shard.FlatShardBytes + limiterBytes
	if c.MaxMemory < fixed+perKey {
		return nil, invalid("Config.MaxMemory %d bytes is too small for %d shards (need at least %d)", c.MaxMemory, c.Shards, fixed+perKey)
	}
	maxKeys := (c.MaxMemory - fixed) / perKey
	if c.MaxKeys > 0 {
		maxKeys = min(maxKeys, int64(c.MaxKeys)) // a cap on the whole table, not split over shards
	}
	l.cfg.MaxKeys = int(min(maxKeys, math.MaxInt32))
	f, err := shard.NewFlat(shard.FlatConfig{Shards: c.Shards, MaxKeys: l.cfg.MaxKeys, MaxBytes: c.MaxMemory - limiterBytes,
		Free: free, Moved: moved, Idle: idle, Now: l.relNow, Rescan: max(l.window/8, 1)})
	if err != nil {
		return nil, invalid("Config.MaxMemory: %v", err)
	}
	return f, nil
}

// logKeys returns the largest key bound k <= hi whose Table (config sc with
// MaxKeys k) stays within maxMemory bytes however its keys come and go
// (shard.TableBytes), or 0 if not even one key fits. Nothing is allocated
// up front (shard.New makes a shard's struct and a 16-entry index; records
// come in chunks as keys arrive), so a huge MaxMemory costs nothing until
// keys come.
func logKeys(sc shard.Config, hi, maxMemory int64) int64 {
	fits := func(k int64) bool {
		sc.MaxKeys = int(k)
		return shard.TableBytes(sc) <= maxMemory
	}
	if fits(hi) {
		return hi
	}
	// fits(lo) holds, fits(hi) does not. TableBytes grows with k but for
	// steps of the chunk layout, so the search may settle a little below
	// the largest k that fits; every k it returns fits.
	lo := int64(0)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// resolution returns the SlidingLog tick: the smallest power of ten of
// nanoseconds, at least 1 µs, such that 2 x (Limit+1) x (Window+1 µs) is
// below 2^31 ticks. A live ring's entries are younger than 2^30 + (Limit+1)
// x (Wq+1) ticks (see "Time" in package ring), so with this tick every
// comparison of a ring's 32-bit ticks is exact.
func resolution(limit int, window time.Duration) int64 {
	span := 2 * float64(limit+1) * float64(window+time.Microsecond)
	res := int64(1000)
	for span >= float64(math.MaxInt32)*float64(res) && res < 1e15 {
		res *= 10
	}
	return res
}

// Resolution returns the tick SlidingLog records timestamps in (0 for
// SlidingCounter and GCRA, which work in nanoseconds). Requests are exact at this
// granularity: timestamps are truncated to it and Window is rounded up to
// a whole number of ticks.
func (l *Limiter) Resolution() time.Duration { return time.Duration(l.res) }

// Time is a reading of a Limiter's clock: nanoseconds from an origin of
// that clock's own (Config.Clock's, or the engine's monotonic clock's, an
// instant near the program's start). Get one from Limiter.Now; move it with
// Add. AllowAt, AllowNAt, PeekAt and AllowNWithLimitAt take a Time, not an
// int64, so that a wall-clock time (time.Now().UnixNano(), decades from
// the origin) cannot be passed by mistake; converted explicitly, it is
// ahead of the clock and counts one Window ahead (see Time in the package
// doc): its key then recovers within two Windows.
type Time int64

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Now reads the Limiter's clock: Config.Clock, or the engine's own cached
// monotonic clock (see ClockRefresh). AllowAt and friends take times from
// this same clock.
func (l *Limiter) Now() Time { return Time(l.now()) }

// now is Now as a plain int64, for the engine's own arithmetic.
func (l *Limiter) now() int64 {
	if l.clock != nil {
		n := l.clock.Now()
		// Note the reading for the bound on callers' times (see at). A
		// store only when the reading is an eighth of the lead past the
		// last one noted: the line is read by every AllowAt and written
		// rarely.
		if rel := l.rel(n); rel > satAdd(l.horizon.Load(), l.noteStep) {
			l.noteHorizon(rel)
		}
		return n
	}
	if l.closed.Load() {
		return int64(time.Since(coarse.base)) // the cached clock may have stopped
	}
	return coarseNow()
}

// noteHorizon raises horizon to rel (it never goes back).
func (l *Limiter) noteHorizon(rel int64) int64 {
	for {
		h := l.horizon.Load()
		if rel <= h || l.horizon.CompareAndSwap(h, rel) {
			return max(h, rel)
		}
	}
}

// horizonNow is the clock reading callers' times are bounded around: for
// the engine's own clock a reading of it (an atomic load of the cached
// reading, fresh within ClockRefresh), for a Config.Clock the latest
// reading the Limiter made
// (Now, which every decision without an explicit time, the sweep and at's
// slow path call), at most noteStep (ahead or less) behind it.
func (l *Limiter) horizonNow() int64 {
	if l.clock == nil {
		return l.rel(l.now())
	}
	return l.horizon.Load()
}

// at converts a caller's time (AllowAt and friends) to ns since the epoch,
// bounded to within ahead (one Window) in front of the clock and lead
// behind it (see Time in the package doc): a time further ahead counts at
// clock+ahead, one further behind at clock-lead. Within the bound (the
// common case) it costs a load of the latest clock reading seen and two
// comparisons; outside it, a clock read.
func (l *Limiter) at(now Time) int64 {
	rel := l.rel(int64(now))
	// A reading h is at most noteStep <= ahead old, so a time within
	// [h-lead, h+ahead] is within lead+noteStep behind the clock, far
	// inside the lateness bound (4 x lead) that the bound protects, and at
	// most ahead in front of it. A time read from the clock is never past
	// the clock, so it takes the fast path unless the horizon is stale.
	if h := l.horizonNow(); rel <= satAdd(h, l.ahead) && rel >= h-l.lead {
		return rel
	}
	return l.atSlow(rel)
}

func (l *Limiter) atSlow(rel int64) int64 {
	c := l.noteHorizon(l.rel(l.now()))
	return min(max(rel, c-l.lead), satAdd(c, l.ahead))
}

// rel converts a time of the Limiter's clock to ns since the epoch.
func (l *Limiter) rel(now int64) int64 {
	if now <= l.epoch {
		return 0 // before the epoch: counts as the epoch
	}
	if d := now - l.epoch; d > 0 {
		return d
	}
	return math.MaxInt64 // overflowed: a negative epoch and a time near MaxInt64
}

// satMul is a*b for a, b >= 0, saturating at MaxInt64.
func satMul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// catchUp runs the wrap guard's sweep when a decision's time is at or past
// sweepDue: if the clock is past sweepDue too, it sweeps at the clock's
// time (never at the decision's: a time ahead of the clock must not judge
// other keys idle), else it only waits for a sweep in progress. Rare: once
// per guard span of clock time, and only when the background sweep has not
// run in that span (closed, a long SweepInterval, a clock that jumps).
//
// Why it suffices: the last sweep, at S = sweepDue - guard, left only
// states written within a Window of S. Since then, every decision's time
// was below sweepDue = S + guard, or its decision waited here, or it was
// ahead of the clock (bounded to the clock + lead, see at: it dates only
// its own key, ahead of the clock by less than lead); new keys are dated
// at a clock reading below sweepDue (insertClock); and a late request never
// moves a state's time back. So every state's newest time lies in
// [S - Window, S + guard + lead) (plus lateness, at most LateMax or
// LateWindows). If the clock reads now < S + 2 x guard, every age is below
// 2 x guard + Window, and no state is ahead of now by lead or more, which
// the packed fields read unambiguously (see ring and atomiccounter), so an
// ordinary sweep at now is exact. If now is further on, every state but
// those dated ahead of the clock is more than a guard span (far more than
// a Window) older than now: idle; the sweep frees every state without
// reading its (possibly wrapped) time, while new keys wait for it
// (insertClock). Requests still in flight with a time from before the jump
// write states dated then, which it may free: they count at a time far
// behind now, where freeing them forgets nothing that counts. The price:
// a key dated ahead of the clock (by AllowAt) is forgotten too.
func (l *Limiter) catchUp(rel int64) {
	l.sweepMu.Lock()
	now := l.rel(l.now())
	if l.guardDue(now) {
		l.sweepAt(now, now-l.sweepDue.Load() >= l.guard)
	}
	l.sweepMu.Unlock()
}

// sweepAt sweeps at clock reading at and moves the guard on. Under sweepMu.
func (l *Limiter) sweepAt(at int64, total bool) int {
	n := l.impl.sweep(at, total)
	if due := at + min(l.guard, math.MaxInt64-at); due > l.sweepDue.Load() {
		l.sweepDue.Store(due)
	}
	return n
}

// Config returns the configuration with defaults filled in (MaxKeys is the
// key bound derived from MaxMemory, MaxLimit the bound on SetLimit), with
// the Limit and Burst in force now (SetLimit, SetBurst). Burst is the
// burst in force for GCRA, Limit for the others.
func (l *Limiter) Config() Config {
	c := l.cfg
	c.Limit, c.Burst = l.impl.limits()
	return c
}

// Allow reports whether one request for key is admitted now, and records it
// if so. It does not allocate for an existing key (creating one may grow
// its shard's table: see the package doc).
func (l *Limiter) Allow(key string) bool {
	rel := l.rel(l.now())
	if rel >= l.sweepDue.Load() {
		l.catchUp(rel)
	}
	return l.impl.allow(key, rel)
}

// AllowN admits n requests for key now, all or none, and returns the full
// Decision. n <= 0 or n > Limit (GCRA: n > Burst) can never be
// admitted: it is denied with RetryAfter Never, records nothing and counts
// in Stats.Invalid.
func (l *Limiter) AllowN(key string, n int) Decision {
	ok, v := l.take(key, n, 0, false, l.rel(l.now()))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// AllowNWithLimit is AllowN deciding with limit instead of Config.Limit, for
// keys whose quota differs (premium tiers, limits read from a database)
// without a Limiter per tier. It does not allocate for an existing key.
// The key's history is
// the same whatever limit a call passes: SlidingLog admits iff fewer than
// limit-n+1 recorded requests lie in the window, SlidingCounter iff the
// estimate plus n is at most limit, GCRA at a rate of limit per Window
// (Window/limit rounded up to a ns, on the real clock: SetLimit does not
// change a per-call key's count) with a bucket of limit x Burst/Limit (at
// least 1; limit with the default Burst; at most GCRA's deepest bucket,
// which Decision.Limit then reports), on the key's one arrival time. A
// GCRA key used both with and without a per-call limit keeps its debt as
// time when it switches: use one way per key. The Window is Config.Window.
//
// limit must be in [1, Config.MaxLimit] for SlidingLog (its ring holds the
// last MaxLimit requests: configure MaxLimit as the largest tier's), in
// [1, MaxCounterLimit] for SlidingCounter and [1, MaxGCRALimit] for GCRA.
// Outside that, and for n <= 0 or n > limit (GCRA: n above the call's
// bucket), the call can never be admitted: it is denied with RetryAfter
// Never, records nothing and counts in Stats.Invalid, like an n out of
// range.
func (l *Limiter) AllowNWithLimit(key string, n, limit int) Decision {
	ok, v := l.take(key, n, limit, true, l.rel(l.now()))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// AllowNWithLimitAt is AllowNWithLimit at time now of the Limiter's clock.
func (l *Limiter) AllowNWithLimitAt(key string, n, limit int, now Time) Decision {
	ok, v := l.take(key, n, limit, true, l.at(now))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// take is every AllowN variant: limit is the caller's when perCall.
func (l *Limiter) take(key string, n, limit int, perCall bool, rel int64) (bool, verdict) {
	if rel >= l.sweepDue.Load() {
		l.catchUp(rel)
	}
	return l.impl.take(key, n, limit, perCall, rel)
}

// never is the Decision of a call no wait admits (n or the call's limit
// out of range): not a rate-limit denial, counted apart, and said so with
// RetryAfter Never (0 would invite a retry loop).
func (l *Limiter) never(limit int) (bool, verdict) {
	l.stats.invalid.Add(1)
	return false, verdict{limit: limit, retry: Never}
}

// AllowAt is AllowN(key, 1) at time now of the Limiter's clock (see Now).
// A gateway can read the clock once per request; tests need no fake clock.
// A time behind the key's newest counts at the newest (see Time in the
// package doc, which also says what a time ahead of the clock does).
func (l *Limiter) AllowAt(key string, now Time) Decision {
	ok, v := l.take(key, 1, 0, false, l.at(now))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// AllowNAt is AllowN at time now of the Limiter's clock.
func (l *Limiter) AllowNAt(key string, n int, now Time) Decision {
	ok, v := l.take(key, n, 0, false, l.at(now))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// Peek reports what AllowN(key, 1) would decide now, consuming nothing.
// Remaining counts the requests admissible now (not minus a hypothetical
// one).
func (l *Limiter) Peek(key string) Decision {
	ok, v := l.impl.peek(key, l.rel(l.now()))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// PeekAt is Peek at time now of the Limiter's clock.
func (l *Limiter) PeekAt(key string, now Time) Decision {
	ok, v := l.impl.peek(key, l.at(now))
	return Decision{Allowed: ok, Limit: v.limit, Remaining: v.remaining, RetryAfter: v.retry, ResetAfter: v.reset}
}

// satAdd is a+b for a, b >= 0, saturating at MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// insertClock reads the clock for an insert, under the shard's lock, and
// says whether the wrap guard's sweep is due at that reading. If it is, the
// caller must not create the key yet: it unlocks, runs the sweep (or waits
// for the one in progress, which may be a total sweep that frees every key
// without reading its time) and looks again. So no key is created dated at
// or past sweepDue before the sweep has run, which is what lets a total
// sweep free every key it finds (see catchUp).
func (l *Limiter) insertClock() (clk int64, due bool) {
	clk = l.rel(l.now())
	return clk, l.guardDue(clk)
}

// guardDue reports whether the wrap guard's sweep is due at clock reading
// now. A sweepDue of MaxInt64 (a clock 2^63 ns from the epoch saturated
// it) is never due: no clock can pass it, and a sweep at it changes
// nothing.
func (l *Limiter) guardDue(now int64) bool {
	due := l.sweepDue.Load()
	return now >= due && due != math.MaxInt64
}

// overflow decides a new key that cannot be tracked (Config.Overflow).
func (l *Limiter) overflow(h uint64, n, limit int) (bool, verdict) {
	l.stats.overflow.Add(1)
	allowed := l.cfg.Overflow == OverflowAllow
	l.stats.count(allowed)
	if allowed {
		return true, verdict{limit: limit, remaining: limit - n}
	}
	return false, verdict{limit: limit, retry: time.Duration(l.window)}
}

// Reset forgets key's state: its next request starts on an empty window.
//
// SlidingCounter empties the key's word in place, dated at the key's newest
// window if that is ahead of the clock's; the emptied key is idle (the
// sweep or lazy reuse may free it) from the window after that on, not in
// it, where a new key's words could repeat the ones it had. SlidingLog
// cannot empty a ring in place without breaking the ring's only-raise rule
// that keeps late writers harmless, so it frees the key's record; the
// record is reused (for any key) only once the old state would have
// emptied by itself, one Window after the key's newest time (rounded up to
// a seventh of two Windows), and until then it counts against the key
// bound. A key's newest time is at most one Window ahead of the clock, so
// either is free for reuse at most about two Windows after the Reset.
// GCRA forgets the key's debt in place: its bucket is full from the Reset
// on (Burst at once, then one per Window/Limit, like a new key). So that
// a request paused before its CAS cannot write into a later key's state,
// a Reset key is idle only a bound after its TAT: one Window plus the
// deepest bucket any rule has had (two in Penalty mode): two Windows with
// the defaults.
// SlidingCounter and GCRA remember the last three keys Reset in each shard,
// and a new key that finds the bound reached takes their slots as soon as
// they are idle, wherever lazy reuse's sample is; a shard with more Resets
// pending leaves the older ones to lazy reuse and the sweep (then up to
// the later of two Windows and SweepInterval).
// A Reset racing with requests for the same key may keep the effect of
// requests that were in flight (it never admits more than the limit).
func (l *Limiter) Reset(key string) { l.impl.reset(key, l.rel(l.now())) }

// Len returns the number of keys tracked now.
func (l *Limiter) Len() int {
	l.implMu.RLock()
	n := l.impl.keys()
	l.implMu.RUnlock()
	return n
}

// Stats returns a snapshot of the Limiter's counters.
func (l *Limiter) Stats() Stats {
	l.implMu.RLock()
	impl := l.impl
	st := Stats{Keys: impl.keys(), MaxKeys: l.cfg.MaxKeys,
		Inserts: l.stats.inserts.Load(), Overflow: l.stats.overflow.Load(), Invalid: l.stats.invalid.Load(),
		Reclaimed: impl.reclaimed(), Bytes: impl.bytes() + limiterBytes}
	l.implMu.RUnlock()
	for i := range l.stats.s {
		st.Allowed += l.stats.s[i].allowed.Load()
		st.Denied += l.stats.s[i].denied.Load()
	}
	return st
}

// Close stops the background sweep. The Limiter keeps deciding after Close
// (idle keys are then reclaimed only lazily, when a shard is full). It is
// safe to call more than once.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
		l.swept.Wait()
		if l.clock == nil {
			coarseRelease()
		}
	})
	return nil
}

func (l *Limiter) sweepLoop() {
	defer l.swept.Done()
	t := time.NewTicker(l.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			l.Sweep()
		}
	}
}

// Sweep reclaims every idle key now (the background sweep calls it every
// SweepInterval). It returns the number of keys reclaimed. Each key is
// judged idle or not with a clock reading taken after its state was read
// (package shard), so a sweep that takes longer than a window never frees
// a key that became active while it ran.
func (l *Limiter) Sweep() int {
	l.sweepMu.Lock()
	defer l.sweepMu.Unlock()
	rel := l.rel(l.now())
	if due := l.sweepDue.Load(); rel >= due {
		return l.sweepAt(rel, rel-due >= l.guard) // as catchUp would
	}
	return l.sweepAt(rel, false)
}
