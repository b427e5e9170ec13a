package engine

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A per-call limit's count does not depend on the limit in force: a key
// that took 10 of its per-call bucket of 20 gets exactly 10 more after
// SetLimit raises or lowers the limit in force (with the default Burst a
// per-call bucket is the per-call limit). Before, per-call keys counted on
// the clock whose speed follows the limit in force: after SetLimit(20)
// they got 15 more (25 at one instant from a bucket of 20), after
// SetLimit(5) none.
func TestGCRAPerCallLimitKeepsItsCountAcrossSetLimit(t *testing.T) {
	for _, next := range []int{20, 5, 100, 1} {
		t.Run(fmt.Sprintf("SetLimit(%d)", next), func(t *testing.T) {
			clk := &fakeClock{}
			clk.t.Store(1e12)
			l := newLimiter(t, Config{Algorithm: GCRA, Limit: 10, MaxLimit: 100, Window: time.Second, Clock: clk})
			for i := 0; i < 10; i++ {
				if d := l.AllowNWithLimit("premium", 1, 20); !d.Allowed || d.Limit != 20 {
					t.Fatalf("request %d of a per-call bucket of 20: %+v", i+1, d)
				}
			}
			if err := l.SetLimit(next); err != nil {
				t.Fatal(err)
			}
			n := 0
			for l.AllowNWithLimit("premium", 1, 20).Allowed {
				n++
			}
			if n != 10 {
				t.Fatalf("after SetLimit(%d): %d more admitted, want 10", next, n)
			}
			// And it refills at 20 per second: one more 50 ms later.
			d := l.AllowNWithLimit("premium", 1, 20)
			if d.Allowed || d.RetryAfter != 50*time.Millisecond {
				t.Fatalf("drained per-call key: %+v, want RetryAfter 50ms", d)
			}
		})
	}
}

// A per-call bucket deeper than GCRA's deepest (gcra.MaxDepth) is cut to
// it, and Decision.Limit says so: n above it can never be admitted, on a
// new key and on an existing one alike (RetryAfter Never, counted as
// Invalid), instead of being admitted once on a new key and then denied
// with a RetryAfter that never comes.
func TestGCRAPerCallBucketAboveMaxDepthIsCutToIt(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 1, MaxLimit: 1000, Burst: MaxGCRALimit, Window: time.Second, Clock: clk})
	const huge = 600_000_000_000_000_000 // above the deepest bucket, in 1 ns tokens
	if d := l.AllowNWithLimit("existing", 1, MaxGCRALimit); !d.Allowed {
		t.Fatalf("first request of a key: %+v", d)
	}
	for _, key := range []string{"new", "existing"} {
		d := l.AllowNWithLimit(key, huge, MaxGCRALimit)
		if d.Allowed || d.RetryAfter != Never || d.Limit != gcraMaxDepth {
			t.Fatalf("%s key, n = %d above the deepest bucket: %+v, want denied with RetryAfter Never and Limit gcra.MaxDepth (the cut bucket in 1 ns tokens)", key, huge, d)
		}
	}
	if s := l.Stats(); s.Invalid != 2 || s.Denied != 0 {
		t.Fatalf("stats %+v, want 2 Invalid and no Denied", s)
	}
	if d := l.AllowNWithLimit("fresh", gcraMaxDepth, MaxGCRALimit); !d.Allowed {
		t.Fatalf("a full cut bucket at once: %+v", d)
	}
}

// Under concurrent load with SetLimit changing the limit in force all the
// while, a per-call key at a frozen clock admits exactly its bucket (20):
// no admission lost or counted twice across the changes. Then, at a fixed
// limit, a key used both with and without a per-call limit at once (its
// word moved between the clocks under the race) admits at most both
// buckets (each conversion keeps the key's debt as time, rounded up).
func TestGCRAPerCallCountExactUnderConcurrentSetLimit(t *testing.T) {
	clk := &fakeClock{}
	clk.t.Store(1e12)
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 10, MaxLimit: 100, Window: time.Second, Clock: clk})
	var admitted, mixed atomic.Int64
	var stop atomic.Bool
	var setter sync.WaitGroup
	setter.Add(1)
	go func() {
		defer setter.Done()
		for i := 0; !stop.Load(); i++ {
			if err := l.SetLimit(1 + i*7%100); err != nil {
				t.Error(err)
				return
			}
			runtime.Gosched()
		}
	}()
	hammer := func(f func(i int)) {
		var workers sync.WaitGroup
		for w := 0; w < 4; w++ {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for i := 0; i < 2000; i++ {
					f(i)
				}
			}()
		}
		workers.Wait()
	}
	hammer(func(int) {
		if l.AllowNWithLimit("pc", 1, 20).Allowed {
			admitted.Add(1)
		}
	})
	stop.Store(true)
	setter.Wait()
	if n := admitted.Load(); n != 20 {
		t.Fatalf("per-call key admitted %d at one instant across SetLimit, want its bucket of 20", n)
	}
	if err := l.SetLimit(100); err != nil {
		t.Fatal(err)
	}
	hammer(func(i int) {
		var d Decision
		if i%2 == 0 {
			d = l.AllowNWithLimit("mixed", 1, 20)
		} else {
			d = l.AllowN("mixed", 1)
		}
		if d.Allowed {
			mixed.Add(1)
		}
		l.Peek("mixed")
	})
	if n := mixed.Load(); n > 20+100 {
		t.Fatalf("mixed key admitted %d at one instant, more than both buckets", n)
	}
}
