// Package atomiccounter is the approximate sliding-window counter: the counts
// of the current and the previous aligned window, and the current window's
// number, packed into one uint64 that a CAS loop updates.
//
// # Bit layout
//
//	 63              40 39              20 19               0
//	+------------------+------------------+------------------+
//	|  window : 24     |   prev : 20      |   cur : 20       |
//	+------------------+------------------+------------------+
//
// window is the window number (time since the limiter's epoch divided by
// Window) modulo 2^24; prev and cur are the counts of windows window-1 and
// window, saturating at MaxCount = 2^20-1 (so the largest Limit is
// MaxCount). A word that records requests has cur >= 1 (it is written when
// a request is recorded in the window it names); the one live word with no
// count at all is Reset's (window w, prev 0, cur 0: empty, and dated w so
// that a late request does not read it as older). So a word with cur = 0
// and prev != 0 is never a key's state, and two of them mark records that
// hold no key: a free record (Free: prev 1) and a record a table rebuild
// moved to a new table (Moved: prev 2). Take and Peek report both as Stale.
//
// # Algorithm
//
// Windows are aligned to multiples of Window. At elapsed time e into window
// w the estimate of requests in the trailing Window is
//
//	estimate = prev * (Window - e) / Window + cur
//
// and n requests are admitted iff estimate + n <= Limit, evaluated exactly
// in 128-bit integers (no floating point). The estimate assumes the previous
// window's requests were spread evenly; when they bunched at its end, the
// trailing window can hold up to about 2*Limit - 1 admitted requests (Limit
// at the end of one window, nearly Limit again early in the next). That is
// the price of O(1) memory; SlidingLog is exact.
//
// # Concurrency
//
// Take loads the word, computes the new word and publishes it with one CAS;
// on failure it reloads and recomputes, so every admitted request is
// accounted in exactly one successful CAS and concurrent callers at a frozen
// clock admit exactly Limit. A denial is decided on a single load and writes
// nothing (unless Penalty is set). After every load Take re-reads the
// record's hash: a record that was freed and reused by another key carries
// another hash, so Take never acts on a word that belongs to someone else
// (see package engine for why a stale CAS can never succeed either).
//
// # Time: late, idle, wrapped
//
// For a request in window win on a word whose window is ww, d = win - ww
// (mod 2^24) reads as:
//
//   - 0 or 1: the word's counts are current (prev, cur) or one window old
//     (cur becomes prev);
//   - in [2^24 - LateWindows, 2^24): the request's time is behind the key's
//     newest window by at most LateWindows windows (a goroutine that read
//     the clock before a concurrent one, a stale AllowAt or Peek, a sweep
//     that read the clock long ago). It counts at the start of the word's
//     window: a key's time never goes back, and its state is never judged
//     empty, nor overwritten with an older window, by a late time;
//   - otherwise the word is two or more windows old: it holds nothing that
//     counts (Idle), and the request starts from empty counts.
//
// The last reading is unambiguous only while no live word is older than
// 2^24 - LateWindows windows at the time of a request; package engine
// sweeps often enough (in decision time, not only on its timer) to ensure
// it.
package atomiccounter

import (
	"math/bits"
	"sync/atomic"

	"github.com/slidelimit/slidelimit/internal/fastdiv"
)

// Field widths of the packed word.
const (
	CountBits  = 20
	WindowBits = 24
	MaxCount   = 1<<CountBits - 1
	countMask  = MaxCount
	windowMask = 1<<WindowBits - 1
)

// Free is the word of a record that holds no key.
const Free uint64 = 1 << CountBits

// Moved is the word a table rebuild leaves in a record it moved elsewhere
// (see package shard's Flat): not live, not Free.
const Moved uint64 = 2 << CountBits

// live reports whether w is a key's state (not Free, not Moved): cur >= 1,
// or prev = cur = 0 (Reset's word).
func live(w uint64) bool { return w&countMask != 0 || w&(countMask<<CountBits) == 0 }

// LateWindows is how many windows a request's time may be behind its key's
// newest window and still count at that window; see "Time" above.
const LateWindows = 1 << 22

// Pack builds a word. Fields are masked to their widths.
func Pack(window uint64, prev, cur uint32) uint64 {
	return (window&windowMask)<<(2*CountBits) | uint64(prev&countMask)<<CountBits | uint64(cur&countMask)
}

