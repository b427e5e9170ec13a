package engine

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/atomiccounter"
	"github.com/slidelimit/slidelimit/gcra"
	"github.com/slidelimit/slidelimit/shard"
)

// gcraAlgo is GCRA: one theoretical arrival time per key (package gcra) in
// the one-level table (shard.Flat).
//
// # The virtual clock, which keeps counts across SetLimit
//
// A key's TAT is a time, and a debt of d ns means d/Token requests. So that
// SetLimit keeps every key's debt in requests (not in ns, which a new
// Token would turn into another count), GCRA runs on a virtual clock u:
// u advances at limit/MaxLimit of the real clock's speed, and a request
// always costs Token = ceil(Window/MaxLimit) ns of u. At limit = MaxLimit
// (the default: MaxLimit = Limit, never changed) u is the real clock
// plus an offset, one addition; below it, u(t) = u0 + floor((t-t1) x
// limit/MaxLimit x (S-1)/S) (a 128-bit multiply and divide; the slowing
// by 1/S pays for reading u rounded down, see gcraSpeed). SetLimit starts
// a new piece at its clock reading c with u0 = u(c) under the old rate,
// held for one ns of u at the new speed (to t1), so u never goes back,
// and a key's debt in requests (TAT - u) / Token is the same just before
// and just after the change.
//
// The rate is never exceeded, and is short of Window/limit real ns per
// request by less than 1/Token (rounding Token up) plus, below MaxLimit,
// 1/S: under 1 % in all (New wants Token >= gcraMinToken).
//
// Per-call limits (AllowNWithLimit) run on the real clock instead, whose
// speed no SetLimit changes; a word says which clock it is on (package
// gcra), and a key used both ways is converted (gcraAlgo.convert).
//
// # Reclamation across a change
//
// The table frees a key when its TAT <= u(a clock reading), and dates a
// new key in that record after a later clock reading (see package gcra:
// then no word repeats). Both readings are turned into u under the
// shard's lock, with the rate loaded under it, and SetLimit publishes a
// new rate while holding every shard's lock, at a clock reading taken
// under them all: so a free and a later insert in one shard either use
// one rate, or the free used the old rate at a reading before c and the
// insert the new one after c, and u is monotone across c. The new key's
// first TAT is above every word the old key had.
type gcraAlgo struct {
	l       *Limiter
	stats   *stats // l.stats, one load nearer the hot path
	flat    *shard.Flat
	rate    atomic.Pointer[gcraRate]
	penalty bool
	token   int64 // ns of u per request: ceil(Window/MaxLimit)
	max     int64 // MaxLimit
	// deepest is the deepest bucket any rule has had (ns of its clock),
	// raised before a decision under a deeper rule writes: with the
	// callers' lead it bounds how far ahead of the clock a key's TAT can
	// be, which a Reset key waits out before its record is freed (see
	// bound).
	deepest atomic.Int64
}

// bound is how long after its time a word of a key that was Reset is idle
// (package gcra, "Why a stale CAS never succeeds"): a TAT is at most a
// caller's lead (ahead: one Window) past the clock plus a bucket (two in
// Penalty mode) past its request's time, and the Reset's mark is dated at
// a clock reading; 2 ns cover the rounding of a word moved between the
// clocks. Read under the shard's lock, after the word.
func (a *gcraAlgo) bound() int64 {
	d := a.deepest.Load()
	if a.penalty {
		d *= 2
	}
	return satAdd(a.l.ahead, d+2)
}

// deepen raises deepest to depth, before a decision under it.
func (a *gcraAlgo) deepen(depth int64) {
	for {
		d := a.deepest.Load()
		if depth <= d || a.deepest.CompareAndSwap(d, depth) {
			return
		}
	}
}

// gcraRate is the limit and burst in force, and the virtual clock's piece
// from t0 on. Immutable: SetLimit and SetBurst publish a new one.
type gcraRate struct {
	limit, burst int
	follows      bool      // the burst follows the limit (Config.Burst 0, no SetBurst)
	full         bool      // limit == MaxLimit: u(t) = t + off from t1 on
	off          int64     // u0 - t1
	t0, t1, u0   int64     // u(t) = u0 on [t0, t1], then advances at num/den per ns
	num, den     int64     // the speed of u (1/1 when full)
	rule         gcra.Rule // Token, burst x Token
}

