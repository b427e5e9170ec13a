package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Below MaxLimit GCRA's clock ticks once per MaxLimit/Limit real ns (1 ms
// here): a request just before a tick must not date the key's bucket a
// tick early. Two requests of a key with Burst 1 at 1 per second are
// admitted at least a second apart, whatever their offsets from the ticks,
// on a new key (first request creates it) and on an existing one, after
// SetLimit lowered the limit as well as with MaxLimit above Limit at New;
// and each denial's RetryAfter is exactly when the next is admitted.
// (Reproduces a reviewer's case: with the clock rounded down, a request 1
// ns before a tick and another 1 ns after it were both admitted.)
func TestGCRABelowMaxLimitNeverAdmitsTwoWithinAnInterval(t *testing.T) {
	for _, viaSetLimit := range []bool{false, true} {
		t.Run(fmt.Sprintf("setLimit=%v", viaSetLimit), func(t *testing.T) {
			clk := &fakeClock{}
			clk.t.Store(1e12)
			limit := 1
			if viaSetLimit {
				limit = 1_000_000
			}
			l := newLimiter(t, Config{Algorithm: GCRA, Limit: limit, Burst: 1, MaxLimit: 1_000_000, Window: time.Second, Clock: clk})
			if viaSetLimit {
				clk.t.Add(123_456_789)
				if err := l.SetLimit(1); err != nil {
					t.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(7, 1))
			for i := 0; i < 300; i++ {
				key := fmt.Sprintf("k%d", i)
				if i%2 == 1 { // an existing key with a full bucket
					if !l.Allow(key) {
						t.Fatalf("%s: a new key denied", key)
					}
					clk.t.Add(int64(3 * time.Second))
				}
				// Land 1 ns before, at or just after a tick of the clock.
				clk.t.Add(int64(time.Millisecond) - clk.t.Load()%int64(time.Millisecond) - 1 + rng.Int64N(3))
				t1 := clk.t.Load()
				if !l.Allow(key) {
					t.Fatalf("%s: denied on a full bucket", key)
				}
				clk.t.Add(1)
				d := l.AllowN(key, 1)
				if d.Allowed {
					t.Fatalf("%s: two admitted 1 ns apart with Burst 1", key)
				}
				clk.t.Store(t1 + int64(time.Second) - 1 - rng.Int64N(2*int64(time.Millisecond)))
				if d = l.AllowN(key, 1); d.Allowed {
					t.Fatalf("%s: admitted %v after the previous one at 1 per second", key, time.Duration(clk.t.Load()-t1))
				}
				at := clk.t.Load() + int64(d.RetryAfter)
				if at < t1+int64(time.Second) {
					t.Fatalf("%s: RetryAfter points %v after the previous admission", key, time.Duration(at-t1))
				}
				clk.t.Store(at - 1)
				if l.Allow(key) {
					t.Fatalf("%s: admitted 1 ns before RetryAfter", key)
				}
				clk.t.Store(at)
				if !l.Allow(key) {
					t.Fatalf("%s: denied at RetryAfter", key)
				}
				// The rate is kept to within 1 %.
				if late := at - t1 - int64(time.Second); late > int64(10*time.Millisecond) {
					t.Fatalf("%s: the next admitted %v late", key, time.Duration(late))
				}
			}
		})
	}
}

// GCRA counts a request as Window/MaxLimit ns of its clock, rounded up;
// New rejects a MaxLimit so fine for the Window that the rounding would
// cost more than 1 % of the rate (600M per second rounds to 2 ns: a limit
// of 10 per second would admit 8.3), naming MaxLimit.
func TestNewRejectsGCRAMaxLimitTooFineForWindow(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: GCRA, Limit: 10, MaxLimit: 600_000_000, Window: time.Second},
		{Algorithm: GCRA, Limit: 10, MaxLimit: 5_000_001, Window: time.Second},
		{Algorithm: GCRA, Limit: 1000, Window: 100 * time.Microsecond},
	} {
		l, err := New(c)
		if err == nil {
			l.Close()
			t.Fatalf("New(%+v) accepted", c)
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Config.MaxLimit") {
			t.Fatalf("New(%+v): %v, want ErrInvalidConfig naming Config.MaxLimit", c, err)
		}
	}
	newLimiter(t, Config{Algorithm: GCRA, Limit: 10, MaxLimit: 5_000_000, Window: time.Second}) // 200 ns: accepted
}

// GCRA's times end at gcraMaxTime (2^59 ns, about 18 years after the
// epoch): past it the clock reads no further, so a drained key is never
// admitted again. Its denials say RetryAfter Never, never 0 (a Wait or a
// client honouring Retry-After would spin).
func TestGCRAPastTheEndOfTimeDeniesWithRetryAfterNever(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 1, Burst: 1, Window: time.Second, Clock: clk})
	clk.t.Store(gcraMaxTime + int64(time.Hour))
	if !l.Allow("k") {
		t.Fatal("first request denied")
	}
	for i := 0; i < 3; i++ {
		d := l.AllowN("k", 1)
		if d.Allowed || d.RetryAfter != Never {
			t.Fatalf("request %d past the end of time: %+v, want denied with RetryAfter Never", i+2, d)
		}
		clk.t.Add(int64(time.Hour))
	}
	if d := l.Peek("k"); d.Allowed || d.RetryAfter != Never {
		t.Fatalf("Peek past the end of time: %+v, want RetryAfter Never", d)
	}
}
