package engine

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/internal/fastdiv"
	"github.com/slidelimit/slidelimit/ring"
	"github.com/slidelimit/slidelimit/shard"
)

// logAlgo is SlidingLog: a ring of the last MaxLimit ticks per key
// (package ring) in the two-level table (shard.Table: index, then record
// and ring).
type logAlgo struct {
	l     *Limiter
	stats *stats // l.stats, one load nearer the hot path
	table *shard.Table
	ring  ring.Ring       // MaxLimit slots: the most SetLimit may set
	ticks fastdiv.Divider // ns -> ticks
	res   int64           // ns per tick
	wq    uint32          // window in ticks
	// limit is the limit in force (SetLimit), at most the ring's size: a
	// decision loads it once and admits iff fewer than limit-n+1 of the
	// ring's entries lie in the window.
	limit atomic.Int64
}

func buildLog(l *Limiter) error {
	c := l.cfg
	size := c.MaxLimit // the ring holds the last MaxLimit requests
	a := &logAlgo{l: l, stats: l.stats, res: resolution(size, c.Window)}
	a.limit.Store(int64(c.Limit))
	a.ticks = fastdiv.New(uint64(a.res))
	a.wq = uint32((int64(c.Window) + a.res - 1) / a.res)
	a.ring = ring.New(size, a.wq, c.Penalty)
	l.res = a.res
	// See catchUp: 2 x 2^30 + Wq + 1 < 2^32 - ring.LateMax (Wq < 2^29).
	l.setBounds(satMul(1<<30, a.res), satMul(ring.LateMax/4, a.res))
	sc := shard.Config{Shards: c.Shards, SlotsPer: size, Free: ring.Dead, ChunkBytes: chunkBytes,
		Idle: a.idle, Now: l.relNow, Transient: ring.Resetting, Rescan: max(l.window/8, 1),
		// Forget defers a record to its key's newest time (at most ahead
		// past the clock) plus Wq+1 ticks, plus a tick of rounding.
		DeferSpan: satAdd(l.ahead, satMul(int64(a.wq)+2, a.res))}
	hi := int64(c.Shards) * shard.MaxRecordsPerShard
	if c.MaxKeys > 0 {
		hi = min(hi, int64(c.MaxKeys)) // a cap on the whole table, not split over shards
	}
	maxKeys := logKeys(sc, hi, c.MaxMemory-limiterBytes)
	if maxKeys < 1 {
		sc.MaxKeys = 1
		return invalid("Config.MaxMemory %d bytes is too small for %d shards of %d-byte keys (need at least %d)",
			c.MaxMemory, c.Shards, shard.RecordRingBytes(size), shard.TableBytes(sc)+limiterBytes)
	}
	l.cfg.MaxKeys = int(maxKeys)
	sc.MaxKeys = int(maxKeys)
	a.table = shard.New(sc)
	l.impl = a
	return nil
}

func (a *logAlgo) tick(rel int64) uint32 { return uint32(a.ticks.Div(uint64(rel))) }

// delay converts a delay in ticks, counted from the tick of rel, to ns from rel.
func (a *logAlgo) delay(ticks uint32, rel int64) time.Duration {
	if ticks == 0 {
		return 0
	}
	return time.Duration(int64(ticks)*a.res - rel%a.res)
}

// allow is counterAlgo.allow for SlidingLog (and allowHash the same body).
func (a *logAlgo) allow(key string, rel int64) bool {
	h := a.table.Hash(key)
	limit := a.limit.Load()
	s, rec, slots := a.table.Lookup(h)
	if rec != nil {
		st, _ := a.ring.TakeLimit(&rec.State, &rec.Hash, h, slots, a.tick(rel), 1, uint32(limit), false)
		if st == ring.Allowed || st == ring.Denied {
			ok := st == ring.Allowed
			a.stats.count(ok)
			return ok
		}
	} else if ok, _, done := a.insert(s, h, 1, int(limit), rel); done {
		return ok // a miss goes straight to the insert (see counterAlgo.allow)
	}
	ok, _ := a.decide(h, 1, int(limit), rel, false)
	return ok
}

