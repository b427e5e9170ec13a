// Package ring is the exact sliding-window log: per key, a ring of the last
// Limit recorded timestamps (32-bit ticks, 4 bytes each) and one 64-bit head
// word, updated lock-free.
//
// # Semantics
//
// A request at tick t is admitted iff fewer than Limit recorded requests
// have ticks in the closed interval [t-Wq, t]. n requests (n <= Limit) are
// admitted all or none: iff the n-th oldest of the last Limit recorded ticks
// is older than t-Wq. Only admitted requests are recorded, unless Penalty is
// set, in which case denied ones are recorded too.
//
// # Head word
//
//	 63                32 31            16 15             0
//	+--------------------+----------------+----------------+
//	|    last : 32       |   next : 16    |   batch : 16   |
//	+--------------------+----------------+----------------+
//
// last is the tick of the newest batch of recorded requests, next the ring
// position the next request will take (< Limit), batch the size of the
// newest batch (1..Limit): the entries just before next, all at tick last.
// A request at tick last joins the newest batch (up to MaxJoin entries,
// see "Contention"); a request at a later tick starts a new one. Limit <=
// 65535 keeps next and batch in 16 bits, and next == 0xFFFF (impossible
// for a live ring) marks a head that is not a live ring: a free record
// (Dead, batch 0) or a ring being reset in place (batch >= 1, see "Time").
//
// # Why no reader acts on a claimed but unwritten slot
//
// A request claims positions [next, next+n) by one CAS of the head word that
// also carries its tick in last. The slots themselves are not written by
// that CAS, so for a while they still hold older ticks: the classic trap of
// CAS rings. Here nobody reads them in that while: the positions of the
// newest batch are never read from the ring; a reader that needs one of
// them (the entry it needs is among the last batch positions) takes its
// tick from the head word's last field instead. And before any request
// moves the head on to a new batch (making the newest batch an older one
// that is read from the ring), it first writes that batch's tick into its
// slots itself ("helps"), so every batch but the newest is always in the
// ring when the head names it. A request that joins the newest batch
// writes no slot at all: the batch's entries are still read from the head.
//
// Slots are only ever raised (CAS from a smaller to a larger tick), never
// lowered. Because the ticks of a ring's successive batches never decrease,
// a late writer that lost the race (or was descheduled for a while) finds a
// value at least as new as its own and does nothing. The same holds when
// the record was freed and given to a new key: its slots are reset to a
// tick that is already later than anything the old key wrote (see package
// engine), so stale writes cannot reach into the new key's window.
//
// # Time: late, idle, wrapped
//
// Ticks are 32-bit and compared with wrap-around arithmetic. For a request
// at tick now on a key whose newest tick is last, d = now - last (mod 2^32)
// reads as one of three things:
//
//   - d in [0, Wq]: the window holds entries; the request counts at now.
//   - d in [2^32 - LateMax, 2^32): now is behind last by at most LateMax
//     ticks (a goroutine that read the clock before a concurrent one, a
//     stale AllowAt or Peek, a sweep that read the clock long ago). It
//     counts at last: a key's time never goes back, and its state is
//     never judged empty by a time older than its newest entry.
//   - otherwise, d in (Wq, 2^32 - LateMax): last is more than a window old,
//     so nothing in the ring counts (Idle). Peek reports Idle without
//     touching the ring. Take records at now on the ring as it is, like any
//     request, if the ring's oldest entry (the slot at next) is less than
//     RewriteAge (2^30) ticks old. Otherwise it first resets the ring in
//     place: it CASes the head to a resetting mark (next 0xFFFF, its tick
//     in last), stores now-Wq-1 (outside the window from now on) into every
//     slot, and CASes the head from the mark to the new ring holding its n
//     requests. While the mark is up, other requests for the key get Busy
//     and retry (the reset is Limit stores; only a resetter that is
//     descheduled in between makes them wait longer). The slot stores are
//     plain stores, not raises: nobody else writes the ring while the mark
//     is up, except late writers, whose ticks are at most last and so below
//     the reset's tick (a raise never writes them over it). Nothing frees
//     a record under the mark (a sweep finds it not idle; a Reset waits
//     for the mark to go, see package shard's Config.Transient), so the
//     final CAS cannot fail for that reason, and no store of the reset can
//     land in a later owner's ring. (Should the final CAS fail all the
//     same, the request reports Stale and is decided again.)
//
// Why the oldest entry's age decides: every comparison of two ticks here
// (inWindow's now-ts <= Wq, raise's int32(ts-c)) is exact only while the
// true difference is below 2^31. A request that is not idle comes within
// Wq of last, and overwrites the oldest entry; so between two idle
// requests at most Limit requests rotate the ring, each within Wq of the
// previous, and every entry is younger than RewriteAge + Limit x (Wq+1)
// ticks, below 2^31 (package engine picks the tick so that 2 x (Limit+1)
// x (Wq+1) < 2^31). An idle request that finds the oldest entry younger
// than RewriteAge keeps that true; one that finds it older rewrites every
// slot. The age it reads is exact: a live key's newest tick is never more
// than 2^31 + Wq behind a decision (the engine's wrap guard) and the ring
// spans less than 2^30 + Limit x (Wq+1) ticks behind it, less than 2^32 in
// all. So a sparse key (idle between requests, the common case with many
// keys) costs what an active one does; only a key left idle for 2^30 ticks
// (17.9 min at 1 µs) without a sweep pays the Limit stores.
//
// The middle reading is unambiguous only while no live key is older than
// 2^32 - LateMax - Wq ticks at the time of a request; package engine sweeps
// often enough (in decision time, not only on its timer) to ensure it.
//
// # Contention
//
// What limits a hot key's admissions across cores is the cache lines each
// admission writes: a line written by one core must move to the next core
// that writes it (one coherence transfer, tens of ns or more between cores,
// more across sockets), so N cores admitting on one key run at most one
// admission per transfer of each line that every admission writes, however
// large N is, while reads of lines nobody writes stay in every core's cache
// and scale. Denials write nothing and scale with the cores.
//
// A request at the head's tick joins the newest batch: its admission
// writes one word, the head (one line: the record's first, which also
// holds the key's hash that the lookup reads). Only a request at a later
// tick, or one that finds the batch at MaxJoin entries, writes slots: the
// newest batch's (help), at most MaxJoin of them, which lie on
// ceil(MaxJoin x 4 / 64) = 2 lines or 3. So a hot key, whose requests
// mostly share a tick (a 1 µs tick or longer; the engine's own clock moves
// in steps of ClockRefresh), writes 1 + 2/MaxJoin to 1 + 3/MaxJoin lines
// per admission (1.06 to 1.09 with MaxJoin 32), against 2 before joins
// were added (the head, then an eager write of the request's own slot,
// which the next claimer, on another core, read and raised: two lines,
// each read and then written, up to four coherence transactions a
// decision). With N cores that means about one line moved per admission
// at any N: the head's CAS serialises admissions as a mutex would, without
// a lock that a descheduled holder keeps, and a failed CAS costs a reload
// of the line, not a sleep. It cannot scale with N (no exact log on one
// key can: every admission must see the previous one), and each transfer
// costs more the further apart the cores are, but the lines per admission
// do not grow with N; BenchmarkHotKeyContention in package engine
// measures it at -cpu=1,2,4,... .
//
// MaxJoin trades the lines per admission against the most slots one
// request writes when it moves the head on: a batch of MaxJoin at one tick
// costs its helper MaxJoin raises (loads and CASes on 2 or 3 lines it
// mostly has in cache), where an unbounded batch (a whole ClockRefresh of
// a hot key's admissions) would make one request write thousands of slots.
package ring