// Unpack splits a word into its fields.
func Unpack(w uint64) (window uint64, prev, cur uint32) {
	return w >> (2 * CountBits), uint32(w>>CountBits) & countMask, uint32(w) & countMask
}

// Counter holds the parameters of one limiter. The zero value is not usable;
// use New.
type Counter struct {
	limit   uint64
	window  uint64 // ns
	penalty bool
	div     fastdiv.Divider
}

// New returns a Counter for limit requests per window nanoseconds.
// The caller validates 1 <= limit <= MaxCount and window > 0.
func New(limit int, window int64, penalty bool) Counter {
	return Counter{limit: uint64(limit), window: uint64(window), penalty: penalty, div: fastdiv.New(uint64(window))}
}

// Status is the outcome of Take.
type Status uint8

const (
	Denied  Status = iota // not admitted (recorded only in Penalty mode)
	Allowed               // admitted and recorded
	Stale                 // the record is free or belongs to another key: look the key up again
)

// Snapshot is the state a decision was made on, rolled to the request's
// window and before the request was added.
//
// The counts are one embedded field (Counts) so that Snapshot has four
// fields in 32 bytes, which the compiler keeps in registers when Take
// returns it; with five fields it was stored to memory and copied with
// 16-byte loads that stall on the narrower stores just made (see package
// engine's verdict).
type Snapshot struct {
	Window  uint64 // full window number (not masked)
	Elapsed uint64 // ns into the window
	Counts
	Lag uint64 // ns from the request's own time to the time it counts at (late requests)
}

// Counts are the previous and current windows' counts of a Snapshot.
type Counts struct {
	Prev uint32
	Cur  uint32
}

// At returns the window number and the elapsed time for now (ns since the
// epoch; negative values count as 0).
func (c *Counter) At(now int64) (window, elapsed uint64) {
	if now < 0 {
		now = 0
	}
	window = c.div.Div(uint64(now))
	return window, uint64(now) - window*c.window
}

// roll returns the counts of word w as seen from window s.Window (see
// "Time"): current, one window old, newer than the request (then the
// request counts at the start of the word's window), or empty.
func (c *Counter) roll(w uint64, s *Snapshot) {
	ww, prev, cur := Unpack(w)
	switch d := (s.Window - ww) & windowMask; {
	case d == 0:
		s.Prev, s.Cur = prev, cur
	case d == 1:
		s.Prev, s.Cur = cur, 0
	case d >= 1<<WindowBits-LateWindows: // the word is ahead of us
		k := 1<<WindowBits - d
		s.Lag = satAdd(satMul(k, c.window), 0) - s.Elapsed
		s.Window += k
		s.Elapsed = 0
		s.Prev, s.Cur = prev, cur
	default:
		s.Prev, s.Cur = 0, 0
	}
}

// satMul and satAdd saturate at 2^62, far beyond any duration a Decision
// reports and far from overflowing when a few are added.
func satMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 || lo > 1<<62 {
		return 1 << 62
	}
	return lo
}

func satAdd(a, b uint64) uint64 { return min(a+b, 1<<62) } // a, b <= 2^62: no overflow

// admits reports whether prev*(W-e)/W + cur + n <= limit, exactly.
func (c *Counter) admits(s *Snapshot, n uint32, limit uint64) bool {
	// lhs = prev*(W-e) + (cur+n)*W, rhs = limit*W; all < 2^85, in 128 bits.
	h1, l1 := bits.Mul64(uint64(s.Prev), c.window-s.Elapsed)
	h2, l2 := bits.Mul64(uint64(s.Cur)+uint64(n), c.window)
	lo, carry := bits.Add64(l1, l2, 0)
	hi := h1 + h2 + carry
	rh, rl := bits.Mul64(limit, c.window)
	return hi < rh || (hi == rh && lo <= rl)
}

// Take decides n requests (1 <= n <= Limit) for the record whose state word
// is st and whose identity word is id, expected to hold hash. now is ns
// since the epoch.
func (c *Counter) Take(st, id *atomic.Uint64, hash uint64, now int64, n uint32) (Status, Snapshot) {
	return c.TakeLimit(st, id, hash, now, n, c.limit)
}