// gcraMaxDepth is the deepest bucket (burst x Token), in ns of u.
const gcraMaxDepth = gcra.MaxDepth

// gcraMaxTime bounds the times GCRA computes with (package gcra): about
// 18 years of the limiter's clock (2^59 ns). A key whose TAT would pass
// it is denied with RetryAfter Never (see gcraAlgo.describe).
const gcraMaxTime = gcra.MaxTime / 2

// gcraMinToken is the fewest ns of u a request may cost: Window/MaxLimit
// must be at least this many ns. Token is Window/MaxLimit rounded up, and
// below MaxLimit the clock runs slower by 1/min(Token, 2^20) (see
// gcraSpeed): each costs less than 1/200 of the rate, so together under
// 1 % (New rejects finer configurations, naming MaxLimit).
const gcraMinToken = 200

// gcraToken is the cost of a request in ns of u: Window/MaxLimit rounded up.
func gcraToken(window time.Duration, maxLimit int) int64 {
	return (int64(window) + int64(maxLimit) - 1) / int64(maxLimit)
}

// gcraSpeed is the speed of u at limit < MaxLimit, num/den per real ns:
// limit/MaxLimit x (S-1)/S with S = min(Token, 2^20).
//
// Why slower than limit/MaxLimit: u is read rounded down to a whole ns of
// u, so a request's time can read up to one ns of u early, and a bucket
// refilled up to one ns of u too soon would admit more than the rate
// (Burst 1 at 1 per second with MaxLimit 1e6: a request just before a
// tick of u and one just after it, 1 ns apart). Slowing u by 1/S makes
// every span of real time read at most the u its exact length is worth:
// k requests' worth of u (k x Token >= S ns of u) needs k x Token - 1 ns
// of exact u, which at (S-1)/S of the speed takes at least the real time
// k requests are worth at the limit. The one ns of u a piece can owe when
// the next begins is paid by a pause of one ns of u at its start (see
// gcraAlgo.publish). At MaxLimit (full) u is the real clock plus a whole
// offset: nothing is rounded and nothing is slowed.
func gcraSpeed(limit, maxLimit int, token int64) (num, den int64) {
	s := min(token, 1<<20)
	return int64(limit) * (s - 1), int64(maxLimit) * s // <= 2^50 each
}

func buildGCRA(l *Limiter) error {
	c := l.cfg
	tok := gcraToken(c.Window, c.MaxLimit)
	if int64(c.Window) < gcraMinToken*int64(c.MaxLimit) {
		return invalid("Config.MaxLimit %d is too fine for Window %v: GCRA counts a request as Window/MaxLimit ns of its clock, which must be at least %d ns so that rounding costs under 1 %% of the rate (MaxLimit at most %d, or a longer Window)",
			c.MaxLimit, c.Window, gcraMinToken, int64(c.Window)/gcraMinToken)
	}
	a := &gcraAlgo{l: l, stats: l.stats, penalty: c.Penalty, token: tok, max: int64(c.MaxLimit)}
	burst, follows := c.Burst, c.Burst == 0
	if follows {
		burst = c.Limit
	}
	a.rate.Store(a.newRate(c.Limit, burst, follows, 0, 0, 0))
	a.deepen(a.rate.Load().rule.Depth)
	// GCRA's times are 60-bit ns and never wrap (past gcraMaxTime, 18
	// years, they stop: see describe): no guard sweep is needed. Callers'
	// times get the counter's lead.
	l.setBounds(math.MaxInt64, satMul(atomiccounter.LateWindows/4, l.window))
	f, err := l.newFlat(gcra.Free, gcra.Moved, a.idle)
	if err != nil {
		return err
	}
	a.flat = f
	l.impl = a
	return nil
}

// newRate is the rate of limit and burst whose clock piece reads u0 from
// real time t0 to t1 and then advances.
func (a *gcraAlgo) newRate(limit, burst int, follows bool, t0, t1, u0 int64) *gcraRate {
	r := &gcraRate{limit: limit, burst: burst, follows: follows, full: int64(limit) == a.max,
		off: u0 - t1, t0: t0, t1: t1, u0: u0, num: 1, den: 1,
		rule: gcra.Rule{Token: a.token, Depth: int64(burst) * a.token}}
	if !r.full {
		r.num, r.den = gcraSpeed(limit, int(a.max), a.token)
	}
	return r
}

