package engine

// Caller times (early, late, far off) and what they may not do to other
// keys, the sweep and Reset: regressions found by an adversarial review of
// the engine's timing guarantees, each test named after the behaviour.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// startedClock returns a fake clock and a Limiter on it, with the clock
// moved an hour past the Limiter's epoch so that times before "now" are not
// clamped to the epoch.
func startedClock(t *testing.T, c Config) (*fakeClock, *Limiter) {
	t.Helper()
	clk := &fakeClock{}
	clk.t.Store(int64(time.Hour))
	c.Clock = clk
	l := newLimiter(t, c)
	clk.t.Add(int64(time.Hour))
	return clk, l
}

// Found by review: one AllowAt with a time ahead of the clock poisoned its shard:
// records freed afterwards (lazy reuse and the idle-key recreation judged
// at the request's time) were handed out dated at the early time, so an
// innocent new key was dated in the future and denied for the whole gap.
// Reclamation now judges only at clock readings.
func TestEarlyTimeDoesNotPoisonShard(t *testing.T) {
	for _, a := range algorithms {
		for _, early := range []time.Duration{50 * time.Millisecond, 10 * time.Minute} {
			t.Run(fmt.Sprintf("%v/early=%v", a, early), func(t *testing.T) {
				const W = time.Millisecond
				clk, l := startedClock(t, Config{Algorithm: a, Limit: 2, Window: W, Shards: 1, MaxKeys: 3, SweepInterval: time.Hour})
				now := clk.Now()
				l.AllowAt("filler-1", Time(now))
				l.AllowAt("filler-2", Time(now))
				l.AllowAt("early", Time(now))
				clk.t.Add(int64(10 * W))
				now = clk.Now()
				if d := l.AllowAt("early", Time(now+int64(early))); !d.Allowed {
					t.Fatalf("early request denied: %+v", d)
				}
				l.AllowAt("early-2", Time(now+int64(early))) // a new key at an early time in the full table
				l.Sweep()
				for i := 0; i < 20; i++ {
					at := now + int64(i)*int64(3*W) // every 3 windows: always admissible
					clk.t.Store(at)
					if d := l.AllowAt("innocent", Time(at)); !d.Allowed {
						t.Fatalf("innocent key, request %d (every 3 windows, Limit 2) denied: %+v (stats %+v)", i, d, l.Stats())
					}
				}
			})
		}
	}
}

// Found by review: one AllowAt with a time far ahead of the clock ran the wrap
// guard's sweep at that time, which freed every key as idle, active ones
// included. The guard now sweeps at the clock's time, and a caller's time
// is bounded to within the lead of the clock.
func TestFarEarlyTimeDoesNotWipeOtherKeys(t *testing.T) {
	for _, a := range algorithms {
		for _, far := range []time.Duration{30 * time.Minute, 100 * time.Hour, 1 << 62, math.MaxInt64} {
			t.Run(fmt.Sprintf("%v/far=%v", a, far), func(t *testing.T) {
				clk, l := startedClock(t, Config{Algorithm: a, Limit: 2, Window: time.Millisecond})
				now := clk.Now()
				l.AllowNAt("hot", 2, Time(now))
				l.AllowAt("someone-else", Time(now+min(int64(far), math.MaxInt64-now)))
				for i := 0; i < 50; i++ {
					if d := l.AllowAt("hot", Time(now+int64(i)*int64(time.Microsecond))); d.Allowed {
						t.Fatalf("hot key (Limit 2 used at t) admitted again at +%dµs after another key's request at +%v: %+v", i, far, d)
					}
				}
				for i := 1; i <= 40; i++ { // later, at the clock's pace: normal service
					at := now + int64(i)*int64(5*time.Millisecond)
					clk.t.Store(at)
					if d := l.AllowAt("hot", Time(at)); !d.Allowed {
						t.Fatalf("hot key afterwards: request %d (5 windows apart) denied: %+v", i, d)
					}
				}
			})
		}
	}
}

