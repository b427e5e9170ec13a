package engine

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/gcra"
)

// Burst b and Limit L per Window W: b at once from a fresh key, then one
// every W/L, with exact RetryAfter; Decision.Limit is the bucket.
func TestGCRABurstThenOnePerInterval(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 10, Burst: 4, Window: time.Second, Clock: clk})
	for i := 0; i < 4; i++ {
		d := l.AllowN("k", 1)
		if !d.Allowed || d.Limit != 4 || d.Remaining != 3-i {
			t.Fatalf("request %d of the burst: %+v", i+1, d)
		}
	}
	d := l.AllowN("k", 1)
	if d.Allowed || d.RetryAfter != 100*time.Millisecond || d.ResetAfter != 400*time.Millisecond {
		t.Fatalf("5th at once: %+v, want denied, RetryAfter 100ms, ResetAfter 400ms", d)
	}
	clk.t.Add(int64(100*time.Millisecond) - 1)
	if l.Allow("k") {
		t.Fatal("admitted 1 ns before the interval")
	}
	clk.t.Add(1)
	if !l.Allow("k") || l.Allow("k") {
		t.Fatal("not exactly one admitted after one interval")
	}
	// All or none: 3 at once with 2 free is denied, and says when 3 fit.
	clk.t.Add(int64(200 * time.Millisecond))
	if d := l.AllowN("k", 3); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("3 with 2 free: %+v, want denied for 100ms", d)
	}
	if d := l.AllowN("k", 5); d.RetryAfter != Never || d.Limit != 4 {
		t.Fatalf("n above the burst: %+v, want Never", d)
	}
	if p := l.Peek("k"); !p.Allowed || p.Remaining != 2 {
		t.Fatalf("Peek: %+v, want allowed with 2 remaining", p)
	}
}

// Default Burst is Limit; the bucket follows SetLimit until SetBurst.
func TestGCRADefaultBurstFollowsLimit(t *testing.T) {
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 5, MaxLimit: 20, Window: time.Second, Clock: &fakeClock{}})
	if c := l.Config(); c.Burst != 5 {
		t.Fatalf("default Burst = %d, want Limit 5", c.Burst)
	}
	if err := l.SetLimit(20); err != nil {
		t.Fatal(err)
	}
	if c := l.Config(); c.Burst != 20 || c.Limit != 20 {
		t.Fatalf("after SetLimit(20): %+v", c)
	}
	if err := l.SetBurst(2); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit(10); err != nil {
		t.Fatal(err)
	}
	if c := l.Config(); c.Burst != 2 || c.Limit != 10 {
		t.Fatalf("after SetBurst(2), SetLimit(10): Limit %d Burst %d, want 10 and 2", c.Limit, c.Burst)
	}
	n := 0
	for l.Allow("k") {
		n++
	}
	if n != 2 {
		t.Fatalf("%d admitted at once with Burst 2", n)
	}
}

// SetLimit changes the rate from now on: after SetLimit(2) (from 10 per
// second) a drained key refills one request per 500 ms. Below MaxLimit the
// clock runs slower by 1/2^20 (it pays for rounding the clock down, see
// gcraSpeed), so the waits are 4.5 s and 500 ms, late by at most that part.
func TestGCRASetLimitChangesTheRate(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 10, Window: time.Second, Clock: clk})
	for l.Allow("k") {
	}
	if err := l.SetLimit(2); err != nil {
		t.Fatal(err)
	}
	within := func(got, want time.Duration) bool { return got >= want && got <= want+want>>19 }
	// The key's debt is its 10 requests; the bucket is now 2: it must pay
	// 8 plus one at 2 per second before the next: 4.5 s.
	d := l.AllowN("k", 1)
	if d.Allowed || !within(d.RetryAfter, 4500*time.Millisecond) {
		t.Fatalf("after SetLimit(2) on a drained key of 10: %+v, want RetryAfter 4.5s", d)
	}
	clk.t.Add(int64(d.RetryAfter))
	if !l.Allow("k") {
		t.Fatal("denied at RetryAfter")
	}
	d = l.AllowN("k", 1)
	if d.Allowed || !within(d.RetryAfter, 500*time.Millisecond) {
		t.Fatalf("after the one admitted at RetryAfter: %+v, want denied for 500 ms", d)
	}
	clk.t.Add(int64(d.RetryAfter) - 1)
	if l.Allow("k") {
		t.Fatal("admitted 1 ns before RetryAfter")
	}
	clk.t.Add(1)
	if !l.Allow("k") {
		t.Fatal("denied one interval (500 ms) later")
	}
}

