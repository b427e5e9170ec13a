package engine

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/atomiccounter"
)

// Timing regressions found by review: late times, wrap without a sweep,
// Reset racing a sweep, the key bound, extreme times, freed records.

// Found by review: a time more than a window behind a key's newest timestamp was
// read as "ticks wrapped": decide, peek and the sweep freed the record, the
// key restarted empty and the stale request was admitted.
func TestStaleTimeDoesNotWipeActiveKey(t *testing.T) {
	const W = 10 * time.Millisecond
	for _, a := range algorithms {
		clk := &fakeClock{}
		clk.t.Store(int64(time.Hour))
		l := newLimiter(t, Config{Algorithm: a, Limit: 3, Window: W, Clock: clk})
		now := l.Now()
		if d := l.AllowNAt("k", 3, now); !d.Allowed {
			t.Fatalf("%v: first burst denied: %+v", a, d)
		}
		for _, late := range []time.Duration{W / 2, W + 1, 3 * W, time.Second, 10 * time.Minute} {
			if d := l.PeekAt("k", now.Add(-late)); d.Allowed {
				t.Errorf("%v: Peek %v late = %+v, want denied (counts at the key's newest time)", a, late, d)
			}
			if d := l.AllowAt("k", now.Add(-late)); d.Allowed {
				t.Errorf("%v: AllowAt %v late admitted: %+v", a, late, d)
			}
		}
		// A sweep that read its clock long ago (here: the clock itself is
		// behind the key) frees nothing that is active.
		clk.t.Store(int64(now) - int64(time.Minute))
		if n := l.Sweep(); n != 0 {
			t.Errorf("%v: a sweep behind the key's newest time freed %d keys", a, n)
		}
		clk.t.Store(int64(now))
		if d := l.AllowAt("k", now); d.Allowed {
			t.Errorf("%v: key wiped: %+v admitted after Limit", a, d)
		}
		if st := l.Stats(); st.Reclaimed != 0 || st.Inserts != 1 {
			t.Errorf("%v: stats %+v: the active key was reclaimed", a, st)
		}
	}
}

// Found by review: with no sweep (after Close, or explicit times that jump), a key
// idle exactly 2^32 ticks was denied (its ticks read as current), rings
// spanning more than 2^31 ticks stopped raising slots, and the counter's
// 24-bit window number let a key idle 2^24 windows keep its old counts.
//
// Handled, not forbidden: when the clock moves that far without a sweep
// (after Close), the next decision sweeps first (the wrap guard); a
// caller's time far from the clock is bounded to within the lead of it
// (TestCallerTimeBoundedToClock), so explicit times cannot jump past the
// guard on their own.
func TestWrapWithoutSweep(t *testing.T) {
	t.Run("log/idle 2^32 ticks", func(t *testing.T) {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Millisecond, Clock: clk})
		l.Close()
		res := int64(l.Resolution())
		for round := int64(0); round < 3; round++ {
			at := round << 32 * res
			clk.t.Store(at)
			if d := l.AllowNAt("k", 2, Time(at)); !d.Allowed {
				t.Fatalf("after %d x 2^32 ticks idle, AllowN(Limit) = %+v, want allowed", round, d)
			}
			if d := l.AllowAt("k", Time(at)); d.Allowed {
				t.Fatalf("after %d x 2^32 ticks: limit not enforced", round)
			}
		}
	})
	t.Run("log/ring spanning 2^31 ticks", func(t *testing.T) {
		// 5 requests within 5 µs at Limit 2, after a ring whose slots span
		// more than 2^31 ticks: at most 2 admitted.
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Millisecond, Clock: clk})
		l.Close()
		res := int64(l.Resolution())
		l.AllowAt("k", 0)
		base := int64(1<<31+1000) * res
		clk.t.Store(base)
		l.AllowAt("k", Time(base))
		admitted := 0
		for i := int64(1); i <= 5; i++ {
			if l.AllowAt("k", Time(base+i*res)).Allowed {
				admitted++
			}
		}
		if admitted > 1 { // one slot was taken at base
			t.Fatalf("%d of 5 admitted within 5 ticks at Limit 2 after one at base", admitted)
		}
	})
	t.Run("counter/idle 2^24 windows", func(t *testing.T) {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingCounter, Limit: 3, Window: time.Microsecond, Clock: clk})
		l.Close()
		W := int64(time.Microsecond)
		for round := int64(0); round < 3; round++ {
			at := round << atomiccounter.WindowBits * W
			clk.t.Store(at)
			if d := l.AllowNAt("k", 3, Time(at)); !d.Allowed {
				t.Fatalf("after %d x 2^24 windows idle, AllowN(Limit) = %+v, want allowed", round, d)
			}
			if d := l.AllowAt("k", Time(at)); d.Allowed {
				t.Fatalf("after %d x 2^24 windows: limit not enforced", round)
			}
		}
	})
}

