package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Per-call limits: random traces where every call picks its own
// limit, against the reference models.
func TestPerCallLimitMatchesModel(t *testing.T) {
	traces := 1500
	if testing.Short() {
		traces = 150
	}
	r := rand.New(rand.NewPCG(12, 9))
	for tr := 0; tr < traces; tr++ {
		a := algorithms[tr%2]
		limit := 1 + r.IntN(32)
		window := time.Duration(1+r.IntN(3000)) * time.Millisecond
		penalty := r.IntN(4) == 0
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: a, Limit: limit, Window: window, Clock: clk, Penalty: penalty})
		lm := newLogModel(limit, window, int64(l.Resolution()), penalty)
		cm := newCounterModel(limit, window, penalty)
		now := int64(0)
		for step := 0; step < 200; step++ {
			if r.IntN(3) > 0 {
				now += r.Int64N(int64(window)/int64(limit)*2 + 2)
			}
			if a == SlidingLog {
				now = now / int64(time.Millisecond) * int64(time.Millisecond)
			}
			key := fmt.Sprint("k", r.IntN(3))
			callLimit := 1 + r.IntN(limit+1) // sometimes one past the ring size (SlidingLog: denied)
			if r.IntN(10) == 0 {
				callLimit = r.IntN(3) - 1 // 0 or negative: denied
			}
			n := 1
			if r.IntN(5) == 0 {
				n = r.IntN(callLimit + 2)
			}
			clk.t.Store(now) // times are the clock's readings, as AllowNWithLimitAt wants
			got := l.AllowNWithLimitAt(key, n, callLimit, Time(now))
			if a == SlidingLog {
				want := lm.allowNLimit(key, n, callLimit, now)
				if penalty {
					got.RetryAfter, want.RetryAfter = 0, 0
				}
				if got != want {
					t.Fatalf("trace %d step %d: Limit %d window %v penalty %v: AllowNWithLimit(%s, %d, %d) at %d: got %+v, want %+v",
						tr, step, limit, window, penalty, key, n, callLimit, now, got, want)
				}
				continue
			}
			if want := cm.allowNLimit(key, n, int64(callLimit), now); got.Allowed != want || got.Limit != callLimit {
				t.Fatalf("trace %d step %d: Limit %d window %v: AllowNWithLimit(%s, %d, %d) at %d: got %+v, want allowed=%v",
					tr, step, limit, window, key, n, callLimit, now, got, want)
			}
		}
	}
}

// The bounds: SlidingLog takes a per-call limit up to its ring size
// (Config.Limit), SlidingCounter up to MaxCounterLimit; outside, and for an
// n past the limit, the call is denied, records nothing, says that waiting
// does not help (RetryAfter Never, not 0, which invites a retry loop) and
// counts in Stats.Invalid, not as a rate-limit denial.
func TestPerCallLimitBounds(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 10, Window: time.Second, Clock: &fakeClock{}})
		bad := [][2]int{{1, 0}, {1, -1}, {3, 2}, {0, 5}}
		switch a {
		case SlidingLog:
			bad = append(bad, [2]int{1, 11}) // above MaxLimit (= Limit)
		case SlidingCounter:
			bad = append(bad, [2]int{1, MaxCounterLimit + 1})
		case GCRA:
			bad = append(bad, [2]int{1, MaxGCRALimit + 1})
		}
		for _, c := range bad {
			d := l.AllowNWithLimitAt("k", c[0], c[1], 0)
			if d.Allowed || d.RetryAfter != Never || d.Admissible() || d.Limit != c[1] {
				t.Errorf("%v: AllowNWithLimit(n=%d, limit=%d) = %+v, want denied with RetryAfter Never", a, c[0], c[1], d)
			}
		}
		if st := l.Stats(); st.Invalid != uint64(len(bad)) || st.Denied != 0 || st.Allowed != 0 {
			t.Errorf("%v: stats %+v, want %d invalid and no denials", a, st, len(bad))
		}
		if l.Len() != 0 {
			t.Errorf("%v: out-of-range calls recorded state (%d keys)", a, l.Len())
		}
		if a == SlidingCounter { // a tier above Config.Limit
			if d := l.AllowNWithLimitAt("big", 50, 50, 0); !d.Allowed || d.Remaining != 0 || d.Limit != 50 {
				t.Errorf("counter: AllowNWithLimit(50, 50) = %+v", d)
			}
		}
		// one key, two tiers: the history is shared
		l.AllowNWithLimitAt("u", 4, 4, 0)
		if d := l.AllowNWithLimitAt("u", 1, 4, 0); d.Allowed {
			t.Errorf("%v: limit 4 not enforced: %+v", a, d)
		}
		if a == GCRA {
			// GCRA's tiers share the key's debt in time: 4 at limit 4 fill a
			// bucket of Burst/Limit x Window = 1 s, which is every tier's.
			if d := l.AllowNWithLimitAt("u", 1, 5, 0); d.Allowed || d.RetryAfter != 200*time.Millisecond {
				t.Errorf("gcra: limit 5 after 4 at limit 4: %+v, want denied for one interval (200ms)", d)
			}
			continue
		}
		if d := l.AllowNWithLimitAt("u", 1, 5, 0); !d.Allowed || d.Remaining != 0 {
			t.Errorf("%v: limit 5 after 4: %+v", a, d)
		}
	}
}

func TestPerCallLimitAllocs(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 100, Window: time.Second})
		l.AllowNWithLimit("k", 1, 50)
		if n := testing.AllocsPerRun(1000, func() { l.AllowNWithLimit("k", 1, 50) }); n != 0 {
			t.Errorf("%v: AllowNWithLimit allocates %.1f times per call", a, n)
		}
		if n := testing.AllocsPerRun(1000, func() { l.AllowNWithLimitAt("k", 2, 70, l.Now()) }); n != 0 {
			t.Errorf("%v: AllowNWithLimitAt allocates %.1f times per call", a, n)
		}
	}
}

// With a tiny Window the wrap guard's span (the time packed states can
// tell apart, 2^22 Windows for SlidingCounter) was shorter than the
// default SweepInterval, so the background sweep never came in time and a
// decision past the span swept every key inline while others waited. New
// now lowers the interval to a quarter of the span (at least 1 ms), and
// keeps a shorter one as given.
func TestSweepIntervalWithinWrapGuardSpan(t *testing.T) {
	windows := []time.Duration{4 * time.Nanosecond, 100 * time.Nanosecond, time.Microsecond, time.Second}
	for _, a := range algorithms {
		for _, w := range append(windows, time.Millisecond) {
			if a == GCRA && w < time.Millisecond {
				continue // GCRA wants a coarser Window per unit of its limit
			}
			l := newLimiter(t, Config{Algorithm: a, Limit: 4, Window: w})
			got := l.Config().SweepInterval
			if 4*got > time.Duration(l.guard) && got > minSweepInterval || got > DefaultSweepInterval {
				t.Errorf("%v Window %v: SweepInterval %v, wrap guard span %v", a, w, got, time.Duration(l.guard))
			}
			l2 := newLimiter(t, Config{Algorithm: a, Limit: 4, Window: w, SweepInterval: time.Millisecond})
			if got := l2.Config().SweepInterval; got != time.Millisecond {
				t.Errorf("%v Window %v: SweepInterval 1ms became %v", a, w, got)
			}
		}
	}
}