func TestGCRASetBurstRejectsOutOfRange(t *testing.T) {
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 5, Window: time.Second, Clock: &fakeClock{}})
	for _, b := range []int{0, -1, MaxGCRALimit + 1} {
		if err := l.SetBurst(b); !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "burst") {
			t.Fatalf("SetBurst(%d) = %v, want ErrInvalidLimit naming the burst", b, err)
		}
	}
	long := newLimiter(t, Config{Algorithm: GCRA, Limit: 1, Window: MaxWindow, Clock: &fakeClock{}})
	if err := long.SetBurst(1000); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("SetBurst of a bucket of 1000 years = %v, want ErrInvalidLimit", err)
	}
}

func TestNewRejectsBadGCRAConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Algorithm: GCRA, Limit: 5, Burst: -1, Window: time.Second}, "Config.Burst"},
		{Config{Algorithm: GCRA, Limit: 5, Burst: MaxGCRALimit + 1, Window: time.Second}, "Config.Burst"},
		{Config{Algorithm: GCRA, Limit: 1, Burst: 1000, Window: MaxWindow}, "Config.Burst"},
		{Config{Algorithm: GCRA, Limit: 10, Window: 5 * time.Nanosecond}, "Config.Window"},
		{Config{Algorithm: GCRA, Limit: MaxGCRALimit + 1, Window: time.Hour}, "Config.Limit"},
	} {
		l, err := New(tc.cfg)
		if err == nil {
			l.Close()
			t.Fatalf("New(%+v) accepted", tc.cfg)
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("New(%+v): %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestParseAlgorithmCoversEveryAlgorithm(t *testing.T) {
	for _, a := range Algorithms() {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	for s, want := range map[string]Algorithm{"sliding_log": SlidingLog, "exact": SlidingLog, "approximate": SlidingCounter,
		"sliding_counter": SlidingCounter, "gcra": GCRA, "token_bucket": GCRA} {
		if got, err := ParseAlgorithm(s); err != nil || got != want {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseAlgorithm("leaky"); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "gcra") {
		t.Fatalf("ParseAlgorithm(unknown) = %v, want an error listing the algorithms", err)
	}
}

// A key is idle when its bucket is full: the sweep frees it then, not
// before, and a freed key restarts with a full bucket.
func TestGCRASweepFreesKeysWithFullBuckets(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 4, Window: time.Second, Clock: clk, SweepInterval: time.Hour})
	for i := 0; i < 100; i++ {
		l.AllowN(strconv.Itoa(i), 2) // TAT 500 ms
	}
	clk.t.Store(int64(500*time.Millisecond) - 1)
	if n := l.Sweep(); n != 0 {
		t.Fatalf("swept %d keys whose buckets are not full", n)
	}
	clk.t.Store(int64(500 * time.Millisecond))
	if n := l.Sweep(); n != 100 || l.Len() != 0 {
		t.Fatalf("swept %d, Len %d; want 100 and 0", n, l.Len())
	}
	if d := l.AllowN("7", 4); !d.Allowed {
		t.Fatalf("a freed key did not restart full: %+v", d)
	}
}

// Reset marks the bucket full; a key dated ahead (an early AllowAt) is
// reset too, and a request of the old key paused before its CAS cannot
// write into the word of a key that later takes its slot.
func TestGCRAResetDefeatsPausedCAS(t *testing.T) {
	const W = time.Second
	clk, l := startedClock(t, Config{Algorithm: GCRA, Limit: 5, Window: W, Shards: 1, MaxKeys: 100, SweepInterval: time.Hour})
	flat := l.impl.(*gcraAlgo).flat
	if d := l.AllowNAt("old", 5, Time(clk.Now()+int64(W))); !d.Allowed { // dated one Window ahead
		t.Fatalf("old key's request denied: %+v", d)
	}
	_, recA := flat.Lookup(flat.Hash("old"))
	paused := recA.State.Load()
	l.Reset("old")
	if d := l.AllowN("old", 5); !d.Allowed {
		t.Fatalf("after Reset the bucket is not full: %+v", d)
	}
	l.Reset("old")
	for i := 0; l.Len() > 0; i++ {
		if i > 40 {
			t.Fatalf("Reset key never freed: %+v", l.Stats())
		}
		clk.t.Add(int64(W / 4))
		l.Sweep()
	}
	var hB uint64
	for i := 0; ; i++ {
		if i > 6 {
			t.Fatal("no new key reused the old key's slot")
		}
		key := "new-" + strconv.Itoa(i)
		if d := l.AllowAt(key, Time(clk.Now())); !d.Allowed {
			t.Fatalf("new key refused: %+v", d)
		}
		if _, rec := flat.Lookup(flat.Hash(key)); rec == recA {
			hB = flat.Hash(key)
			break
		}
	}
	at, _ := gcra.Unpack(paused)
	if recA.State.CompareAndSwap(paused, gcra.Pack(at+1, false)) {
		t.Fatalf("a request of the reset key wrote into the new key's state (word %#x)", paused)
	}
	if recA.Hash.Load() != hB {
		t.Fatal("slot changed hands")
	}
}

// Decisions on an existing key allocate nothing, through every entry point.
func TestGCRAZeroAllocs(t *testing.T) {
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 100, Window: time.Second})
	l.Allow("k")
	now := l.Now()
	keys := []string{"k", "k"}
	dst := make([]bool, 0, 2)
	if n := testing.AllocsPerRun(200, func() {
		l.Allow("k")
		l.AllowN("k", 2)
		l.AllowNWithLimit("k", 1, 50)
		l.AllowAt("k", now)
		l.Peek("k")
		dst = l.AllowMany(dst[:0], keys)
	}); n != 0 {
		t.Fatalf("%v allocations per round", n)
	}
}

