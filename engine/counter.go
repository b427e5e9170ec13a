package engine

import (
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/atomiccounter"
	"github.com/slidelimit/slidelimit/shard"
)

// counterAlgo is SlidingCounter: the two window counts in one word per key
// (package atomiccounter) in the one-level table (shard.Flat).
type counterAlgo struct {
	l       *Limiter
	stats   *stats // l.stats, one load nearer the hot path
	flat    *shard.Flat
	counter atomiccounter.Counter
	// limit is the limit in force (SetLimit): a decision loads it once, so
	// it decides wholly under the old limit or wholly under the new one.
	limit atomic.Int64
}

func buildCounter(l *Limiter) error {
	c := l.cfg
	a := &counterAlgo{l: l, stats: l.stats, counter: atomiccounter.New(c.Limit, int64(c.Window), c.Penalty)}
	a.limit.Store(int64(c.Limit))
	// See catchUp: 2 x 2^22 + 2 < 2^24 - atomiccounter.LateWindows.
	l.setBounds(satMul(1<<22, l.window), satMul(atomiccounter.LateWindows/4, l.window))
	f, err := l.newFlat(atomiccounter.Free, atomiccounter.Moved, a.idle)
	if err != nil {
		return err
	}
	a.flat = f
	l.impl = a
	return nil
}

// allow is Allow for an existing key without building a Decision, which
// was a third of the time of a hot-key Allow; everything else (a new key,
// a record freed or moved under us) takes the full path.
//
// allow and allowHash are one body twice (allow hashes first): the common
// path is then one call below Limiter.Allow's.
func (a *counterAlgo) allow(key string, rel int64) bool {
	h := a.flat.Hash(key)
	limit := a.limit.Load()
	s, rec := a.flat.Lookup(h)
	if rec != nil {
		st, _ := a.counter.TakeLimit(&rec.State, &rec.Hash, h, rel, 1, uint64(limit))
		if st != atomiccounter.Stale {
			ok := st == atomiccounter.Allowed
			a.stats.count(ok)
			return ok
		}
	} else if ok, _, done := a.insert(s, h, 1, int(limit), rel, false); done {
		// A miss goes straight to the insert, which confirms it under the
		// lock: a new key probes the table twice, not three times (decide
		// would look it up again first).
		return ok
	}
	ok, _ := a.decide(h, 1, int(limit), rel, false)
	return ok
}

func (a *counterAlgo) allowHash(h uint64, rel int64) bool {
	limit := a.limit.Load()
	s, rec := a.flat.Lookup(h)
	if rec != nil {
		st, _ := a.counter.TakeLimit(&rec.State, &rec.Hash, h, rel, 1, uint64(limit))
		if st != atomiccounter.Stale {
			ok := st == atomiccounter.Allowed
			a.stats.count(ok)
			return ok
		}
	} else if ok, _, done := a.insert(s, h, 1, int(limit), rel, false); done {
		return ok // a miss goes straight to the insert (see allow)
	}
	ok, _ := a.decide(h, 1, int(limit), rel, false)
	return ok
}

func (a *counterAlgo) allowMany(dst []bool, keys []string, rel int64) []bool {
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

func (a *counterAlgo) take(key string, n, limit int, perCall bool, rel int64) (bool, verdict) {
	if !perCall {
		limit = int(a.limit.Load())
	}
	if limit <= 0 || limit > MaxCounterLimit || n <= 0 || n > limit {
		return a.l.never(limit)
	}
	return a.decide(a.flat.Hash(key), n, limit, rel, true)
}

// decide is take for a valid n and limit, and the key's hash h.
func (a *counterAlgo) decide(h uint64, n, limit int, rel int64, detail bool) (bool, verdict) {
	for {
		s, rec := a.flat.Lookup(h)
		if rec != nil {
			st, snap := a.counter.TakeLimit(&rec.State, &rec.Hash, h, rel, uint32(n), uint64(limit))
			if st != atomiccounter.Stale {
				ok := st == atomiccounter.Allowed
				a.stats.count(ok)
				v := verdict{limit: limit}
				if detail {
					rem, retry, reset := a.counter.DescribeLimit(snap, uint32(n), uint64(limit), ok, ok || a.l.cfg.Penalty)
					v.remaining, v.retry, v.reset = rem, time.Duration(retry), time.Duration(reset)
				}
				return ok, v
			}
		}
		// Not found, or freed or moved under us: the slow path.
		if ok, v, done := a.insert(s, h, n, limit, rel, detail); done {
			return ok, v
		}
	}
}

// insert creates the key's state under the shard lock, unless it exists
// (then done is false and the caller retries the lock-free path). The
// first n requests of a new key are always admitted (n <= Limit on an
// empty window), so the record is born holding them. Without detail the
// verdict holds only the limit (Allow's case).
func (a *counterAlgo) insert(s *shard.FlatShard, h uint64, n, limit int, rel int64, detail bool) (allowed bool, v verdict, done bool) {
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
		allowed, v = a.l.overflow(h, n, limit)
		return allowed, v, true
	}
	at := max(rel, readyAt, clk) // see logAlgo.insert
	t.Publish(s, rec, h, a.counter.First(at, uint32(n)))
	s.Unlock()
	a.l.stats.inserts.Add(1)
	a.l.stats.count(true)
	if !detail {
		return true, verdict{limit: limit}, true // Allow reads only Allowed
	}
	win, el := a.counter.At(at)
	rem, _, reset := a.counter.DescribeLimit(atomiccounter.Snapshot{Window: win, Elapsed: el}, uint32(n), uint64(limit), true, true)
	return true, verdict{limit: limit, remaining: rem, reset: time.Duration(satAdd(reset, at-rel))}, true
}

