package peers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/bench/keyset"
)

// Every implementation must enforce the profile the benchmarks give it, or
// the comparison compares nothing: Limit requests pass, then denials.
func TestEveryImplEnforcesTheLimit(t *testing.T) {
	p := keyset.HotDenied
	for _, im := range Impls() {
		t.Run(im.Name, func(t *testing.T) {
			l, err := im.New(p, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			allowed := 0
			if l.Allow("hot") {
				allowed++
			}
			if tr, ok := l.(Tracker); ok {
				// Let an asynchronous store (ristretto) apply the first Set.
				if got := tr.Tracked([]string{"hot"}); got < 1 {
					t.Fatalf("key not tracked after its first request")
				}
			}
			for range 2*p.Limit - 1 {
				if l.Allow("hot") {
					allowed++
				}
			}
			if allowed != p.Limit {
				t.Fatalf("allowed %d of %d requests, want exactly Limit=%d", allowed, 2*p.Limit, p.Limit)
			}
			if pk, ok := l.(Peeker); ok && pk.Peek("hot") {
				t.Errorf("Peek allows a key that is over its limit")
			}
			if pk, ok := l.(Peeker); ok && !pk.Peek("other") {
				t.Errorf("Peek denies a fresh key")
			}
			if an, ok := l.(AllowNer); ok {
				if !an.AllowN("batch", p.Limit) {
					t.Errorf("AllowN(Limit) denied on a fresh key")
				}
			}
		})
	}
}

// Every implementation is used from many goroutines at once in
// BenchmarkAllowParallel; this is that path under -race.
func TestEveryImplIsSafeForConcurrentUse(t *testing.T) {
	for _, im := range Impls() {
		t.Run(im.Name, func(t *testing.T) {
			l, err := im.New(keyset.Keyed, 1000)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var wg sync.WaitGroup
			allowed := make([]int, 4)
			for g := range 4 {
				wg.Go(func() {
					for i := range 500 {
						key := fmt.Sprint("k", i%50)
						if l.Allow(key) {
							allowed[g]++
						}
						if an, ok := l.(AllowNer); ok {
							an.AllowN(key, 2)
						}
						if pk, ok := l.(Peeker); ok {
							pk.Peek(key)
						}
						l.Allow("hot")
					}
				})
			}
			wg.Wait()
			total := allowed[0] + allowed[1] + allowed[2] + allowed[3]
			if total == 0 {
				t.Fatal("no request was allowed")
			}
		})
	}
}

func TestCounterWordSteps(t *testing.T) {
	const w = int64(100 * time.Millisecond)
	var c counterWord
	steps := []struct {
		now     int64
		n       uint64
		consume bool
		want    bool
	}{
		{0, 4, true, true},         // window 0: cur=4
		{50e6, 1, true, false},     // 4+1 > limit 4
		{50e6, 1, false, false},    // peek agrees
		{w + 50e6, 2, true, true},  // window 1, half-way: 4*0.5 + 0 + 2 = 4
		{w + 50e6, 1, true, false}, // 4*0.5 + 2 + 1 = 5 > 4
		{w + 99e6, 1, true, true},  // 4*0.01 truncated to 0, + 2 + 1 = 3
		{3*w + 1, 4, true, true},   // two windows later: everything expired
		{3*w + 1, 1, false, false}, // full again
	}
	for i, s := range steps {
		if got := c.decide(s.now, w, 4, s.n, s.consume); got != s.want {
			t.Fatalf("step %d %+v: got %v", i, s, got)
		}
	}
}