// Found by review: the wrap guard's total sweep (the clock jumped further than
// packed times can tell apart) freed keys that requests which had read the
// clock before the jump created while it ran, dated at the new time, so
// each admitted Limit more at that time. New keys now wait for the sweep
// and are dated after it.
func TestTotalSweepSparesKeysCreatedDuringIt(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			const L = 3
			clk := &fakeClock{}
			clk.t.Store(int64(time.Hour))
			l := newLimiter(t, Config{Algorithm: a, Limit: L, Window: time.Second, Clock: clk, SweepInterval: time.Hour, Shards: 64})
			t0 := clk.Now()
			for i := 0; i < 200000; i++ {
				l.AllowAt(fmt.Sprint("filler-", i), Time(t0))
			}
			clk.t.Add(3*l.guard + int64(time.Second)) // the clock jumps (a VM resumed, a Clock stepped)
			now := clk.Now()
			var wg sync.WaitGroup
			started := make(chan struct{})
			var victims []string
			wg.Add(2)
			go func() { // a request at the new time: the guard's total sweep
				defer wg.Done()
				close(started)
				l.AllowAt("trigger", Time(now))
			}()
			go func() { // requests that read the clock before the jump, for new keys, meanwhile
				defer wg.Done()
				<-started
				for i := 0; i < 3000; i++ {
					k := fmt.Sprint("victim-", i)
					if l.AllowAt(k, Time(t0)).Allowed {
						victims = append(victims, k)
					}
				}
			}()
			wg.Wait()
			if len(victims) == 0 {
				t.Fatal("no victim admitted: the test did not run")
			}
			for _, k := range victims {
				if d := l.AllowNAt(k, L, Time(now)); d.Allowed {
					t.Fatalf("%s, admitted once (counted at the new time), admitted %d more at it (Limit %d): the sweep freed it", k, L, L)
				}
			}
		})
	}
}

// Found by review: SlidingCounter's Reset stored a word with one request two
// windows back, which a request one or two windows behind the clock read as
// a phantom request.
func TestCounterResetLeavesNoPhantom(t *testing.T) {
	for _, back := range []time.Duration{0, 500 * time.Microsecond, 1500 * time.Microsecond, 2500 * time.Microsecond} {
		const W = time.Millisecond
		clk, l := startedClock(t, Config{Algorithm: SlidingCounter, Limit: 1, Window: W})
		now := clk.Now()
		l.AllowAt("k", Time(now-int64(3*W)))
		l.Reset("k")
		if d := l.AllowAt("k", Time(now-int64(back))); !d.Allowed || d.Remaining != 0 {
			t.Errorf("first request after Reset, %v behind the clock: %+v, want allowed", back, d)
		}
		if d := l.AllowAt("k", Time(now)); d.Allowed {
			t.Errorf("Reset key admitted a second request at Limit 1 (%v behind): %+v", back, d)
		}
	}
}

// Found by review: a new key's ResetAfter overflowed (negative) when its record
// was dated far from the request's time.
func TestResetAfterNeverNegative(t *testing.T) {
	for _, a := range algorithms {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: MaxWindow, Clock: clk, Shards: 1})
		l.AllowAt("a", 0)
		l.AllowAt("a2", 0)
		l.AllowAt("b", math.MaxInt64)
		if d := l.AllowAt("c", 0); d.ResetAfter < 0 || d.RetryAfter < 0 {
			t.Fatalf("%v: AllowAt(c, 0) = %+v", a, d)
		}
		for _, at := range []int64{0, math.MaxInt64, 0, math.MaxInt64 / 2, 1} {
			for _, k := range []string{"a", "a2", "b", "c"} {
				if d := l.AllowAt(k, Time(at)); d.ResetAfter < 0 || d.RetryAfter < 0 {
					t.Fatalf("%v: AllowAt(%s, %d) = %+v", a, k, at, d)
				}
			}
			clk.t.Store(at / 2)
		}
	}
}

// Found by review: lazy reuse skipped an idle record: after a SlidingCounter
// Reset (the record was idle, the shard's hint said "nothing idle before
// X"), and for a request whose own time was behind the clock (the hint and
// the idle test compared the request's time, not the clock's).
func TestLazyReuseSeesResetAndJudgesByClock(t *testing.T) {
	t.Run("counter-reset", func(t *testing.T) {
		const W = time.Second
		clk, l := startedClock(t, Config{Algorithm: SlidingCounter, Limit: 2, Window: W, Shards: 1, MaxKeys: 2, Overflow: OverflowDeny, SweepInterval: time.Hour})
		now := clk.Now()
		l.AllowAt("a", Time(now))
		l.AllowAt("b", Time(now))
		if l.AllowAt("c", Time(now)).Allowed {
			t.Fatal("setup: the table is full of active keys, c must overflow")
		}
		l.Reset("a")
		// a's record is reusable from the window after its Reset (second
		// review: in the same window a new key's words could
		// repeat a's, and a stale CAS of a's land on them).
		if l.AllowAt("c", Time(now+1)).Allowed {
			t.Errorf("new key took a's record in the window of its Reset: %+v", l.Stats())
		}
		clk.t.Add(int64(W))
		if d := l.AllowAt("c", Time(clk.Now())); !d.Allowed {
			t.Errorf("new key overflowed a window after Reset emptied a's record: %+v", l.Stats())
		}
	})
	for _, a := range algorithms {
		t.Run(a.String()+"-late", func(t *testing.T) {
			const W = 8 * time.Millisecond
			clk, l := startedClock(t, Config{Algorithm: a, Limit: 2, Window: W, Shards: 1, MaxKeys: 1, Overflow: OverflowDeny, SweepInterval: time.Hour})
			t0 := clk.Now()
			l.AllowAt("a", Time(t0))
			if l.AllowAt("b", Time(t0)).Allowed {
				t.Fatal("setup: b must overflow while a is active")
			}
			clk.t.Add(int64(3 * W)) // a is idle by the clock
			if d := l.AllowAt("b", Time(t0+int64(W)/16)); !d.Allowed {
				t.Errorf("a request that read the clock 3 windows ago overflowed though a is idle by the clock: %+v", l.Stats())
			}
		})
	}
}