import (
	"sync/atomic"
)

// MaxLimit is the largest ring size.
const MaxLimit = 0xFFFF

// LateMax is how far (in ticks) a request's time may be behind its key's
// newest tick and still count at the newest; see "Time" above.
const LateMax = 1 << 30

// RewriteAge is the age (in ticks) of a ring's oldest entry from which a
// request on the idle ring rewrites every slot before recording; see
// "Time" above.
const RewriteAge = 1 << 30

// MaxJoin is the largest batch that requests at one tick build by joining
// it (see "Contention"): the most slots one request writes when it moves
// the head on (a batch of n > MaxJoin, taken in one call, writes n).
const MaxJoin = 32

// Dead is the head word of a record that holds no key.
const Dead = uint64(0xFFFF) << 16

// resetting is the head word that marks a ring being reset in place by a
// request at tick now (see "Time").
func resetting(now uint32) uint64 { return Pack(now, 0xFFFF, 1) }

// live reports whether head word h is a live ring's (not Dead, not being
// reset).
func live(h uint64) bool { return h>>16&0xFFFF != 0xFFFF }

// Resetting reports whether head word h marks a ring that a request is
// resetting in place: its record must not be freed until the mark is gone
// (the request's slot stores are plain stores, see "Time").
func Resetting(h uint64) bool { return !live(h) && h != Dead }

