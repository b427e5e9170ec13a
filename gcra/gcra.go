// Package gcra is the generic cell rate algorithm (GCRA), the token bucket
// written as one time per key: the theoretical arrival time (TAT), the
// moment the key's bucket is full again. It packs that time into one
// uint64 that a CAS loop updates, like package atomiccounter.
//
// # Algorithm
//
// A rule has an emission interval Token (time per request) and a Depth
// (Burst x Token: how far ahead of now a key's TAT may be). n requests at
// time now are admitted iff
//
//	max(TAT, now) + n x Token - now <= Depth
//
// and then TAT becomes max(TAT, now) + n x Token. A fresh key (TAT <= now:
// a full bucket) admits Burst requests at once, then one every Token. Over
// any interval of length D at most Burst + D/Token requests are admitted,
// whatever the order in which concurrent requests' times reach the word:
// each admission raises TAT by n x Token and leaves it at most Depth ahead
// of its own time. A late time (behind other requests') finds the bucket
// no emptier (TAT - now is larger), so it never admits more than an
// in-order arrival would.
//
// # Bit layout
//
//	 63   62   61   60   59                                0
//	+----+----+----+----+-----------------------------------+
//	| 0  | r  | h  | c  |            time : 60              |
//	+----+----+----+----+-----------------------------------+
//
// A live word has bit 63 clear. With r = 0 the time is the key's TAT.
// With r = 1 it is a Reset's mark: the key's bucket is full from that time
// on (its debt is forgotten), and a request counts at the later of its own
// time and the mark's, as a new key counts at the later of its time and
// the clock. h says the key was Reset (see below); every later word of the
// key keeps it. c says which of two clocks the time is on (package engine
// runs a virtual clock for its limit in force and the real clock for
// per-call limits): Take answers Other for a word on the clock it was not
// given, and the caller converts it (Convert) before it decides. Bit 63
// set marks records that hold no key: Free (the record is free) and Moved
// (a table rebuild moved it; package shard's Flat). Take reports both as
// Stale.
//
// Times are nanoseconds since the limiter's epoch and stay below 2^60
// (36.5 years): the caller keeps times below MaxTime/2 (18 years) and
// Depth at most MaxDepth, so no sum here overflows the field and the word
// never wraps.
//
// # Why a stale CAS never succeeds
//
// A request loads the word, checks the record's identity word, computes
// and CASes. Within one key a CAS that finds again the word it loaded is
// right whatever happened between: the word is the key's whole state. The
// danger is a record freed and given to a new key while a request of the
// old key is paused before its CAS: the new key must never hold a word
// the old key had. A record is freed only when its word is idle as of a
// clock reading (Idle), and given to a new key only with a first word
// dated after that reading (First adds n x Token >= 1), and the new key's
// words only grow from there. Without a Reset a key's words only grow too
// (TAT = max(TAT, now) + n x Token), so at the free every word the old key
// had is at or before the reading, below every word of the new key.
//
// A Reset forgets the debt, so its mark may be earlier than words the key
// had before. Those words are at most Bound ahead of the mark (the caller
// bounds how far ahead of its clock a TAT can be: its callers' lead plus
// its deepest penalty), and the mark and every later word of the key carry
// h, which makes them idle only Bound after their time (Idle). So at the
// free the reading is at or after every word the key had, as before.
//
// With two clocks the same holds clock by clock: a word on one never
// equals a word on the other (bit c), and Convert keeps a key's times in
// order across them (a converted word is idle no earlier than the word it
// replaces), so at the free every word the old key had, on either clock,
// is at or before that clock's reading, and the new key's first word, on
// its clock, is after it.
package gcra

import (
	"math/bits"
	"sync/atomic"
)

// Field layout.
const (
	TimeBits  = 60
	MaxTime   = 1<<TimeBits - 1
	altFlag   = 1 << TimeBits
	histFlag  = 1 << (TimeBits + 1)
	resetFlag = 1 << (TimeBits + 2)
	timeMask  = MaxTime
)