// Found by review: a request later than the lateness bound was denied by AllowAt
// (SlidingLog) while PeekAt at the same time said allowed, and it wiped the
// active SlidingCounter key. A caller's time is now bounded to within the
// lead of the clock, far inside the lateness bound, so it counts at the
// key's newest time like any late request.
func TestFarLateTimeCountsAtNewest(t *testing.T) {
	for _, a := range algorithms {
		clk := &fakeClock{}
		clk.t.Store(int64(time.Hour))
		l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: time.Millisecond, Clock: clk})
		lateBy := (1<<30 + 1000) * int64(l.Resolution())
		if a == SlidingCounter {
			lateBy = (1<<22 + 1000) * int64(time.Millisecond)
		}
		clk.t.Add(lateBy + int64(time.Hour))
		now := clk.Now()
		l.AllowNAt("k", 2, Time(now))
		p, d := l.PeekAt("k", Time(now-lateBy)), l.AllowAt("k", Time(now-lateBy))
		if p.Allowed || d.Allowed {
			t.Errorf("%v: %v late: PeekAt %+v, AllowAt %+v, want both denied (counts at the key's newest)", a, time.Duration(lateBy), p, d)
		}
		for i := 0; i < 10; i++ {
			if l.AllowAt("k", Time(now)).Allowed {
				t.Fatalf("%v: key wiped by a request %v late", a, time.Duration(lateBy))
			}
		}
	}
}

// A caller's time far from the clock counts at the clock ± lead: the
// documented bound that findings 2 and 8 rely on.
func TestCallerTimeBoundedToClock(t *testing.T) {
	for _, a := range algorithms {
		clk, l := startedClock(t, Config{Algorithm: a, Limit: 1, Window: time.Millisecond})
		now := clk.Now()
		d := l.AllowAt("ahead", Time(now+int64(1000*time.Hour)))
		if !d.Allowed {
			t.Fatalf("%v: %+v", a, d)
		}
		// Counted at now+lead: a second request there is denied, and so is
		// one further ahead (it counts at now+lead too) ...
		if d := l.AllowAt("ahead", Time(now+l.lead)); d.Allowed {
			t.Errorf("%v: a second request at clock+lead admitted at Limit 1: %+v", a, d)
		}
		if d := l.AllowAt("ahead", Time(now+l.lead+int64(3*time.Millisecond))); d.Allowed {
			t.Errorf("%v: a request beyond clock+lead admitted at Limit 1: %+v", a, d)
		}
		// ... until the clock moves on: then clock+lead is three windows later.
		clk.t.Add(int64(3 * time.Millisecond))
		if d := l.AllowAt("ahead", Time(clk.Now()+l.lead)); !d.Allowed {
			t.Errorf("%v: a request at the new clock+lead, three windows on, denied: %+v", a, d)
		}
	}
}

// Found by review (minor): SlidingLog's tick was coarsened by SweepInterval, so
// with a long SweepInterval a request the exact rule admits was denied.
func TestResolutionIndependentOfSweepInterval(t *testing.T) {
	for _, sw := range []time.Duration{time.Second, time.Minute, time.Hour} {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Millisecond, Clock: clk, SweepInterval: sw})
		if l.Resolution() != time.Microsecond {
			t.Errorf("SweepInterval %v: Resolution %v, want 1µs", sw, l.Resolution())
		}
		l.AllowNAt("k", 2, 0)
		at := int64(time.Millisecond + 50*time.Microsecond)
		clk.t.Store(at)
		if d := l.AllowAt("k", Time(at)); !d.Allowed {
			t.Errorf("SweepInterval %v: [0.05 ms, 1.05 ms] is empty, but the request at 1.05 ms was denied: %+v", sw, d)
		}
	}
}

// Found by review (minor): WaitN refused at once ("would pass the deadline") when
// the retry fitted before the deadline but the minimum sleep did not.
//
// The margin must stay under minWait (1 ms) for the floor to matter, so a
// busy machine that stalls the test for 600 µs between the deadline and
// Wait's check makes that one refusal legitimate: the test fails when most
// of its 20 keys are refused (the bug refused every one), not on one.
func TestWaitShortRetryBeforeDeadline(t *testing.T) {
	l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 1, Window: 300 * time.Microsecond, Clock: MonotonicClock()})
	const keys = 20
	var refused []error
	for i := 0; i < keys; i++ {
		k := fmt.Sprint("k", i)
		l.Allow(k)
		d := l.Peek(k)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(d.RetryAfter+600*time.Microsecond))
		err := l.Wait(ctx, k)
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "would pass the context deadline") {
			refused = append(refused, err)
		}
	}
	if len(refused) > keys/2 {
		t.Fatalf("Wait refused %d of %d keys at once though each RetryAfter falls 600µs before its deadline; first: %v", len(refused), keys, refused[0])
	}
}