// Pack builds a head word.
func Pack(last, next, batch uint32) uint64 {
	return uint64(last)<<32 | uint64(next&0xFFFF)<<16 | uint64(batch&0xFFFF)
}

// Unpack splits a head word.
func Unpack(h uint64) (last, next, batch uint32) {
	return uint32(h >> 32), uint32(h>>16) & 0xFFFF, uint32(h) & 0xFFFF
}

// Ring holds the parameters of one limiter.
type Ring struct {
	limit   uint32
	wq      uint32 // window in ticks
	join    uint32 // largest batch a request may join: min(limit, MaxJoin)
	penalty bool
}

// New returns a Ring for limit entries and a window of windowTicks ticks.
// The caller validates 1 <= limit <= MaxLimit and 1 <= windowTicks < 2^30.
func New(limit int, windowTicks uint32, penalty bool) Ring {
	return Ring{limit: uint32(limit), wq: windowTicks, join: uint32(min(limit, MaxJoin)), penalty: penalty}
}

// Status is the outcome of Take.
type Status uint8

const (
	Denied  Status = iota // not admitted (recorded only in Penalty mode)
	Allowed               // admitted and recorded
	Stale                 // the record is free or belongs to another key: look the key up again
	Idle                  // (Peek) nothing in the ring counts: the key is as good as empty
	Busy                  // another request is resetting the ring in place: retry shortly
)

// Outcome describes a decision for the Decision fields. Delays are in
// ticks from the request's (unclamped) now.
type Outcome struct {
	Remaining  uint32
	RetryAfter uint32 // when denied: ticks until n requests would pass
	ResetAfter uint32 // ticks until no recorded request is in the window
}

// effective returns the tick a request at now counts at: now, or the
// key's newest tick if now is behind it (see "Time"); idle when the ring
// holds nothing that counts at now.
func (r *Ring) effective(now, last uint32) (t uint32, idle bool) {
	switch d := now - last; {
	case d <= r.wq:
		return now, false
	case d >= 1<<32-LateMax:
		return last, false
	}
	return 0, true
}

// inWindow reports whether tick ts counts at tick t.
func (r *Ring) inWindow(t, ts uint32) bool { return t-ts <= r.wq }

// at returns the tick of the k-th oldest of the last Limit entries of the
// ring whose head fields are given (k in [0, Limit)).
func (r *Ring) at(slots []atomic.Uint32, last, next, batch, k uint32) uint32 {
	if k >= r.limit-batch {
		return last // newest batch: from the head word, never from its slots
	}
	p := next + k
	if p >= r.limit {
		p -= r.limit
	}
	return slots[p].Load()
}

// raise writes tick ts into count slots from position pos, except where a
// slot already holds ts or a later tick.
func raise(slots []atomic.Uint32, pos, count, limit, ts uint32) {
	for i := uint32(0); i < count; i++ {
		s := &slots[pos]
		for {
			c := s.Load()
			if int32(ts-c) <= 0 || s.CompareAndSwap(c, ts) {
				break
			}
		}
		if pos++; pos == limit {
			pos = 0
		}
	}
}

// Take decides n requests (1 <= n <= Limit) at tick now for the record with
// head word head, identity word id (expected to hold hash) and slots. With
// detail it also computes the Outcome (a binary search over the ring);
// without, the Outcome is zero.
func (r *Ring) Take(head, id *atomic.Uint64, hash uint64, slots []atomic.Uint32, now, n uint32, detail bool) (Status, Outcome) {
	return r.TakeLimit(head, id, hash, slots, now, n, r.limit, detail)
}

