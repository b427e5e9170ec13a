package engine

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// AllowAt and friends take a Time, a type of the engine's own, so that a
// wall-clock reading (an int64 such as time.Now().UnixNano()) does not
// compile where a reading of the Limiter's clock is due. Once, passed as
// an int64, it was clamped to the clock plus the 4.5-minute lead and
// locked its key for that long.
func TestCallerTimesAreLimiterTimes(t *testing.T) {
	want := reflect.TypeOf(Time(0))
	if reflect.TypeOf(int64(0)).AssignableTo(want) {
		t.Fatal("an int64 is assignable to Time")
	}
	for name, f := range map[string]any{
		"AllowAt":           (*Limiter).AllowAt,
		"AllowNAt":          (*Limiter).AllowNAt,
		"PeekAt":            (*Limiter).PeekAt,
		"AllowNWithLimitAt": (*Limiter).AllowNWithLimitAt,
	} {
		ft := reflect.TypeOf(f)
		if got := ft.In(ft.NumIn() - 1); got != want {
			t.Errorf("%s takes its time as %v, want %v", name, got, want)
		}
	}
	if got := reflect.TypeOf((*Limiter).Now).Out(0); got != want {
		t.Errorf("Now returns %v, want %v", got, want)
	}
}

// A wall-clock time converted explicitly (Time(time.Now().UnixNano())) is
// decades ahead of the Limiter's clock: it counts one Window ahead, so its
// key is denied at most one Window longer than a request at the clock
// would make it: two Windows for SlidingLog, three for SlidingCounter
// (whose windows are aligned: a full window's count still weighs on the
// next), with a RetryAfter that says so, and then admits again.
func TestWallClockTimeLocksKeyAtMostOneWindowLonger(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			const W = 100 * time.Millisecond
			bound := 2*W + time.Millisecond
			if a == SlidingCounter {
				bound = 3 * W
			}
			clk, l := startedClock(t, Config{Algorithm: a, Limit: 1, Window: W})
			if d := l.AllowAt("k", Time(time.Now().UnixNano())); !d.Allowed {
				t.Fatalf("first request denied: %+v", d)
			}
			d := l.Allow("k")
			if d {
				t.Fatal("Limit 1 admitted a second request at once")
			}
			dd := l.Peek("k")
			if dd.Allowed || dd.RetryAfter > bound {
				t.Fatalf("Peek after the wall-clock time: %+v, want a RetryAfter of at most %v", dd, bound)
			}
			clk.t.Add(int64(dd.RetryAfter))
			if !l.Allow("k") {
				t.Fatalf("key still locked after its RetryAfter %v", dd.RetryAfter)
			}
		})
	}
}

// The same mistake on the engine's own clock (no Config.Clock): the key
// says it recovers within two Windows, and does.
func TestWallClockTimeOnEngineClock(t *testing.T) {
	const W = 20 * time.Millisecond
	l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 1, Window: W})
	l.AllowAt("k", Time(time.Now().UnixNano()))
	d := l.Peek("k")
	if d.Allowed || d.RetryAfter > 2*W+time.Millisecond {
		t.Fatalf("Peek: %+v, want a RetryAfter of at most two Windows", d)
	}
	deadline := time.Now().Add(time.Minute) // a bound on the test only
	for !l.Allow("k") {
		if time.Now().After(deadline) {
			t.Fatalf("key still locked a minute later (RetryAfter said %v)", d.RetryAfter)
		}
		time.Sleep(time.Millisecond)
	}
}

// A zero Config.Algorithm means DefaultAlgorithm, SlidingCounter, and
// Config() says so.
func TestZeroAlgorithmIsSlidingCounter(t *testing.T) {
	l := newLimiter(t, Config{Limit: 2, Window: time.Second, Clock: &fakeClock{}})
	if got := l.Config().Algorithm; got != SlidingCounter || DefaultAlgorithm != SlidingCounter {
		t.Fatalf("Config().Algorithm = %v, want SlidingCounter", got)
	}
	if _, ok := l.impl.(*counterAlgo); !ok {
		t.Fatal("a zero Algorithm did not build SlidingCounter's table")
	}
	if !l.Allow("k") || !l.Allow("k") || l.Allow("k") {
		t.Fatal("Limit 2 not enforced")
	}
}

// Calls that no wait can admit (n <= 0, n > Limit) say so with RetryAfter
// Never, not 0 (a client told "retry after 0" hammers), record nothing,
// and count in Stats.Invalid, not Stats.Denied.
func TestNeverAdmissibleCallsSayNever(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 5, Window: time.Second, Clock: &fakeClock{}})
		for _, n := range []int{0, -1, 6, 1 << 40} {
			if d := l.AllowN("k", n); d.Allowed || d.RetryAfter != Never || d.Admissible() {
				t.Errorf("%v: AllowN(%d) = %+v, want RetryAfter Never", a, n, d)
			}
		}
		l.AllowN("k", 5)
		d := l.AllowN("k", 1)
		if d.Allowed || !d.Admissible() || d.RetryAfter <= 0 {
			t.Errorf("%v: a full window's denial = %+v, want a finite RetryAfter", a, d)
		}
		if st := l.Stats(); st.Invalid != 4 || st.Denied != 1 || st.Allowed != 1 {
			t.Errorf("%v: stats %+v, want 4 invalid, 1 denied, 1 allowed", a, st)
		}
	}
}

// neverBackend answers every call as one that can never be admitted,
// within its Limit (as a backend with per-key limits may).
type neverBackend struct{ RateLimiter }

func (neverBackend) AllowNContext(context.Context, string, int) (Decision, error) {
	return Decision{Limit: 10, RetryAfter: Never}, nil
}

// WaitN gives up at once on a decision with RetryAfter Never, whatever n
// and Limit say: it neither sleeps "forever" nor reports a deadline.
func TestWaitNStopsOnNever(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := WaitN(ctx, neverBackend{}, "k", 1); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("WaitN = %v, want ErrExceedsLimit", err)
	}
	l := newLimiter(t, Config{Limit: 2, Window: time.Second})
	if err := l.WaitN(ctx, "k", 3); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("WaitN(3) on Limit 2 = %v, want ErrExceedsLimit", err)
	}
}