// u is the virtual clock at real time t (ns since the epoch), rounded down.
func (r *gcraRate) u(t int64) int64 {
	t = min(t, gcraMaxTime)
	if t >= r.t1 {
		if r.full {
			return min(gcraMaxTime, t+r.off)
		}
		return min(gcraMaxTime, r.u0+gcra.MulDiv(t-r.t1, r.num, r.den, false))
	}
	if t >= r.t0 {
		return r.u0 // the pause at the piece's start
	}
	// A time before the piece (a caller's time behind the change): the
	// piece's speed extended back from t0, rounded down.
	if r.full {
		return max(0, r.u0-(r.t0-t))
	}
	return max(0, r.u0-gcra.MulDiv(r.t0-t, r.num, r.den, true))
}

// real is the earliest real time at which the virtual clock reads u or
// more (saturating): the exact inverse of u.
func (r *gcraRate) real(u int64) int64 {
	switch {
	case u > r.u0 && r.full:
		return satAdd(r.t1, u-r.u0)
	case u > r.u0:
		return satAdd(r.t1, gcra.MulDiv(u-r.u0, r.den, r.num, true))
	case u == r.u0:
		return r.t0
	case r.full:
		return r.t0 - (r.u0 - u)
	default:
		return r.t0 - gcra.MulDiv(r.u0-u, r.den, r.num, false)
	}
}

// gcraCall is the rule a decision is made under and the clock it runs on:
// the limit in force on the virtual clock u, a per-call limit on the real
// clock (alt), so that a per-call limit's count never depends on the limit
// in force (u's speed does: a debt in ns of u would count as another
// number of requests after SetLimit).
type gcraCall struct {
	rule  gcra.Rule
	burst int  // the bucket in requests: rule.Depth / rule.Token
	alt   bool // on the real clock
}

// callRule is the rule of a call with its own limit (AllowNWithLimit): a
// rate of limit per Window on the real clock, Window/limit rounded up to a
// ns per request, and a bucket of limit x burst/current requests (at
// least 1; limit with the default Burst), as deep as GCRA allows.
func (a *gcraAlgo) callRule(r *gcraRate, limit int) gcraCall {
	tok := max(1, (int64(a.l.window)+int64(limit)-1)/int64(limit))
	burst := max(1, gcra.MulDiv(int64(limit), int64(r.burst), int64(r.limit), false))
	burst = min(burst, gcraMaxDepth/tok) // tok <= Window <= MaxWindow: at least 1
	return gcraCall{rule: gcra.Rule{Token: tok, Depth: burst * tok}, burst: int(burst), alt: true}
}

// at is the time a request at real time t counts at on the call's clock.
func (c *gcraCall) at(r *gcraRate, t int64) int64 {
	if c.alt {
		return min(max(t, 0), gcraMaxTime)
	}
	return r.u(t)
}

// realOf is the real time at which the call's clock reads x.
func (c *gcraCall) realOf(r *gcraRate, x int64) int64 {
	if c.alt {
		return x
	}
	return r.real(x)
}

// allow is counterAlgo.allow for GCRA (and allowHash the same body).
func (a *gcraAlgo) allow(key string, rel int64) bool {
	h := a.flat.Hash(key)
	r := a.rate.Load()
	c := gcraCall{rule: r.rule, burst: r.burst}
	s, rec := a.flat.Lookup(h)
	if rec != nil {
		st, _ := gcra.Take(&rec.State, &rec.Hash, h, r.u(rel), 1, r.rule, a.penalty, false)
		if st == gcra.Allowed || st == gcra.Denied {
			ok := st == gcra.Allowed
			a.stats.count(ok)
			return ok
		}
	} else if ok, _, done := a.insert(s, h, 1, &c, rel, false); done {
		return ok // a miss goes straight to the insert (see counterAlgo.allow)
	}
	ok, _ := a.decide(h, 1, r, c, rel, false)
	return ok
}

func (a *gcraAlgo) allowHash(h uint64, rel int64) bool {
	r := a.rate.Load()
	c := gcraCall{rule: r.rule, burst: r.burst}
	s, rec := a.flat.Lookup(h)
	if rec != nil {
		st, _ := gcra.Take(&rec.State, &rec.Hash, h, r.u(rel), 1, r.rule, a.penalty, false)
		if st == gcra.Allowed || st == gcra.Denied {
			ok := st == gcra.Allowed
			a.stats.count(ok)
			return ok
		}
	} else if ok, _, done := a.insert(s, h, 1, &c, rel, false); done {
		return ok // a miss goes straight to the insert (see counterAlgo.allow)
	}
	ok, _ := a.decide(h, 1, r, c, rel, false)
	return ok
}