// TakeLimit is Take with a limit m for this call (1 <= n <= m <= Limit):
// admitted iff fewer than m-n+1 recorded requests lie in the window, that
// is iff the entry m-n places from the newest end of the ring (index
// Limit-m+n-1, oldest first) is outside it. The ring still records the
// last Limit requests, so calls with different limits on one key see the
// same history.
func (r *Ring) TakeLimit(head, id *atomic.Uint64, hash uint64, slots []atomic.Uint32, now, n, m uint32, detail bool) (Status, Outcome) {
	L := r.limit
	need := L - m + n - 1 // the entry that must be outside the window
	for {
		v := head.Load()
		if !live(v) {
			if v != Dead && id.Load() == hash {
				return Busy, Outcome{}
			}
			return Stale, Outcome{}
		}
		if id.Load() != hash {
			return Stale, Outcome{}
		}
		last, next, batch := Unpack(v)
		t, idle := r.effective(now, last)
		if idle && now-r.at(slots, last, next, batch, 0) < RewriteAge {
			// Nothing counts, and even the oldest entry is young enough to
			// be compared exactly (see "Time"): record at now on the ring
			// as it is.
			t, idle = now, false
		}
		if idle {
			// Nothing counts and the oldest entry is too old to compare:
			// reset in place, then record on the empty ring (n <= m <=
			// Limit always fits). See "Time".
			mark := resetting(now)
			if !head.CompareAndSwap(v, mark) {
				continue
			}
			empty := now - r.wq - 1
			for i := range slots {
				slots[i].Store(empty)
			}
			nn := n
			if nn == L {
				nn = 0
			}
			if !head.CompareAndSwap(mark, Pack(now, nn, n)) {
				return Stale, Outcome{} // freed under the mark: look the key up again
			}
			var out Outcome
			if detail {
				out = Outcome{Remaining: m - n, ResetAfter: r.wq + 1}
			}
			return Allowed, out
		}
		old := r.at(slots, last, next, batch, need)
		ok := !r.inWindow(t, old)
		var out Outcome
		if detail {
			out = r.describe(slots, last, next, batch, now, t, n, m, ok, ok || r.penalty)
		}
		// In Penalty mode a denial is recorded, unless its n oldest entries
		// are already at t: then recording changes nothing. Skipping it is
		// what keeps head words from repeating: every claim at tick t now
		// replaces at least one entry older than t, and the newest batch
		// (at t) is the last stretch of a lap, so the head can never come
		// back to (t, next, batch) and a paused claimer's CAS cannot succeed
		// on a state it did not see (ABA).
		if !ok && (!r.penalty || r.at(slots, last, next, batch, 0) == t) {
			// The slots read above are stable while the head is v (only the
			// newest batch's slots change, and those were not read): the
			// decision holds at the moment of the slot load iff the head is
			// still v now. Head words never repeat: last never decreases, and
			// at one tick every claim replaces an entry older than that tick
			// (an admission needs one outside the window; a penalty record
			// one older than t, see below), so no lap completes at one tick.
			// Hence no ABA, here or at the CAS below.
			if head.Load() != v {
				continue
			}
			return Denied, out
		}
		nn := next + n
		if nn >= L {
			nn -= L
		}
		var nv uint64
		if t == last && batch+n <= r.join {
			// Join the newest batch (same tick): its entries are read
			// from the head word, so the head is the only word written.
			nv = Pack(t, nn, batch+n)
		} else {
			// Help: write the newest batch's tick into its slots before
			// the head names a newer batch, which makes it an older one,
			// read from the ring.
			start := next + L - batch
			if start >= L {
				start -= L
			}
			raise(slots, start, batch, L, last)
			nv = Pack(t, nn, n)
		}
		if !head.CompareAndSwap(v, nv) {
			continue
		}
		if ok {
			return Allowed, out
		}
		return Denied, out
	}
}

// Peek decides one request at tick now without recording anything.
func (r *Ring) Peek(head, id *atomic.Uint64, hash uint64, slots []atomic.Uint32, now uint32) (Status, Outcome) {
	return r.PeekLimit(head, id, hash, slots, now, r.limit)
}