// TakeLimit is Take with a limit for this call (1 <= n <= limit <=
// MaxCount) instead of the Counter's: the formula's Limit is limit. Counts
// are the key's, shared by calls with any limit.
func (c *Counter) TakeLimit(st, id *atomic.Uint64, hash uint64, now int64, n uint32, limit uint64) (Status, Snapshot) {
	win, el := c.At(now)
	for {
		w := st.Load()
		if !live(w) || id.Load() != hash {
			return Stale, Snapshot{}
		}
		s := Snapshot{Window: win, Elapsed: el}
		c.roll(w, &s)
		ok := c.admits(&s, n, limit)
		if !ok && !c.penalty {
			return Denied, s
		}
		cur := s.Cur + n
		if cur > MaxCount {
			cur = MaxCount
		}
		if st.CompareAndSwap(w, Pack(s.Window, s.Prev, cur)) {
			if ok {
				return Allowed, s
			}
			return Denied, s
		}
	}
}

// Peek returns the snapshot of the record at now without changing it.
func (c *Counter) Peek(st, id *atomic.Uint64, hash uint64, now int64) (Status, Snapshot) {
	return c.PeekLimit(st, id, hash, now, c.limit)
}

// PeekLimit is Peek deciding under limit (1 <= limit <= MaxCount) instead
// of the Counter's: a limiter whose limit changes while serving passes the
// one in force.
func (c *Counter) PeekLimit(st, id *atomic.Uint64, hash uint64, now int64, limit uint64) (Status, Snapshot) {
	win, el := c.At(now)
	w := st.Load()
	if !live(w) || id.Load() != hash {
		return Stale, Snapshot{}
	}
	s := Snapshot{Window: win, Elapsed: el}
	c.roll(w, &s)
	if c.admits(&s, 1, limit) {
		return Allowed, s
	}
	return Denied, s
}

// First returns the word of a new key whose first n requests (n <= Limit,
// always admitted on empty state) arrive at now.
func (c *Counter) First(now int64, n uint32) uint64 {
	win, _ := c.At(now)
	return Pack(win, 0, n)
}

// Idle reports whether word w holds nothing that can count at now or later:
// it is two or more windows old, and not ahead of now (see "Time"). Free
// and Moved words are not idle (they hold no key).
func (c *Counter) Idle(w uint64, now int64) bool {
	win, _ := c.At(now)
	return c.idleIn(w, win)
}

// idleIn is Idle for a time in window win.
func (c *Counter) idleIn(w uint64, win uint64) bool {
	if !live(w) {
		return false
	}
	ww, prev, cur := Unpack(w)
	d := (win - ww) & windowMask
	if prev == 0 && cur == 0 {
		// Reset's word holds nothing, but it is idle only from the next
		// window on: a record freed in the word's own window could be
		// reused by a key whose words (in that window) repeat the ones the
		// Reset key had there, and a request of the Reset key that loaded
		// one of them before the Reset could then CAS the new key's word.
		// From the next window on, every word of a new key differs.
		return d >= 1 && d < 1<<WindowBits-LateWindows
	}
	return d >= 2 && d < 1<<WindowBits-LateWindows
}

// ReadyAt returns the earliest time (ns since epoch, saturating) from which
// the key whose word is w holds nothing: the start of the second window
// after the word's window.
func (c *Counter) ReadyAt(w uint64, now int64) int64 {
	_, at := c.IdleReadyAt(w, now)
	return at
}

// IdleReadyAt is (Idle(w, now), ReadyAt(w, now)) from one reading of
// now's window: lazy reuse asks both of every key it examines, and each
// on its own divided now by the Window again (ReadyAt also called Idle).
func (c *Counter) IdleReadyAt(w uint64, now int64) (idle bool, readyAt int64) {
	s := Snapshot{}
	s.Window, s.Elapsed = c.At(now)
	if c.idleIn(w, s.Window) {
		return true, now
	}
	c.roll(w, &s) // s.Window is now the word's window if it is ahead
	ww, prev, cur := Unpack(w)
	full := s.Window - (s.Window-ww)&windowMask // the word's window, unmasked
	if prev == 0 && cur == 0 {
		return false, max(now, int64(satMul(full+1, c.window))) // Reset's word: see Idle
	}
	return false, max(now, int64(satMul(full+2, c.window)))
}