func (a *gcraAlgo) allowMany(dst []bool, keys []string, rel int64) []bool {
	var hs [manyGroup]uint64
	for len(keys) > 0 {
		g := keys[:min(len(keys), manyGroup)]
		keys = keys[len(g):]
		a.l.guardCheck(rel)
		for i, k := range g {
			hs[i] = a.flat.Hash(k)
			a.flat.Touch(hs[i])
		}
		for i := range g {
			dst = append(dst, a.allowHash(hs[i], rel))
		}
	}
	return dst
}

func (a *gcraAlgo) take(key string, n, limit int, perCall bool, rel int64) (bool, verdict) {
	r := a.rate.Load()
	c := gcraCall{rule: r.rule, burst: r.burst}
	if perCall {
		if limit <= 0 || limit > MaxGCRALimit {
			return a.l.never(limit)
		}
		c = a.callRule(r, limit)
		if c.rule.Depth > a.deepest.Load() {
			a.deepen(c.rule.Depth)
		}
	}
	if n <= 0 || n > c.burst {
		return a.l.never(c.burst)
	}
	return a.decide(a.flat.Hash(key), n, r, c, rel, true)
}

// decide is take for a valid n under call c, and the key's hash h.
// The verdict's limit (Decision.Limit) is the bucket: the most requests
// one call can have admitted.
func (a *gcraAlgo) decide(h uint64, n int, r *gcraRate, c gcraCall, rel int64, detail bool) (bool, verdict) {
	now := c.at(r, rel)
	for {
		s, rec := a.flat.Lookup(h)
		if rec != nil {
			st, snap := gcra.Take(&rec.State, &rec.Hash, h, now, int64(n), c.rule, a.penalty, c.alt)
			switch st {
			case gcra.Allowed, gcra.Denied:
				ok := st == gcra.Allowed
				a.stats.count(ok)
				v := verdict{limit: c.burst}
				if detail {
					a.describe(&v, ok, snap, n, &c, r, rel)
				}
				return ok, v
			case gcra.Other:
				a.convert(s, rec, h, c.alt)
				continue
			}
		}
		// Not found, or freed or moved under us: the slow path.
		if ok, v, done := a.insert(s, h, n, &c, rel, detail); done {
			return ok, v
		}
	}
}

// convert moves the key's word to the clock of alt (a key used both with
// and without a per-call limit), under the shard's lock with the rate
// loaded under it, like the table's idle test (see "Reclamation across a
// change"). The key's TAT keeps its real time, rounded so that the word
// is idle no earlier than before (gcra.Convert): from u to real, the first
// real time u reaches it; from real to u, one tick past u of the ns before
// it (u advances at most one tick per ns). The debt in requests is the
// new rule's: each limit counts in its own rate. So a key used both ways
// keeps its debt as time across a switch, and in requests of the limit in
// force across a SetLimit while on u: a SetLimit between two switches
// can shorten or lengthen its debt in time (keys should use one way).
func (a *gcraAlgo) convert(s *shard.FlatShard, rec *shard.Record, h uint64, alt bool) {
	s.Lock()
	defer s.Unlock()
	r := a.rate.Load()
	w := rec.State.Load()
	if !gcra.Live(w) || rec.Hash.Load() != h || gcra.Alt(w) == alt {
		return // freed, moved or converted meanwhile: the caller looks again
	}
	rec.State.CompareAndSwap(w, r.convert(w, a.bound()))
}

// convert is word w moved to the other clock (see gcraAlgo.convert); b is
// the Reset bound (gcraAlgo.bound) now. A Reset key's word moved from u to
// real time is dated b before the real time at which u passes its time
// plus b, so that, like the word it replaces, it is idle only once every
// word its key had before the Reset is (u may run slower than real time:
// b ns of real time can be less than b of u).
func (r *gcraRate) convert(w uint64, b int64) uint64 {
	if gcra.Alt(w) {
		return gcra.Convert(w, func(t int64) int64 {
			if t <= 0 {
				return 0
			}
			return r.u(t-1) + 1
		})
	}
	if gcra.WasReset(w) {
		return gcra.Convert(w, func(t int64) int64 { return min(max(0, r.real(t+b)-b), gcraMaxTime) })
	}
	return gcra.Convert(w, func(t int64) int64 { return min(r.real(t), gcraMaxTime) })
}