func (a *logAlgo) allowHash(h uint64, rel int64) bool {
	limit := a.limit.Load()
	s, rec, slots := a.table.Lookup(h)
	if rec != nil {
		st, _ := a.ring.TakeLimit(&rec.State, &rec.Hash, h, slots, a.tick(rel), 1, uint32(limit), false)
		if st == ring.Allowed || st == ring.Denied {
			ok := st == ring.Allowed
			a.stats.count(ok)
			return ok
		}
	} else if ok, _, done := a.insert(s, h, 1, int(limit), rel); done {
		return ok // a miss goes straight to the insert (see counterAlgo.allow)
	}
	ok, _ := a.decide(h, 1, int(limit), rel, false)
	return ok
}

func (a *logAlgo) allowMany(dst []bool, keys []string, rel int64) []bool {
	var hs [manyGroup]uint64
	for len(keys) > 0 {
		g := keys[:min(len(keys), manyGroup)]
		keys = keys[len(g):]
		a.l.guardCheck(rel)
		for i, k := range g {
			hs[i] = a.table.Hash(k)
			a.table.Touch(hs[i])
		}
		for i := range g {
			dst = append(dst, a.allowHash(hs[i], rel))
		}
	}
	return dst
}

func (a *logAlgo) take(key string, n, limit int, perCall bool, rel int64) (bool, verdict) {
	if !perCall {
		limit = int(a.limit.Load())
	}
	if limit <= 0 || limit > a.l.cfg.MaxLimit || n <= 0 || n > limit {
		return a.l.never(limit)
	}
	return a.decide(a.table.Hash(key), n, limit, rel, true)
}

// decide is take for a valid n and limit, and the key's hash h.
func (a *logAlgo) decide(h uint64, n, limit int, rel int64, detail bool) (bool, verdict) {
	for {
		s, rec, slots := a.table.Lookup(h)
		if rec != nil {
			st, out := a.ring.TakeLimit(&rec.State, &rec.Hash, h, slots, a.tick(rel), uint32(n), uint32(limit), detail)
			if st == ring.Busy {
				runtime.Gosched() // another request is resetting the key's ring (a few stores)
				continue
			}
			if st != ring.Stale {
				ok := st == ring.Allowed
				a.stats.count(ok)
				v := verdict{limit: limit}
				if detail {
					v.remaining = int(out.Remaining)
					v.reset = a.delay(out.ResetAfter, rel)
					if !ok {
						v.retry = a.delay(out.RetryAfter, rel)
					}
				}
				return ok, v
			}
		}
		// Not found, or the record was freed or reused under us: the slow path.
		if ok, v, done := a.insert(s, h, n, limit, rel); done {
			return ok, v
		}
	}
}

// insert creates the key's state under the shard lock, unless another
// goroutine got there first (then done is false and the caller retries the
// lock-free path). The first n requests of a new key are always admitted
// (n <= Limit on an empty window), so the record is born holding them.
func (a *logAlgo) insert(s *shard.Shard, h uint64, n, limit int, rel int64) (allowed bool, v verdict, done bool) {
	t := a.table
	s.Lock()
	if _, ok := t.Find(s, h); ok {
		s.Unlock()
		return false, verdict{}, false
	}
	clk, due := a.l.insertClock()
	if due {
		s.Unlock()
		a.l.catchUp(clk) // see insertClock
		return false, verdict{}, false
	}
	// Lazy reuse judges idleness by the clock, never by rel: a time ahead
	// of the clock must not free other keys (see package shard).
	ref, readyAt, ok := t.Alloc(s, clk)
	if !ok {
		s.Unlock()
		allowed, v = a.l.overflow(h, n, limit)
		return allowed, v, true
	}
	// Date the new key no earlier than the moment its record's previous
	// owner went empty: then the previous owner's late writers find values
	// newer than theirs and do nothing (see package shard). And no earlier
	// than the clock read under the lock: a key freed as idle (by a reading
	// taken before this one) must not be recreated by a request that read
	// the clock long ago, back in the window that made it active.
	at := max(rel, readyAt, clk)
	rec, slots := t.Record(s, ref)
	rec.Hash.Store(h) // before State: a reader that sees the new State sees the new Hash
	tk := a.tick(at)
	rec.State.Store(a.ring.First(slots, tk, uint32(n)))
	t.Insert(s, h, ref)
	s.Unlock()
	a.l.stats.inserts.Add(1)
	a.l.stats.count(true)
	return true, verdict{limit: limit, remaining: limit - n, reset: a.delay(tk+a.wq+1-a.tick(rel), rel)}, true
}

