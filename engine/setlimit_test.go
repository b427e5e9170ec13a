package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// At a frozen clock, a key at 4 of 5 gets exactly 6 more after
// SetLimit(10), however many goroutines race for them while the limit
// changes (several times) under them: a lost admission would leave fewer,
// one counted twice (or one decided under a limit that was never in
// force) more.
func TestSetLimitKeepsCountsUnderConcurrentLoad(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			for round := 0; round < 20; round++ {
				clk := &fakeClock{}
				clk.t.Store(int64(time.Hour))
				l := newLimiter(t, Config{Algorithm: a, Limit: 5, MaxLimit: 12, Window: time.Minute, Clock: clk})
				for i := 0; i < 4; i++ {
					if !l.Allow("k") {
						t.Fatalf("request %d of the first 4 denied", i)
					}
				}
				var admitted atomic.Int64
				var changed atomic.Bool
				var wg sync.WaitGroup
				for g := 0; g < 8; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							done := changed.Load()
							if l.Allow("k") {
								admitted.Add(1)
							} else if done {
								return // denied after the last change: the key is full
							}
						}
					}()
				}
				// Limits in force go 5 -> 10 -> 7 -> 12: the count only
				// grows, and no limit above 12 is ever in force, so the key
				// ends with exactly 12.
				for _, lim := range []int{10, 7, 12} {
					if err := l.SetLimit(lim); err != nil {
						t.Fatal(err)
					}
				}
				changed.Store(true)
				wg.Wait()
				if got := admitted.Load(); got != 8 {
					t.Fatalf("round %d: %d admitted after 4 of 5 and limits 10, 7, 12; want exactly 8", round, got)
				}
				if d := l.Peek("k"); d.Allowed || d.Remaining != 0 || d.Limit != 12 {
					t.Fatalf("round %d: Peek after = %+v, want a full key under limit 12", round, d)
				}
			}
		})
	}
}

// The single-threaded story: 4 of 5, SetLimit(10), 6 more, not 10.
func TestSetLimitRaisedGivesTheDifference(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			clk := &fakeClock{}
			clk.t.Store(int64(time.Hour))
			l := newLimiter(t, Config{Algorithm: a, Limit: 5, MaxLimit: 10, Window: time.Minute, Clock: clk})
			for i := 0; i < 4; i++ {
				l.Allow("k")
			}
			if err := l.SetLimit(10); err != nil {
				t.Fatal(err)
			}
			if got := l.Config().Limit; got != 10 {
				t.Fatalf("Config().Limit = %d after SetLimit(10)", got)
			}
			n := 0
			for l.Allow("k") {
				n++
			}
			if n != 6 {
				t.Fatalf("%d admitted after SetLimit(10) at 4 of 5, want 6", n)
			}
		})
	}
}

// A key above a lowered limit is denied until its window holds fewer than
// the new limit; the exact log says exactly when.
func TestSetLimitLoweredLogRetryAfterIsExact(t *testing.T) {
	clk := &fakeClock{}
	clk.t.Store(int64(time.Hour))
	l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 10, Window: time.Second, Clock: clk})
	start := clk.Now()
	for i := 0; i < 8; i++ { // one request every 100 ms: 0, 100, ..., 700 ms
		clk.t.Store(start + int64(i)*int64(100*time.Millisecond))
		if !l.Allow("k") {
			t.Fatalf("request %d denied", i)
		}
	}
	if err := l.SetLimit(3); err != nil {
		t.Fatal(err)
	}
	clk.t.Store(start + int64(800*time.Millisecond))
	d := l.AllowN("k", 1)
	// 8 in the window, limit 3: the 6th oldest (at 500 ms) must leave, at
	// 500 ms + 1 s + 1 tick.
	want := time.Duration(start+int64(1500*time.Millisecond)+int64(l.Resolution())) - time.Duration(clk.Now())
	if d.Allowed || d.RetryAfter != want || d.Limit != 3 {
		t.Fatalf("after SetLimit(3) with 8 in the window: %+v, want denied with RetryAfter %v", d, want)
	}
	clk.t.Add(int64(d.RetryAfter) - 1)
	if l.Allow("k") {
		t.Fatal("admitted one tick before RetryAfter")
	}
	clk.t.Add(1)
	if !l.Allow("k") {
		t.Fatal("denied at RetryAfter")
	}
}

func TestSetLimitRejectsOutOfRangeNamingTheParameter(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			l := newLimiter(t, Config{Algorithm: a, Limit: 5, MaxLimit: 8, Window: time.Second, Clock: &fakeClock{}})
			for _, v := range []int{0, -1, 9} {
				err := l.SetLimit(v)
				if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "MaxLimit") {
					t.Fatalf("SetLimit(%d) = %v, want ErrInvalidLimit naming MaxLimit", v, err)
				}
			}
			if got := l.Config().Limit; got != 5 {
				t.Fatalf("a refused SetLimit changed the limit to %d", got)
			}
		})
	}
}

func TestSetBurstRefusedByWindowAlgorithms(t *testing.T) {
	for _, a := range []Algorithm{SlidingLog, SlidingCounter} {
		l := newLimiter(t, Config{Algorithm: a, Limit: 5, Window: time.Second, Clock: &fakeClock{}})
		if err := l.SetBurst(3); !errors.Is(err, ErrNoBurst) {
			t.Fatalf("%v: SetBurst = %v, want ErrNoBurst", a, err)
		}
	}
}

func TestNewRejectsBadMaxLimitAndBurst(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Algorithm: SlidingLog, Limit: 5, MaxLimit: 4, Window: time.Second}, "Config.MaxLimit"},
		{Config{Algorithm: SlidingLog, Limit: 5, MaxLimit: MaxLogLimit + 1, Window: time.Second}, "Config.MaxLimit"},
		{Config{Algorithm: SlidingCounter, Limit: 5, MaxLimit: -1, Window: time.Second}, "Config.MaxLimit"},
		{Config{Algorithm: SlidingCounter, Limit: 5, Burst: 7, Window: time.Second}, "Config.Burst"},
		{Config{Algorithm: SlidingLog, Limit: 5, Burst: -1, Window: time.Second}, "Config.Burst"},
	} {
		t.Run(fmt.Sprint(tc.cfg.Algorithm, tc.field), func(t *testing.T) {
			l, err := New(tc.cfg)
			if err == nil {
				l.Close()
				t.Fatalf("New(%+v) accepted", tc.cfg)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("New: %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

// SlidingLog's per-call limits go up to MaxLimit (the ring's size), not
// only up to Limit.
func TestLogPerCallLimitUpToMaxLimit(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, MaxLimit: 6, Window: time.Second, Clock: clk})
	n := 0
	for l.AllowNWithLimit("k", 1, 6).Allowed {
		n++
	}
	if n != 6 {
		t.Fatalf("%d admitted under a per-call limit of 6 (MaxLimit 6), want 6", n)
	}
	if d := l.AllowNWithLimit("k", 1, 7); d.RetryAfter != Never {
		t.Fatalf("a per-call limit above MaxLimit: %+v, want Never", d)
	}
}