// describe fills the figures of v from a decision's snapshot (allowed says
// whether it admitted): RetryAfter
// is exact (the first real time at which the clock reaches the time n more
// are admitted, with no other traffic), ResetAfter is until the bucket is
// full again. A key whose times reached GCRA's end of time (gcraMaxTime,
// 18 years after the epoch) is denied with RetryAfter Never, never 0.
func (a *gcraAlgo) describe(v *verdict, allowed bool, snap gcra.Snapshot, n int, c *gcraCall, r *gcraRate, rel int64) {
	rem, retryAt, fullAt := gcra.Describe(snap, int64(n), c.rule)
	v.remaining = int(rem)
	v.reset = time.Duration(max(0, c.realOf(r, fullAt)-rel))
	if !allowed {
		v.retry = time.Duration(c.realOf(r, retryAt) - rel)
		if v.retry <= 0 || retryAt >= gcraMaxTime {
			v.retry = Never
		}
	}
}

// insert creates the key's state under the shard lock, unless it exists
// (then done is false and the caller retries the lock-free path). n fits
// the bucket, so the first n requests of a new key are admitted. Without
// detail the verdict holds only the limit (Allow's case).
func (a *gcraAlgo) insert(s *shard.FlatShard, h uint64, n int, c *gcraCall, rel int64, detail bool) (allowed bool, v verdict, done bool) {
	t := a.flat
	s.Lock()
	if t.Find(s, h) != nil {
		s.Unlock()
		return false, verdict{}, false
	}
	clk, due := a.l.insertClock()
	if due {
		s.Unlock()
		a.l.catchUp(clk) // see insertClock
		return false, verdict{}, false
	}
	rec, readyAt, ok := t.Claim(s, h, clk)
	if !ok {
		s.Unlock()
		allowed, v = a.l.overflow(h, n, c.burst)
		return allowed, v, true
	}
	// The rate is loaded under the lock (see "Reclamation across a
	// change"), and the key dated no earlier than its record's previous
	// owner was freed nor than the clock (see logAlgo.insert).
	r := a.rate.Load()
	at := c.at(r, max(rel, readyAt, clk))
	t.Publish(s, rec, h, gcra.First(at, int64(n), c.rule, c.alt))
	s.Unlock()
	a.l.stats.inserts.Add(1)
	a.l.stats.count(true)
	v = verdict{limit: c.burst}
	if detail {
		a.describe(&v, true, gcra.Snapshot{At: at, Base: at, After: at + int64(n)*c.rule.Token}, n, c, r, rel)
	}
	return true, v, true
}

// idle is the table's idle test (see package shard): the bucket is full
// at rel, on the word's clock. Under the shard's lock: the rate is loaded
// here.
func (a *gcraAlgo) idle(w uint64, rel int64) (bool, int64) {
	r := a.rate.Load()
	b := a.bound()
	if gcra.Idle(w, r.u(rel), min(rel, gcraMaxTime), b) {
		return true, rel
	}
	t := gcra.ReadyAt(w, b)
	if gcra.Alt(w) {
		return false, max(rel, t)
	}
	return false, max(rel, r.real(t))
}

func (a *gcraAlgo) peek(key string, rel int64) (bool, verdict) {
	h := a.flat.Hash(key)
	r := a.rate.Load()
	c := gcraCall{rule: r.rule, burst: r.burst}
	u := r.u(rel)
	for {
		s, rec := a.flat.Lookup(h)
		if rec == nil {
			s.Lock()
			found := a.flat.Find(s, h) != nil
			s.Unlock()
			if found {
				continue
			}
			return true, verdict{limit: r.burst, remaining: r.burst}
		}
		w := rec.State.Load()
		if !gcra.Live(w) || rec.Hash.Load() != h {
			s.Lock() // a sweep or a rebuild is removing or moving the record: wait for it
			s.Unlock()
			continue
		}
		if gcra.Alt(w) {
			// On the real clock (per-call limits): judged as AllowN would
			// judge it, on u after the same conversion.
			w = r.convert(w, a.bound())
		}
		st, snap := gcra.Peek(w, u, r.rule)
		ok := st == gcra.Allowed
		v := verdict{limit: r.burst}
		a.describe(&v, ok, snap, 1, &c, r, rel)
		return ok, v
	}
}