// MaxDepth is the largest Depth (and Token) a rule may have: with times
// below MaxTime/2, a TAT plus two Depths plus a request's n x Token (at
// most Depth) stays below MaxTime.
const MaxDepth = 1 << 57

// Free is the word of a record that holds no key.
const Free uint64 = 1 << 63

// Moved is the word a table rebuild leaves in a record it moved elsewhere
// (see package shard's Flat): not live, not Free.
const Moved uint64 = 1<<63 | 1

// Live reports whether w is a key's state (not Free, not Moved).
func Live(w uint64) bool { return w>>63 == 0 }

// Pack builds the word of a never Reset key whose TAT is tat (clamped to
// [0, MaxTime]) on the clock alt says (false: the first, true: the other).
func Pack(tat int64, alt bool) uint64 { return uint64(clamp(tat)) | clockBit(alt) }

// PackReset builds a Reset's mark at time at on clock alt.
func PackReset(at int64, alt bool) uint64 {
	return uint64(clamp(at)) | resetFlag | histFlag | clockBit(alt)
}

// Alt reports whether live word w's time is on the other clock.
func Alt(w uint64) bool { return w&altFlag != 0 }

// WasReset reports whether live word w's key was Reset (its words are
// idle only Bound after their time).
func WasReset(w uint64) bool { return w&histFlag != 0 }

// nextWord is the word that follows w with TAT tat: same clock and history,
// not a mark.
func nextWord(w uint64, tat int64) uint64 { return uint64(clamp(tat)) | w&(altFlag|histFlag) }

func clockBit(alt bool) uint64 {
	if alt {
		return altFlag
	}
	return 0
}

// Unpack returns the time of live word w and whether it is a Reset's mark.
func Unpack(w uint64) (at int64, reset bool) { return int64(w & timeMask), w&resetFlag != 0 }

func clamp(t int64) int64 { return min(max(t, 0), MaxTime) }

// Rule is the rate a decision is made under: Token ns per request and a
// bucket Depth ns deep (Burst x Token). 1 <= Token <= Depth <= MaxDepth.
type Rule struct {
	Token int64
	Depth int64
}

// Burst is the most requests the rule admits at once: Depth / Token.
func (r Rule) Burst() int64 { return r.Depth / r.Token }

// Status is the outcome of Take.
type Status uint8

const (
	Denied  Status = iota // not admitted (recorded only in Penalty mode)
	Allowed               // admitted and recorded
	Stale                 // the record is free or belongs to another key: look the key up again
	Other                 // the word is on the other clock: Convert it, then decide again
)

// Snapshot is what a decision saw: the time it counted at (At: its own
// time, or a Reset mark's if that is later), the key's TAT as seen from
// there (Base = max(TAT, At); for a Reset mark, At) and the TAT after the
// decision (After: Base + n x Token if recorded, else Base).
type Snapshot struct {
	At, Base, After int64
}

// penaltyDepth is how far ahead of its time a denied request may push a
// key's TAT in Penalty mode: two Depths, so a key hammered without pause
// is admitted again once it has paused one Depth (a Window with the
// default Burst) plus one Token.
func penaltyDepth(r Rule) int64 { return 2 * r.Depth }

// view returns the time a request at now counts at and the key's TAT seen
// from there, for live word w.
func view(w uint64, now int64) (at, base int64) {
	t, reset := Unpack(w)
	if reset {
		at = max(t, now)
		return at, at // a full bucket at the mark or later
	}
	return now, max(t, now)
}