// Emptied returns the word that Reset stores in place of the key's word w:
// no counts, dated at the later of now's window and w's. A request at a
// time behind that reads it as empty too (its window is ahead of the
// request's, which counts at its start, with nothing in it), so no request
// of the old state survives the Reset. It is idle from the next window on
// (see Idle).
//
// Why the later of the two: w may be dated ahead of now (an early
// AllowAt, or a request that moved the key into the next window after the
// Reset read the clock). A Reset word dated at now's window would then be
// idle from the key's own newest window on, its record could be freed and
// reused by a key whose words in that window repeat the old key's, and a
// request of the old key paused before its CAS could succeed on the new
// key's word. Dated at w's window or later, the word is idle only from the
// window after every window the old key wrote, and a new key's words are
// all dated later, so they differ from every old word.
func (c *Counter) Emptied(w uint64, now int64) uint64 {
	win, _ := c.At(now)
	if live(w) {
		ww, _, _ := Unpack(w)
		if d := (win - ww) & windowMask; d >= 1<<WindowBits-LateWindows {
			win += 1<<WindowBits - d // w is ahead of now: its window
		}
	}
	return Pack(win, 0, 0)
}

// Describe turns a snapshot into the figures of a Decision after n requests
// were (allowed == true) or were not admitted: remaining requests now, and
// retry/reset delays in ns. recorded says whether the n requests were
// written (admitted, or Penalty mode).
func (c *Counter) Describe(s Snapshot, n uint32, allowed, recorded bool) (remaining int, retryAfter, resetAfter int64) {
	return c.DescribeLimit(s, n, c.limit, allowed, recorded)
}

// DescribeLimit is Describe for a decision under limit instead of the
// Counter's.
func (c *Counter) DescribeLimit(s Snapshot, n uint32, limit uint64, allowed, recorded bool) (remaining int, retryAfter, resetAfter int64) {
	cur := uint64(s.Cur)
	if recorded {
		cur = min(cur+uint64(n), MaxCount)
	}
	W := c.window
	rest := W - s.Elapsed
	// weighted = ceil(prev*(W-e)/W). prev < 2^20 and rest <= W, so the
	// product is below 2^20 x W and h < W: Div64 cannot overflow. When the
	// product fits fastdiv's range (Windows up to 2^42 ns, about 73 minutes,
	// always), the precomputed reciprocal divides it in a multiply instead
	// of a hardware divide, which was a tenth of a hot-key AllowN.
	h, l := bits.Mul64(uint64(s.Prev), rest)
	var q, r uint64
	if h == 0 && l <= fastdiv.MaxDividend {
		q = c.div.Div(l)
		r = l - q*W
	} else {
		q, r = bits.Div64(h, l, W)
	}
	if r != 0 {
		q++
	}
	if used := q + cur; used < limit {
		remaining = int(limit - used)
	}
	switch {
	case cur > 0:
		resetAfter = int64(satAdd(satAdd(rest, W), s.Lag))
	case s.Prev > 0:
		resetAfter = int64(satAdd(rest, s.Lag))
	}
	if !allowed {
		retryAfter = int64(satAdd(uint64(c.retry(uint64(s.Prev), cur, uint64(n), limit, s.Elapsed)), s.Lag))
	}
	return remaining, retryAfter, resetAfter
}

// retry returns the ns until n requests would be admitted, given counts
// prev, cur at elapsed e and no other traffic.
func (c *Counter) retry(prev, cur, n, L, e uint64) int64 {
	W := c.window
	// earliest e' in [e, W) with prev*(W-e') <= (L-cur-n)*W
	if cur+n <= L {
		if prev == 0 {
			return 0
		}
		h, l := bits.Mul64(L-cur-n, W)
		var slack uint64
		if h >= prev {
			slack = W
		} else {
			slack, _ = bits.Div64(h, l, prev)
		}
		if slack > W {
			slack = W
		}
		if at := W - slack; at < W {
			return int64(max(at, e) - e)
		}
	}
	// next window: prev' = cur, cur' = 0: earliest e'' with cur*(W-e'') <= (L-n)*W
	if cur == 0 || L-n >= cur {
		return int64(W - e)
	}
	h, l := bits.Mul64(L-n, W)
	slack, _ := bits.Div64(h, l, cur) // h < cur since L-n < cur
	if at := W - slack; at < W {
		return int64(W - e + at)
	}
	return int64(2*W - e) // the window after next is empty
}

// Live reports whether w is a key's state (not Free, not Moved): a word a
// restored snapshot may hold (package engine validates each one).
func Live(w uint64) bool { return live(w) }