// PeekLimit is Peek under limit m (1 <= m <= Limit) instead of the ring's
// size, as TakeLimit decides: a limiter whose limit changes while serving
// passes the one in force.
func (r *Ring) PeekLimit(head, id *atomic.Uint64, hash uint64, slots []atomic.Uint32, now, m uint32) (Status, Outcome) {
	for {
		v := head.Load()
		if !live(v) {
			if v != Dead && id.Load() == hash {
				return Busy, Outcome{}
			}
			return Stale, Outcome{}
		}
		if id.Load() != hash {
			return Stale, Outcome{}
		}
		last, next, batch := Unpack(v)
		t, idle := r.effective(now, last)
		if idle {
			return Idle, Outcome{Remaining: m}
		}
		ok := !r.inWindow(t, r.at(slots, last, next, batch, r.limit-m))
		out := r.describe(slots, last, next, batch, now, t, 1, m, ok, false)
		if head.Load() != v {
			continue
		}
		if ok {
			return Allowed, out
		}
		return Denied, out
	}
}

// describe computes the Outcome of deciding n requests under limit m at
// effective tick t (>= now) on the ring state (last, next, batch). admitted
// says whether they pass, recorded whether they are written (admitted, or
// Penalty mode).
func (r *Ring) describe(slots []atomic.Uint32, last, next, batch, now, t, n, m uint32, admitted, recorded bool) Outcome {
	L := r.limit
	// first k whose entry is in the window: entries are sorted oldest first
	lo, hi := uint32(0), L
	for lo < hi {
		m := lo + (hi-lo)/2
		if r.inWindow(t, r.at(slots, last, next, batch, m)) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	count := L - lo // recorded requests in [t-W, t] before this decision
	var out Outcome
	after := count
	var newest uint32
	hasNewest := count > 0
	if hasNewest {
		newest = last
	}
	switch {
	case recorded && admitted:
		after = count + n // the n entries displaced were all outside the window
		newest, hasNewest = t, true
	case recorded: // penalty: the n oldest are displaced, some may be inside
		displacedIn := uint32(0)
		if n > L-count {
			displacedIn = n - (L - count)
		}
		after = count + n - displacedIn
		newest, hasNewest = t, true
		// the entry that must leave in the new state: old entry L-m+2n-1, or t
		need := t
		if k := L - m + 2*n - 1; k < L {
			need = r.at(slots, last, next, batch, k)
		}
		out.RetryAfter = need + r.wq + 1 - now
	case !admitted:
		out.RetryAfter = r.at(slots, last, next, batch, L-m+n-1) + r.wq + 1 - now
	}
	if after < m {
		out.Remaining = m - after
	}
	if hasNewest {
		out.ResetAfter = newest + r.wq + 1 - now
	}
	return out
}

// First initialises the slots of a record for a new key whose first n
// requests (n <= Limit: always admitted on an empty ring) arrive at tick now,
// and returns the head word to store. Every slot gets now-Wq-1: outside the
// window from now on, and not older than anything a previous owner of the
// record wrote (the engine reuses a record only when that holds).
func (r *Ring) First(slots []atomic.Uint32, now, n uint32) uint64 {
	empty := now - r.wq - 1
	for i := range slots {
		slots[i].Store(empty)
	}
	next := n
	if next == r.limit {
		next = 0
	}
	return Pack(now, next, n)
}

// IsIdle reports whether head word h holds nothing that counts at tick now
// or later (see "Time": a head newer than now is never idle).
func (r *Ring) IsIdle(h uint64, now uint32) bool {
	if !live(h) {
		return false // free, or being reset by a request (which is not idle)
	}
	last, _, _ := Unpack(h)
	_, idle := r.effective(now, last)
	return idle
}

// ReadyAt returns the tick from which head word h holds nothing (for a ring
// being reset: from which the resetting request's entries do not count).
func (r *Ring) ReadyAt(h uint64) uint32 {
	last, _, _ := Unpack(h)
	return last + r.wq + 1
}

// Valid reports whether h is the head word of a live ring of r's size: not
// Dead, not being reset, next below the ring's size and a batch of 1 to
// the size (package engine validates each head of a restored snapshot,
// whose next indexes the ring).
func (r *Ring) Valid(h uint64) bool {
	_, next, batch := Unpack(h)
	return live(h) && next < r.limit && batch >= 1 && batch <= r.limit
}