// reset forgets the key's debt: a mark at the clock reading rel (on the
// word's clock), from which the key's bucket is full. The mark and the
// key's later words are idle only bound after their time, so the record
// is freed no earlier than before the Reset (package gcra, "Why a stale
// CAS never succeeds"). A key never Reset that owes nothing at rel is left
// as it is (a full bucket already; no wait added to its reclamation).
func (a *gcraAlgo) reset(key string, rel int64) {
	h := a.flat.Hash(key)
	resetFlat(a.flat, h, func(w uint64) (uint64, bool) {
		if !gcra.Live(w) {
			return 0, false
		}
		// The clock and the rate are read after w: every request whose
		// write w holds read both before, so the mark is at or after its
		// clock reading on its rate's clock (the bound counts from there).
		rel := max(rel, a.l.relNow())
		now := a.rate.Load().u(rel)
		if gcra.Alt(w) {
			now = min(max(rel, 0), gcraMaxTime)
		}
		if t, mark := gcra.Unpack(w); !gcra.WasReset(w) && !mark && t <= now {
			return w, true
		}
		return gcra.Emptied(w, now), true
	})
}

func (a *gcraAlgo) sweep(at int64, total bool) int { return a.flat.Sweep(at, total) }
func (a *gcraAlgo) keys() int                      { return flatLen(a.flat) }
func (a *gcraAlgo) bytes() int64                   { return a.flat.Bytes() }
func (a *gcraAlgo) reclaimed() uint64              { return a.flat.Reclaimed() }

func (a *gcraAlgo) limits() (int, int) {
	r := a.rate.Load()
	return r.limit, r.burst
}

// setLimit starts a new piece of the virtual clock at a clock reading
// taken while every shard's lock is held (see "Reclamation across a
// change"). Under the Limiter's setMu.
func (a *gcraAlgo) setLimit(limit int) error {
	return a.publish(func(old *gcraRate) (int, int, bool, error) {
		burst := old.burst
		if old.follows {
			burst = limit
		}
		return limit, burst, old.follows, nil
	})
}

func (a *gcraAlgo) setBurst(burst int) error {
	if burst < 1 || burst > MaxGCRALimit {
		return fmt.Errorf("engine: SetBurst(%d): burst must be in [1, %d]: %w", burst, MaxGCRALimit, ErrInvalidLimit)
	}
	if d := satMul(int64(burst), a.token); d > gcraMaxDepth {
		// The product saturates at 292 years (MaxInt64 ns): say the
		// real size, in hours computed in float, rather than that.
		size := time.Duration(d).String()
		if d == math.MaxInt64 {
			size = fmt.Sprintf("%.4gh", float64(burst)*float64(a.token)/float64(time.Hour))
		}
		return fmt.Errorf("engine: SetBurst(%d): a bucket of %s exceeds GCRA's maximum %v: %w", burst, size, time.Duration(gcraMaxDepth), ErrInvalidLimit)
	}
	return a.publish(func(old *gcraRate) (int, int, bool, error) { return old.limit, burst, false, nil })
}

// publish replaces the rate under every shard's lock.
func (a *gcraAlgo) publish(next func(old *gcraRate) (limit, burst int, follows bool, err error)) error {
	for i := 0; i < a.flat.Shards(); i++ {
		a.flat.ShardAt(i).Lock()
	}
	defer func() {
		for i := 0; i < a.flat.Shards(); i++ {
			a.flat.ShardAt(i).Unlock()
		}
	}()
	old := a.rate.Load()
	limit, burst, follows, err := next(old)
	if err != nil {
		return err
	}
	if limit == old.limit {
		// The same clock: only the bucket changes.
		r := a.newRate(limit, burst, follows, old.t0, old.t1, old.u0)
		a.deepen(r.rule.Depth)
		a.rate.Store(r)
		return nil
	}
	// The new piece starts at u(c) under the old rate (so u never goes
	// back and debts in requests carry over) and pauses there for one ns
	// of u at the new speed: the old piece's reading was rounded down by
	// up to one ns of u, which the pause takes back (see gcraSpeed).
	c := a.l.relNow()
	r := a.newRate(limit, burst, follows, c, c, old.u(c))
	r.t1 = satAdd(c, gcra.MulDiv(1, r.den, r.num, true))
	r.off = r.u0 - r.t1
	a.deepen(r.rule.Depth)
	a.rate.Store(r)
	return nil
}