// idle is the table's idle test (see package shard).
func (a *counterAlgo) idle(w uint64, rel int64) (bool, int64) {
	return a.counter.IdleReadyAt(w, rel)
}

func (a *counterAlgo) peek(key string, rel int64) (bool, verdict) {
	h := a.flat.Hash(key)
	limit := int(a.limit.Load())
	for {
		s, rec := a.flat.Lookup(h)
		if rec == nil {
			s.Lock()
			found := a.flat.Find(s, h) != nil
			s.Unlock()
			if found {
				continue
			}
			return true, verdict{limit: limit, remaining: limit}
		}
		st, snap := a.counter.PeekLimit(&rec.State, &rec.Hash, h, rel, uint64(limit))
		if st == atomiccounter.Stale {
			s.Lock() // a sweep or a rebuild is removing or moving the record: wait for it
			s.Unlock()
			continue
		}
		ok := st == atomiccounter.Allowed
		rem, retry, reset := a.counter.DescribeLimit(snap, 1, uint64(limit), ok, false)
		return ok, verdict{limit: limit, remaining: rem, retry: time.Duration(retry), reset: time.Duration(reset)}
	}
}

// reset empties the key's word in place (see Limiter.Reset).
func (a *counterAlgo) reset(key string, rel int64) {
	h := a.flat.Hash(key)
	resetFlat(a.flat, h, func(w uint64) (uint64, bool) {
		if w == atomiccounter.Free || w == atomiccounter.Moved {
			return 0, false
		}
		return a.counter.Emptied(w, rel), true // dated no earlier than w's window: see Emptied
	})
}

// resetFlat replaces the word of key h in a one-level table by empty(w),
// retrying while the record is freed, reused or moved under it; empty
// reports false for a word that holds no key.
func resetFlat(f *shard.Flat, h uint64, empty func(w uint64) (uint64, bool)) {
	for {
		s, rec := f.Lookup(h)
		if rec == nil {
			// A lock-free miss is not final (a rebuild under way): confirm
			// it under the lock.
			s.Lock()
			found := f.Find(s, h) != nil
			s.Unlock()
			if !found {
				return // a key being created now is created empty anyway
			}
			continue
		}
		for {
			w := rec.State.Load()
			e, live := empty(w)
			if !live || rec.Hash.Load() != h {
				s.Lock() // freed, reused or moved under us: wait for the table's writer, look again
				s.Unlock()
				break
			}
			if rec.State.CompareAndSwap(w, e) {
				f.NoteReset(h) // the key is idle soon: let lazy reuse find it
				return
			}
		}
	}
}

func (a *counterAlgo) sweep(at int64, total bool) int { return a.flat.Sweep(at, total) }
func (a *counterAlgo) keys() int                      { return flatLen(a.flat) }
func (a *counterAlgo) bytes() int64                   { return a.flat.Bytes() }
func (a *counterAlgo) reclaimed() uint64              { return a.flat.Reclaimed() }

func flatLen(f *shard.Flat) int {
	n := 0
	for i := 0; i < f.Shards(); i++ {
		n += f.ShardAt(i).Len()
	}
	return n
}

// setLimit takes effect at the next decision: the counts stay in the
// key's word, and the formula weighs them against the new limit.
func (a *counterAlgo) setLimit(limit int) error {
	a.limit.Store(int64(limit))
	return nil
}

func (a *counterAlgo) setBurst(int) error { return errNoBurst(SlidingCounter) }

func (a *counterAlgo) limits() (int, int) {
	lim := int(a.limit.Load())
	return lim, lim
}