// idle is the table's idle test (see package shard): whether state w holds
// nothing at rel or later, and when a state that is not idle will be.
func (a *logAlgo) idle(w uint64, rel int64) (idle bool, readyAt int64) {
	if a.ring.IsIdle(w, a.tick(rel)) {
		return true, rel
	}
	d := int64(a.ring.ReadyAt(w) - a.tick(rel)) // ticks ahead, < 2^31
	return false, rel - rel%a.res + satMul(int64(uint32(d)), a.res)
}

func (a *logAlgo) peek(key string, rel int64) (bool, verdict) {
	h := a.table.Hash(key)
	limit := int(a.limit.Load())
	for {
		s, rec, slots := a.table.Lookup(h)
		if rec == nil {
			s.Lock()
			_, found := a.table.Find(s, h)
			s.Unlock()
			if found {
				continue
			}
			return true, verdict{limit: limit, remaining: limit}
		}
		st, out := a.ring.PeekLimit(&rec.State, &rec.Hash, h, slots, a.tick(rel), uint32(limit))
		if st == ring.Idle { // nothing counts; Peek changes nothing, not even this
			return true, verdict{limit: limit, remaining: limit}
		}
		if st == ring.Busy {
			runtime.Gosched() // another request is resetting the key's ring
			continue
		}
		if st == ring.Stale {
			s.Lock() // a sweep or Reset is removing the record: wait for it
			s.Unlock()
			continue
		}
		ok := st == ring.Allowed
		v := verdict{limit: limit, remaining: int(out.Remaining), reset: a.delay(out.ResetAfter, rel)}
		if !ok {
			v.retry = a.delay(out.RetryAfter, rel)
		}
		return ok, v
	}
}

// reset frees the key's record (see Limiter.Reset).
func (a *logAlgo) reset(key string, rel int64) {
	h := a.table.Hash(key)
	if a.table.Forget(h, rel) {
		a.table.ClearIdleHint(h)
	}
}

func (a *logAlgo) sweep(at int64, total bool) int { return a.table.Sweep(at, total) }
func (a *logAlgo) reclaimed() uint64              { return a.table.Reclaimed() }

func (a *logAlgo) keys() int {
	n := 0
	for i := 0; i < a.table.Shards(); i++ {
		n += a.table.ShardAt(i).Len()
	}
	return n
}

func (a *logAlgo) bytes() int64 {
	var b int64
	for i := 0; i < a.table.Shards(); i++ {
		b += a.table.ShardAt(i).Bytes()
	}
	return b
}

// setLimit takes effect at the next decision: every key's ring keeps its
// last MaxLimit entries whatever the limit, so the new limit is judged
// against the same, exact history.
func (a *logAlgo) setLimit(limit int) error {
	a.limit.Store(int64(limit))
	return nil
}

func (a *logAlgo) setBurst(int) error { return errNoBurst(SlidingLog) }

func (a *logAlgo) limits() (int, int) {
	lim := int(a.limit.Load())
	return lim, lim
}
