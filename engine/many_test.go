package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// AllowMany answers exactly what a loop of Allow at the same moment
// answers, duplicates and new keys included, across groups, with time
// moving between batches (so keys expire, go idle and are reclaimed).
func TestAllowManyMatchesAllow(t *testing.T) {
	for _, a := range algorithms {
		for _, pen := range []bool{false, true} {
			ca, cb := &fakeClock{}, &fakeClock{}
			cfg := Config{Algorithm: a, Limit: 3, Window: 10 * time.Millisecond, Penalty: pen, MaxKeys: 1000, Shards: 4, SweepInterval: time.Hour}
			cfg.Clock = ca
			la := newLimiter(t, cfg)
			cfg.Clock = cb
			lb := newLimiter(t, cfg)
			r := rand.New(rand.NewPCG(uint64(a), 7))
			var dst []bool
			for round := 0; round < 400; round++ {
				step := int64(r.IntN(4000)) * int64(time.Microsecond)
				ca.t.Add(step)
				cb.t.Add(step)
				if round%50 == 49 {
					la.Sweep()
					lb.Sweep()
				}
				keys := make([]string, r.IntN(3*manyGroup+2))
				for i := range keys {
					keys[i] = fmt.Sprint("k", r.IntN(500)) // duplicates within a batch; below the bound, so both limiters (different hash seeds) track every key
				}
				dst = la.AllowMany(dst[:0], keys)
				if len(dst) != len(keys) {
					t.Fatalf("%v: %d answers for %d keys", a, len(dst), len(keys))
				}
				for i, k := range keys {
					if want := lb.Allow(k); dst[i] != want {
						t.Fatalf("%v penalty=%v round %d: key %d (%s): AllowMany %v, Allow %v", a, pen, round, i, k, dst[i], want)
					}
				}
			}
			sa, sb := la.Stats(), lb.Stats()
			if sa.Allowed != sb.Allowed || sa.Denied != sb.Denied || sa.Keys != sb.Keys {
				t.Fatalf("%v: stats %+v vs %+v", a, sa, sb)
			}
		}
	}
}

// dst with room: no allocation; results are appended after what dst held.
func TestAllowManyAppendsWithoutAllocating(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 100, Window: time.Hour})
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = fmt.Sprint("key", i%7)
		}
		l.AllowMany(nil, keys) // create the keys
		dst := make([]bool, 1, 1+len(keys))
		dst[0] = false
		if n := testing.AllocsPerRun(100, func() { dst = l.AllowMany(dst[:1], keys) }); n != 0 {
			t.Fatalf("%v: %v allocs per AllowMany", a, n)
		}
		if len(dst) != 1+len(keys) || dst[0] {
			t.Fatalf("%v: dst = %v", a, dst)
		}
		if got := l.AllowMany(nil, nil); len(got) != 0 {
			t.Fatalf("%v: AllowMany of no keys = %v", a, got)
		}
	}
}

// Goroutines sending batches of a few shared keys at a frozen clock admit
// exactly Limit per key, under -race.
func TestAllowManyConcurrentExact(t *testing.T) {
	for _, a := range algorithms {
		clk := &fakeClock{}
		const limit = 50
		l := newLimiter(t, Config{Algorithm: a, Limit: limit, Window: time.Second, Clock: clk})
		keys := []string{"a", "b", "c", "d", "a", "c"}
		var mu sync.Mutex
		admitted := map[string]int{}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var dst []bool
				local := map[string]int{}
				for i := 0; i < 200; i++ {
					dst = l.AllowMany(dst[:0], keys)
					for j, ok := range dst {
						if ok {
							local[keys[j]]++
						}
					}
				}
				mu.Lock()
				for k, n := range local {
					admitted[k] += n
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, k := range []string{"a", "b", "c", "d"} {
			if admitted[k] != limit {
				t.Fatalf("%v: key %s admitted %d, want %d", a, k, admitted[k], limit)
			}
		}
	}
}