// Found by review: SlidingCounter Reset treated a lock-free Lookup miss as final,
// so a Reset racing a sweep that removed other keys of the same shard (an
// index shift) was lost.
func TestCounterResetRacingSweep(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: SlidingCounter, Limit: 2, Window: time.Second, Clock: clk, Shards: 1})
	for round := 0; round < 200; round++ {
		// fillers that go idle, then victims in the same (only) shard
		for i := 0; i < 64; i++ {
			l.AllowAt(fmt.Sprint("filler-", round, "-", i), Time(clk.Now()))
		}
		clk.t.Add(int64(3 * time.Second))
		var victims []string
		for i := 0; i < 16; i++ {
			k := fmt.Sprint("victim-", round, "-", i)
			l.AllowNAt(k, 2, Time(clk.Now()))
			victims = append(victims, k)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); l.Sweep() }()
		for _, k := range victims {
			l.Reset(k)
		}
		wg.Wait()
		for _, k := range victims {
			if d := l.PeekAt(k, Time(clk.Now())); d.Remaining != 2 {
				t.Fatalf("round %d: Reset(%s) lost while a sweep ran: %+v", round, k, d)
			}
		}
	}
}

// Found by review: MaxKeys was split evenly over the shards, so MaxKeys 100 gave
// 64 shards of 1 key and the 9th new key was untracked while Len was 8.
func TestOverflowStartsAtMaxKeys(t *testing.T) {
	for _, a := range algorithms {
		for _, max := range []int{1, 7, 100, 1000, 5000} {
			l := newLimiter(t, Config{Algorithm: a, Limit: 1, Window: time.Hour, MaxKeys: max, Shards: 64, Overflow: OverflowDeny, Clock: &fakeClock{}})
			if got := l.Config().MaxKeys; got != max {
				t.Fatalf("%v MaxKeys %d: Config().MaxKeys = %d", a, max, got)
			}
			for i := 0; i < max; i++ {
				if !l.AllowAt(fmt.Sprint("k", i), 0).Allowed {
					t.Fatalf("%v MaxKeys %d: key %d refused at Len %d (overflow %d)", a, max, i, l.Len(), l.Stats().Overflow)
				}
			}
			if l.Len() != max {
				t.Fatalf("%v MaxKeys %d: Len %d", a, max, l.Len())
			}
			if l.AllowAt("one-more", 0).Allowed || l.Len() != max || l.Stats().Overflow != 1 {
				t.Fatalf("%v MaxKeys %d: past the bound: Len %d, stats %+v", a, max, l.Len(), l.Stats())
			}
		}
	}
}

// Found by review: AllowAt(k, math.MaxInt64) panicked (bits.Div64) with small
// windows. No time value may panic, nor give a negative duration.
func TestAllowAtMaxInt64NoPanic(t *testing.T) {
	times := []int64{0, 1, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, -1, math.MaxInt64 / 2, 5}
	for _, a := range algorithms {
		for _, w := range []time.Duration{time.Nanosecond, 3 * time.Nanosecond, time.Microsecond, time.Second, MaxWindow} {
			for _, limit := range []int{1, 2, 1000} {
				for _, clk := range []Clock{nil, &fakeClock{}} {
					if a == GCRA && int64(w) < 200*int64(limit) {
						continue // refused by New: a count of Window/MaxLimit under 200 ns
					}
					l := newLimiter(t, Config{Algorithm: a, Limit: limit, Window: w, Clock: clk})
					for _, at := range times {
						for _, d := range []Decision{l.AllowNAt("k", limit, Time(at)), l.AllowAt("k", Time(at)), l.PeekAt("k", Time(at)), l.AllowNAt("k", 1, Time(at))} {
							if d.RetryAfter < 0 || d.ResetAfter < 0 || d.Remaining < 0 {
								t.Fatalf("%v Window %v Limit %d at %d: %+v", a, w, limit, at, d)
							}
						}
						l.Reset("k")
					}
				}
			}
		}
	}
}

// Found by review: a record freed by Reset waited behind an older-ready one in
// the deferred list (Alloc looked at its head only), so a new key was
// refused while a reusable record existed.
func TestFreedRecordReusable(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 1, Window: time.Second, Clock: clk, Shards: 1, MaxKeys: 2, Overflow: OverflowDeny})
	l.AllowAt("a", 0)                          // a's record ready at 1 s
	l.AllowAt("b", Time(900*time.Millisecond)) // b's record ready at 1.9 s
	clk.t.Store(int64(900 * time.Millisecond))
	l.Reset("b") // deferred until 1.9 s
	clk.t.Store(int64(950 * time.Millisecond))
	l.Reset("a") // deferred until 1 s, behind b's in the list
	clk.t.Store(int64(1500 * time.Millisecond))
	if d := l.AllowAt("c", Time(clk.Now())); !d.Allowed {
		t.Fatalf("new key refused while a's record is reusable: %+v, stats %+v", d, l.Stats())
	}
	if d := l.AllowAt("d", Time(clk.Now())); d.Allowed {
		t.Fatalf("b's record reused before its old window emptied: %+v", d)
	}
}