// Found by a later review: a SlidingCounter key emptied by Reset was idle
// at once, so lazy reuse could give its slot to a new key in the same
// window, whose words then repeated the old key's: a request of the old key
// that loaded its word before the Reset and CASes late succeeded on the
// new key's record. The Reset key is reusable only from the next window,
// where every word of a new key differs. (The late request is played out
// at the point where Take has loaded the word and checked the hash.)
func TestCounterResetReuseNoABA(t *testing.T) {
	const L = 10
	clk, l := startedClock(t, Config{Algorithm: SlidingCounter, Limit: L, Window: time.Second, Shards: 1, MaxKeys: 4, Overflow: OverflowDeny, SweepInterval: time.Hour})
	keys := []string{"K", "f1", "f2", "f3"}
	now := clk.Now()
	for _, k := range keys {
		l.AllowAt(k, Time(now))
	}
	l.AllowNAt("K", 2, Time(now)) // K: (w, 0, 3)
	flat := l.impl.(*counterAlgo).flat
	_, rec := flat.Lookup(flat.Hash("K"))
	w1 := rec.State.Load() // a request for K loads the word and checks the hash ...
	l.Reset("K")           // ... and is descheduled while K is Reset
	for _, step := range []int64{1, int64(time.Second)} {
		clk.t.Add(step)
		if d := l.AllowAt("V", Time(clk.Now())); !d.Allowed {
			continue // no room yet (the Reset key is reusable from the next window)
		}
		l.AllowNAt("V", 2, Time(clk.Now()))
		if rec.State.CompareAndSwap(w1, w1+1) { // the late request for K resumes
			t.Fatalf("K's late CAS succeeded on the record V took %v after K's Reset", time.Duration(clk.Now()-now))
		}
		adm := 3
		for i := 0; i < 2*L; i++ {
			if l.AllowAt("V", Time(clk.Now())).Allowed {
				adm++
			}
		}
		if adm != L {
			t.Fatalf("V admitted %d at one instant, want Limit %d", adm, L)
		}
		return
	}
	t.Fatalf("V never got a record: %+v", l.Stats())
}

// Found by a later review: a clock 2^63 ns from the epoch saturated the
// guard's sweepDue at MaxInt64, and every insert found the guard due
// forever (sweep, look again, sweep): Allow on a new key never returned.
func TestSaturatedClockDoesNotHang(t *testing.T) {
	for _, a := range algorithms {
		for _, start := range []int64{0, math.MinInt64} {
			clk := &fakeClock{}
			clk.t.Store(start)
			l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: time.Second, Clock: clk, SweepInterval: time.Hour})
			l.Allow("old")
			clk.t.Store(math.MaxInt64)
			done := make(chan bool)
			go func() { done <- l.Allow("new") }()
			select {
			case ok := <-done:
				if !ok {
					t.Errorf("%v: the first request of a new key was denied", a)
				}
			case <-time.After(time.Minute): // a hang, not a speed: any machine answers in microseconds
				t.Fatalf("%v, clock from %d to MaxInt64: Allow on a new key did not return", a, start)
			}
		}
	}
}

// Found by a later review: the bound on a caller's time was measured from
// a horizon that only an out-of-bound call advanced, so after a while of
// clock-read decisions a time far behind the clock passed as in bounds,
// read as "idle" and wiped a full key.
func TestStaleCallerTimeBoundedByClock(t *testing.T) {
	for _, a := range algorithms {
		for _, run := range []time.Duration{50 * time.Minute, 150 * time.Minute} {
			clk := &fakeClock{}
			l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: time.Millisecond, Clock: clk, SweepInterval: time.Hour})
			for t := time.Duration(0); t < run; t += time.Minute { // decisions that read the clock
				clk.t.Store(int64(t))
				l.Allow("other")
			}
			clk.t.Store(int64(run))
			l.AllowN("hot", 2)
			for _, stale := range []int64{0, int64(time.Millisecond)} {
				if d := l.AllowAt("hot", Time(stale)); d.Allowed {
					t.Fatalf("%v after %v: AllowAt(hot, %d), %v behind the clock, admitted on a full key: %+v", a, run, stale, run, d)
				}
			}
			if l.Allow("hot") {
				t.Fatalf("%v after %v: the full key was wiped by a stale time", a, run)
			}
		}
	}
}