// SetLimit and SetBurst while keys are created, decided, reset and swept:
// no race, no panic, and the limit in force is one that was set.
func TestGCRASetLimitRacesWithTheSweep(t *testing.T) {
	l := newLimiter(t, Config{Algorithm: GCRA, Limit: 50, MaxLimit: 100, Window: time.Millisecond, SweepInterval: time.Millisecond})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := strconv.Itoa(i % 500)
				l.AllowN(k, 1+i%3)
				if i%50 == 0 {
					l.Reset(k)
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if err := l.SetLimit(1 + i%100); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := l.SetBurst(1 + i%30); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if c := l.Config(); c.Limit != 100 {
		t.Fatalf("limit in force %d, want the last set (100)", c.Limit)
	}
}

func TestAlgorithmMaxLimitIsNewsBound(t *testing.T) {
	for _, a := range Algorithms() {
		max := a.MaxLimit()
		l, err := New(Config{Algorithm: a, Limit: max, Window: MaxWindow, MaxMemory: 1 << 40})
		if err != nil {
			t.Fatalf("%v: Limit = MaxLimit() %d refused: %v", a, max, err)
		}
		l.Close()
		if _, err := New(Config{Algorithm: a, Limit: max + 1, Window: MaxWindow}); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%v: Limit = MaxLimit()+1 accepted", a)
		}
	}
	if Algorithm(99).MaxLimit() != 0 {
		t.Fatal("an unknown Algorithm has a MaxLimit")
	}
}