// Take decides n >= 1 requests at time now (0 <= now <= MaxTime/2, n x
// Token <= Depth) on clock alt for the record whose state word is st and
// whose identity word is id, expected to hold hash. penalty records denied
// requests too (bounded: see penaltyDepth). A word on the other clock is
// left as it is (Other).
func Take(st, id *atomic.Uint64, hash uint64, now int64, n int64, r Rule, penalty, alt bool) (Status, Snapshot) {
	cost := n * r.Token
	for {
		w := st.Load()
		if !Live(w) || id.Load() != hash {
			return Stale, Snapshot{}
		}
		if Alt(w) != alt {
			return Other, Snapshot{}
		}
		at, base := view(w, now)
		s := Snapshot{At: at, Base: base, After: base}
		next := base + cost
		ok := next-at <= r.Depth
		if !ok {
			if !penalty {
				return Denied, s
			}
			next = min(next, at+penaltyDepth(r))
			if t, reset := Unpack(w); !reset && next <= t {
				return Denied, s // already pushed as far as penalty goes: nothing to write
			}
		}
		s.After = next
		if st.CompareAndSwap(w, nextWord(w, next)) {
			if ok {
				return Allowed, s
			}
			return Denied, s
		}
	}
}

// Peek returns what Take(n = 1) would decide at now, changing nothing,
// for live word w (on the clock of now), the record's word just loaded
// and checked to be the key's.
func Peek(w uint64, now int64, r Rule) (Status, Snapshot) {
	at, base := view(w, now)
	s := Snapshot{At: at, Base: base, After: base}
	if base+r.Token-at <= r.Depth {
		return Allowed, s
	}
	return Denied, s
}

// First returns the word of a new key whose first n requests (n x Token
// <= Depth: always admitted on a full bucket) arrive at now on clock alt.
func First(now, n int64, r Rule, alt bool) uint64 { return Pack(now+n*r.Token, alt) }

// Idle reports whether word w holds nothing at now or later: its time is
// at or before now, the reading of w's clock (altNow for a word on the
// other clock), and for a key that was Reset at or before now - bound
// (see "Why a stale CAS never succeeds"; bound >= 0). Free and Moved words
// are not idle.
func Idle(w uint64, now, altNow, bound int64) bool {
	if !Live(w) {
		return false
	}
	if Alt(w) {
		return ReadyAt(w, bound) <= altNow
	}
	return ReadyAt(w, bound) <= now
}

// Convert returns live word w moved to the other clock: its time t becomes
// to(t), a time on that clock, and its kind (TAT or mark) stays. to must
// be nondecreasing and such that a reading of the new clock at or after
// to(t) is a time at or after t on the old one: then the word is idle on
// the new clock no earlier than on the old, and everything that the
// reclamation argument says of the old word holds of the new one (see
// "Why a stale CAS never succeeds": an idle word's times, on both clocks,
// are at or before the clock reading that freed it).
func Convert(w uint64, to func(int64) int64) uint64 {
	t, _ := Unpack(w)
	return uint64(clamp(to(t))) | w&(resetFlag|histFlag) | (w&altFlag ^ altFlag)
}

// ReadyAt returns the time, on w's clock, from which live word w is idle.
func ReadyAt(w uint64, bound int64) int64 {
	t, _ := Unpack(w)
	if WasReset(w) {
		t += bound
	}
	return t
}

// Emptied returns the word that Reset stores in place of the key's word w
// at time now (on w's clock, a clock reading: the Bound of "Why a stale
// CAS never succeeds" is counted from it): a mark at now, so the key's
// bucket is full from now on whatever its debt was.
func Emptied(w uint64, now int64) uint64 { return PackReset(now, Alt(w)) }

// Describe turns a snapshot into a decision's figures, in the times of
// the snapshot: the requests admissible at once after it, the time
// (absolute) from which n more would be admitted, and the time (absolute)
// at which the key's bucket is full again.
func Describe(s Snapshot, n int64, r Rule) (remaining int64, retryAt, fullAt int64) {
	debt := s.After - s.At
	if debt < r.Depth {
		remaining = (r.Depth - debt) / r.Token
	}
	return remaining, s.After + n*r.Token - r.Depth, s.After
}

// MulDiv returns a x b / c rounded down (up if ceil), saturating at
// MaxTime; a, b >= 0, c > 0. The engine's virtual clock converts with it.
func MulDiv(a, b, c int64, ceil bool) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return MaxTime
	}
	q, rem := bits.Div64(hi, lo, uint64(c))
	if ceil && rem != 0 {
		q++
	}
	return int64(min(q, MaxTime))
}
