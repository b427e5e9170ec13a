package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/shard"
)

// fakeClock is a Clock tests move by hand.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) Now() int64 { return c.t.Load() }

func newLimiter(t testing.TB, c Config) *Limiter {
	t.Helper()
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

var algorithms = Algorithms()

// windowAlgorithms are the algorithms with a sliding window (every one but
// GCRA, whose state is a bucket: its tests are in gcra_test.go).
var windowAlgorithms = []Algorithm{SlidingLog, SlidingCounter}

func TestNewRejectsBadConfig(t *testing.T) {
	ok := Config{Algorithm: SlidingLog, Limit: 10, Window: time.Second}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"limit zero", func(c *Config) { c.Limit = 0 }, "Config.Limit"},
		{"limit negative", func(c *Config) { c.Limit = -3 }, "Config.Limit"},
		{"window zero", func(c *Config) { c.Window = 0 }, "Config.Window"},
		{"window negative", func(c *Config) { c.Window = -time.Second }, "Config.Window"},
		{"algorithm unknown", func(c *Config) { c.Algorithm = 9 }, "Config.Algorithm"},
		{"log limit too big", func(c *Config) { c.Limit = MaxLogLimit + 1 }, "Config.Limit"},
		{"counter limit too big", func(c *Config) { c.Algorithm = SlidingCounter; c.Limit = MaxCounterLimit + 1 }, "Config.Limit"},
		{"memory negative", func(c *Config) { c.MaxMemory = -1 }, "Config.MaxMemory"},
		{"memory too small", func(c *Config) { c.MaxMemory = 1000 }, "Config.MaxMemory"},
		{"keys negative", func(c *Config) { c.MaxKeys = -1 }, "Config.MaxKeys"},
		{"sweep negative", func(c *Config) { c.SweepInterval = -1 }, "Config.SweepInterval"},
		{"shards", func(c *Config) { c.Shards = -1 }, "Config.Shards"},
		{"overflow", func(c *Config) { c.Overflow = 7 }, "Config.Overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			l, err := New(c)
			if err == nil {
				l.Close()
				t.Fatal("New accepted an invalid config")
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) || !strings.HasPrefix(err.Error(), "engine: ") {
				t.Fatalf("error %q: want engine: prefix, field %s, ErrInvalidConfig", err, tt.field)
			}
		})
	}
	for _, a := range algorithms {
		c := ok
		c.Algorithm = a
		newLimiter(t, c)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for s, want := range map[string]Algorithm{"log": SlidingLog, "sliding_log": SlidingLog, "counter": SlidingCounter, "sliding_counter": SlidingCounter} {
		if got, err := ParseAlgorithm(s); err != nil || got != want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", s, got, err)
		}
		if want.String() == "" {
			t.Error("empty String")
		}
	}
	if _, err := ParseAlgorithm("token"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParseAlgorithm(token) err = %v", err)
	}
}

// The conformance vector of the design documents.
func TestConformanceVector(t *testing.T) {
	for _, penalty := range []bool{false} {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Second, Clock: clk, Penalty: penalty})
		steps := []struct {
			ms    int64
			allow bool
		}{{0, true}, {999, true}, {1000, false}, {1001, true}, {1002, false}, {1999, false}, {2000, true}}
		for _, s := range steps {
			clk.t.Store(s.ms * 1e6)
			if got := l.AllowAt("bob", Time(s.ms*1e6)).Allowed; got != s.allow {
				t.Fatalf("request at %d ms: allowed=%v, want %v", s.ms, got, s.allow)
			}
		}
	}
}

// allowStep is one step of a step table.
type allowStep struct {
	at        time.Duration
	n         int
	allowed   bool
	remaining int
	retry     time.Duration
	reset     time.Duration
}

func runSteps(t *testing.T, l *Limiter, key string, steps []allowStep) {
	t.Helper()
	for i, s := range steps {
		if clk, ok := l.cfg.Clock.(*fakeClock); ok {
			clk.t.Store(int64(s.at)) // the steps' times are the clock's
		}
		d := l.AllowNAt(key, s.n, Time(s.at))
		want := Decision{Allowed: s.allowed, Limit: l.Config().Limit, Remaining: s.remaining, RetryAfter: s.retry, ResetAfter: s.reset}
		if d != want {
			t.Fatalf("step %d (AllowN(%d) at %v): got %+v, want %+v", i, s.n, s.at, d, want)
		}
	}
}

func TestLogDecisionFields(t *testing.T) {
	ms := time.Millisecond
	us := time.Microsecond
	l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 3, Window: time.Second, Clock: &fakeClock{}})
	runSteps(t, l, "k", []allowStep{
		{0, 1, true, 2, 0, time.Second + us},
		{100 * ms, 2, true, 0, 0, time.Second + us},
		{200 * ms, 1, false, 0, 800*ms + us, 900*ms + us},
		{300 * ms, 4, false, 0, Never, 0},                   // n > Limit: never passes
		{1000*ms + us, 1, true, 0, 0, time.Second + us},     // the entry at 0 left the window
		{1050 * ms, 2, false, 0, 50*ms + us, 950*ms + 2*us}, // 2nd oldest (100ms) leaves at 1100ms+1µs
	})
}

func TestCounterDecisionFields(t *testing.T) {
	ms := time.Millisecond
	l := newLimiter(t, Config{Algorithm: SlidingCounter, Limit: 4, Window: time.Second, Clock: &fakeClock{}})
	runSteps(t, l, "k", []allowStep{
		{0, 4, true, 0, 0, 2 * time.Second},
		{500 * ms, 1, false, 0, 500*ms + 250*ms, 1500 * ms}, // next window at e=250ms: 4*0.75 + 1 = 4
		{1250 * ms, 1, true, 0, 0, 1750 * ms},               // 4*0.75 + 1 = 4 <= 4
		{1500 * ms, 1, true, 0, 0, 1500 * ms},               // 4*0.5 + 1 + 1 = 4
	})
}

func TestNBounds(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 5, Window: time.Second})
		for _, n := range []int{0, -1, 6, 1 << 40} {
			if d := l.AllowN("k", n); d.Allowed || d.Limit != 5 {
				t.Errorf("%v: AllowN(%d) = %+v, want denied", a, n, d)
			}
		}
		if l.Len() != 0 {
			t.Errorf("%v: invalid n created state", a)
		}
		if d := l.AllowN("k", 5); !d.Allowed || d.Remaining != 0 {
			t.Errorf("%v: AllowN(Limit) on a new key = %+v", a, d)
		}
	}
}

func TestAnyKeyWorks(t *testing.T) {
	keys := []string{"", strings.Repeat("x", 1<<20), "\xff\xfe\x00bad utf-8", "日本"}
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 1, Window: time.Hour})
		for _, k := range keys {
			if !l.Allow(k) {
				t.Errorf("%v: first request of key len %d denied", a, len(k))
			}
			if l.Allow(k) {
				t.Errorf("%v: second request of key len %d allowed", a, len(k))
			}
		}
		if l.Len() != len(keys) {
			t.Errorf("%v: Len = %d, want %d", a, l.Len(), len(keys))
		}
	}
}

// TestLogMatchesModel runs thousands of random traces (several keys, limits
// 1-64, random windows, equal timestamps, AllowN, penalty) through the
// engine and the reference model and compares every Decision.
func TestLogMatchesModel(t *testing.T) {
	traces := 3000
	if testing.Short() {
		traces = 300
	}
	r := rand.New(rand.NewPCG(7, 11))
	for tr := 0; tr < traces; tr++ {
		limit := 1 + r.IntN(64)
		window := time.Duration(1+r.IntN(5000)) * time.Millisecond
		penalty := r.IntN(4) == 0
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: limit, Window: window, Clock: clk, Penalty: penalty, Shards: 1 + r.IntN(4)})
		m := newLogModel(limit, window, int64(l.Resolution()), penalty)
		keys := 1 + r.IntN(4)
		now := int64(0)
		for step := 0; step < 200; step++ {
			switch r.IntN(4) {
			case 0: // same timestamp
			case 1:
				now += int64(r.IntN(int(window)/int(time.Millisecond)+1)) * int64(time.Millisecond)
			default:
				now += int64(r.IntN(int(window)/limit/int(time.Millisecond)+2)) * int64(time.Millisecond)
			}
			key := fmt.Sprint("k", r.IntN(keys))
			n := 1
			if r.IntN(5) == 0 {
				n = r.IntN(limit+2) - 0
			}
			clk.t.Store(now) // times are the clock's readings, as AllowNAt wants
			got := l.AllowNAt(key, n, Time(now))
			want := m.allowN(key, n, now)
			if penalty { // RetryAfter under penalty is checked by the step tables only
				got.RetryAfter, want.RetryAfter = 0, 0
			}
			if got != want {
				t.Fatalf("trace %d step %d: limit %d window %v penalty %v: AllowN(%s, %d) at %d: got %+v, want %+v",
					tr, step, limit, window, penalty, key, n, now, got, want)
			}
		}
	}
}

func TestCounterMatchesModel(t *testing.T) {
	traces := 2000
	if testing.Short() {
		traces = 200
	}
	r := rand.New(rand.NewPCG(3, 5))
	for tr := 0; tr < traces; tr++ {
		limit := 1 + r.IntN(100)
		window := time.Duration(1+r.IntN(3000)) * time.Millisecond
		penalty := r.IntN(4) == 0
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: SlidingCounter, Limit: limit, Window: window, Clock: clk, Penalty: penalty})
		m := newCounterModel(limit, window, penalty)
		now := int64(0)
		for step := 0; step < 200; step++ {
			if r.IntN(3) > 0 {
				now += r.Int64N(int64(window)/int64(limit)*2 + 2)
			}
			clk.t.Store(now)
			key := fmt.Sprint("k", r.IntN(3))
			n := 1
			if r.IntN(5) == 0 {
				n = r.IntN(limit + 2)
			}
			if got, want := l.AllowNAt(key, n, Time(now)).Allowed, m.allowN(key, n, now); got != want {
				t.Fatalf("trace %d step %d: limit %d window %v: AllowN(%s, %d) at %d: got %v, want %v", tr, step, limit, window, key, n, now, got, want)
			}
		}
	}
}

// Any number of goroutines hitting one key at a frozen clock admit exactly
// Limit, including when the key is new and they race to create it.
func TestFrozenClockAdmitsExactlyLimit(t *testing.T) {
	for _, a := range algorithms {
		for _, limit := range []int{1, 2, 7, 100} {
			for _, penalty := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/limit=%d/penalty=%v", a, limit, penalty), func(t *testing.T) {
					for round := 0; round < 20; round++ {
						l := newLimiter(t, Config{Algorithm: a, Limit: limit, Window: time.Minute, Clock: &fakeClock{}, Penalty: penalty})
						var admitted atomic.Int64
						var wg sync.WaitGroup
						start := make(chan struct{})
						for g := 0; g < 8; g++ {
							wg.Add(1)
							go func(g int) {
								defer wg.Done()
								<-start
								for i := 0; i < limit; i++ {
									n := 1 + (g+i)%2 // mix Allow and AllowN(2)
									if n > limit {
										n = 1
									}
									if d := l.AllowNAt("hot", n, 42); d.Allowed {
										admitted.Add(int64(n))
									}
								}
							}(g)
						}
						close(start)
						wg.Wait()
						if got := admitted.Load(); got > int64(limit) || got < int64(limit)-1 {
							t.Fatalf("round %d: admitted %d requests, want %d (or %d when only a pair was left)", round, got, limit, limit-1)
						}
						if l.Len() != 1 {
							t.Fatalf("Len = %d: racing creators made %d states", l.Len(), l.Len())
						}
						// Whatever remains is exactly the gap to Limit.
						if p := l.PeekAt("hot", 42); !penalty && p.Remaining != limit-int(admitted.Load()) {
							t.Fatalf("Peek Remaining = %d, admitted %d of %d", p.Remaining, admitted.Load(), limit)
						}
					}
				})
			}
		}
	}
}

func TestFrozenClockSingleRequests(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 50, Window: time.Minute, Clock: &fakeClock{}})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					if l.AllowAt("new-key", 7).Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if admitted.Load() != 50 {
			t.Fatalf("%v: admitted %d, want exactly 50", a, admitted.Load())
		}
	}
}

// Concurrent traffic on many keys while time moves, keys are reset and the
// sweep runs: exercised for the race detector, and checked against the
// per-key invariant that no window ever admits more than Limit (log).
func TestConcurrentChurn(t *testing.T) {
	for _, a := range algorithms {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: a, Limit: 4, Window: 10 * time.Millisecond, Clock: clk, MaxKeys: 200, Shards: 4})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() { // clock and sweeper
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				clk.t.Add(int64(50 * time.Microsecond))
				if i%100 == 0 {
					l.Sweep()
				}
			}
			close(stop)
		}()
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprint("k", r.IntN(400))
					switch r.IntN(20) {
					case 0:
						l.Reset(k)
					case 1:
						l.Peek(k)
					default:
						l.AllowN(k, 1+r.IntN(2))
					}
				}
			}(g)
		}
		wg.Wait()
		if st := l.Stats(); st.Keys > 200 || st.Keys != l.Len() {
			t.Fatalf("%v: stats %+v exceed MaxKeys 200", a, st)
		}
	}
}

func TestAllocsOnExistingKeys(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 1 << 15, Window: time.Hour})
		l.Allow("existing")
		for name, f := range map[string]func(){
			"Allow":  func() { l.Allow("existing") },
			"AllowN": func() { l.AllowN("existing", 2) },
			"Peek":   func() { l.Peek("existing") },
		} {
			if n := testing.AllocsPerRun(1000, f); n != 0 {
				t.Errorf("%v %s: %v allocs per run, want 0", a, name, n)
			}
		}
	}
}

func TestSweepReclaimsIdleKeys(t *testing.T) {
	for _, a := range windowAlgorithms {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: a, Limit: 3, Window: time.Second, Clock: clk})
		for i := 0; i < 1000; i++ {
			l.Allow(fmt.Sprint("k", i))
		}
		clk.t.Store(int64(500 * time.Millisecond))
		l.Allow("active")
		if n := l.Sweep(); n != 0 {
			t.Fatalf("%v: swept %d keys still in their window", a, n)
		}
		clk.t.Store(int64(2100 * time.Millisecond))
		l.Allow("active") // still active: window holds it
		n := l.Sweep()
		if n != 1000 || l.Len() != 1 {
			t.Fatalf("%v: swept %d, Len %d; want 1000 swept and 1 left", a, n, l.Len())
		}
		// reclaimed records are reused: an old key starts empty
		for i := 0; i < 3; i++ {
			if !l.Allow("k1") {
				t.Fatalf("%v: reclaimed key did not restart empty", a)
			}
		}
		if l.Allow("k1") {
			t.Fatalf("%v: limit not enforced after reuse", a)
		}
		// SlidingLog resets a ring that holds nothing that counts in place
		// ("active" at 2100 ms, 1600 ms after its only request): no
		// reclaim, no insert, for either algorithm.
		wantRecl, wantIns := uint64(1000), uint64(1002)
		if st := l.Stats(); st.Reclaimed != wantRecl || st.Inserts != wantIns {
			t.Fatalf("%v: stats %+v, want Reclaimed %d Inserts %d", a, st, wantRecl, wantIns)
		}
	}
}

// A flood of never-seen keys never grows state past the bound; idle keys
// are reused first, and when every tracked key is active new keys overflow.
// Memory stays under the key bound's worth of bytes at every step and is
// constant once the flood is in its steady state (SlidingLog's chunks are
// all allocated once the bound is reached; the one-level tables of
// SlidingCounter and GCRA settle at the size their rebuilds give the
// bound's keys once lazy reuse has begun: keys go idle two windows (20,000
// steps) after their request, so by i = 30000 each shard has reused about
// 1,000 slots. A shard's share of the table-wide bound wanders with the
// sweeps, and a rebuild sizes its table for the share it has then, so
// those tables may move by a few buckets, and by the allocator's size
// class steps (up to 1/8 of a small table): within 1/16 in all).
func TestFloodStaysBounded(t *testing.T) {
	for _, a := range algorithms {
		for _, pol := range []OverflowPolicy{OverflowAllow, OverflowDeny} {
			clk := &fakeClock{}
			l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: time.Second, Clock: clk, MaxKeys: 1000, Shards: 8, Overflow: pol})
			max := l.Config().MaxKeys
			if max != 1000 {
				t.Fatalf("MaxKeys = %d", max)
			}
			var bytes int64
			// Tables under 32 KiB are rounded up to the allocator's size
			// classes, by at most 1/8.
			bound := int64(max)*shard.FlatBytesPerKey*9/8 + 8*shard.FlatShardBytes + limiterBytes
			if a == SlidingLog {
				bound = l.Config().MaxMemory
			}
			for i := 0; i < 50000; i++ {
				clk.t.Add(int64(100 * time.Microsecond)) // 10k new keys per second: 10x the bound per window
				d := l.AllowN(fmt.Sprint("flood-", i), 1)
				if l.Len() > max {
					t.Fatalf("Len %d > bound %d", l.Len(), max)
				}
				if b := l.Stats().Bytes; b > bound {
					t.Fatalf("%v: step %d: %d bytes > bound %d", a, i, b, bound)
				}
				if i == 30000 {
					bytes = l.Stats().Bytes
				}
				_ = d
			}
			st := l.Stats()
			if a == SlidingLog && st.Bytes != bytes || st.Bytes > bytes+bytes/16 {
				t.Fatalf("%v: memory grew from %d to %d bytes under the flood", a, bytes, st.Bytes)
			}
			if st.Overflow == 0 || st.Reclaimed == 0 {
				t.Fatalf("%v: stats %+v: want both overflow and lazy reclaim", a, st)
			}
			if pol == OverflowDeny && st.Denied < st.Overflow || pol == OverflowAllow && st.Denied != 0 {
				t.Fatalf("%v policy %d: stats %+v", a, pol, st)
			}
		}
	}
}

func TestResetForgetsKey(t *testing.T) {
	for _, a := range algorithms {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: time.Hour, Clock: clk, MaxKeys: 64, Shards: 1})
		l.AllowN("a", 2)
		if l.Allow("a") {
			t.Fatal("limit not enforced")
		}
		l.Reset("a")
		l.Reset("never-seen")
		if d := l.Peek("a"); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("%v: after Reset, Peek = %+v, want the whole limit", a, d)
		}
		if d := l.AllowN("a", 2); !d.Allowed {
			t.Fatalf("%v: key not forgotten: %+v", a, d)
		}
		if l.Allow("a") {
			t.Fatalf("%v: limit not enforced after Reset", a)
		}
		if a == SlidingLog && l.Len() != 1 {
			t.Fatalf("%v: Len = %d after Reset and one new request", a, l.Len())
		}
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	for _, a := range algorithms {
		l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: time.Hour, Clock: &fakeClock{}})
		if d := l.PeekAt("p", 0); !d.Allowed || d.Remaining != 2 || l.Len() != 0 {
			t.Fatalf("%v: Peek on a new key = %+v, Len %d", a, d, l.Len())
		}
		l.AllowAt("p", 0)
		for i := 0; i < 5; i++ {
			if d := l.PeekAt("p", 0); !d.Allowed || d.Remaining != 1 {
				t.Fatalf("%v: Peek = %+v", a, d)
			}
		}
		l.AllowAt("p", 0)
		if d := l.PeekAt("p", 0); d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
			t.Fatalf("%v: Peek at limit = %+v", a, d)
		}
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	l, err := New(Config{Algorithm: SlidingCounter, Limit: 1, Window: time.Second, SweepInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if l.Close() != nil || l.Close() != nil {
		t.Fatal("Close failed")
	}
	if !l.Allow("after-close") {
		t.Fatal("Limiter stopped deciding after Close")
	}
}

// Regression (penalty ABA, see ring): many goroutines, several requests each
// per tick, penalty on: never more than Limit admitted in any one window.
func TestPenaltyNeverOverAdmits(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := 0; round < rounds; round++ {
		l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 2, Window: time.Second, Clock: &fakeClock{}, Penalty: true})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 3; i++ {
					if l.AllowAt("k", 1000).Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if admitted.Load() != 2 {
			t.Fatalf("round %d: admitted %d at one tick with Limit 2", round, admitted.Load())
		}
	}
}

// Regression: a key idle so long that 32-bit ticks (log) or 24-bit window
// numbers (counter) wrapped was denied instead of starting empty, when no
// sweep had reclaimed it (explicit times, a fast clock, a closed Limiter).
func TestLongIdleKeyStartsEmpty(t *testing.T) {
	cases := []struct {
		a      Algorithm
		limit  int
		window time.Duration
		later  time.Duration
	}{
		{SlidingLog, 1, time.Second, 40 * time.Minute},
		{SlidingLog, 3, time.Second, 72 * time.Minute},
		{SlidingCounter, 1, time.Millisecond, 3 * time.Hour},
		{SlidingCounter, 5, time.Millisecond, 280 * time.Minute}, // 2^24 windows of 1 ms
	}
	for _, c := range cases {
		clk := &fakeClock{}
		l := newLimiter(t, Config{Algorithm: c.a, Limit: c.limit, Window: c.window, Clock: clk})
		l.AllowNAt("k", c.limit, 0)
		clk.t.Store(int64(c.later))
		d := l.AllowNAt("k", c.limit, Time(c.later))
		if !d.Allowed || d.Remaining != 0 {
			t.Errorf("%v: after %v idle, AllowN(Limit) = %+v, want allowed", c.a, c.later, d)
		}
		if l.AllowAt("k", Time(c.later)).Allowed {
			t.Errorf("%v: limit not enforced after the restart", c.a)
		}
	}
}

// Regression: Reset of active keys kept their records out of use, so a
// small table filled up and new keys overflowed while nothing was tracked.
// A SlidingCounter key that Reset emptied is reusable from the window after
// its Reset (in its own window a new key's words could repeat its old ones:
// see atomiccounter.Idle), so the newcomer arrives a window later.
func TestResetDoesNotExhaustCapacity(t *testing.T) {
	clk := &fakeClock{}
	l := newLimiter(t, Config{Algorithm: SlidingCounter, Limit: 5, Window: time.Minute, Clock: clk, Shards: 1, MaxKeys: 100, Overflow: OverflowDeny})
	for i := 0; i < 1000; i++ {
		k := fmt.Sprint("login-", i%150)
		l.Allow(k)
		l.Reset(k)
	}
	clk.t.Add(int64(time.Minute))
	if !l.Allow("newcomer") { // lazy reuse: a sample of the shard holds Reset keys
		t.Fatalf("new key refused a window after the Resets: %+v", l.Stats())
	}
	if n := l.Sweep(); n != 99 || l.Len() != 1 { // the sweep frees every other Reset key
		t.Fatalf("a window after the Resets the sweep freed %d, Len %d; want 99 and 1", n, l.Len())
	}
	for i := 1; i < 100; i++ {
		if d := l.Allow(fmt.Sprint("newcomer-", i)); !d {
			t.Fatalf("new key %d refused after the sweep: %+v", i, l.Stats())
		}
	}
	// SlidingLog frees the record and reuses it after the old window.
	ll := newLimiter(t, Config{Algorithm: SlidingLog, Limit: 5, Window: time.Second, Clock: clk, Shards: 1, MaxKeys: 10, Overflow: OverflowDeny})
	for i := 0; i < 10; i++ {
		ll.Allow(fmt.Sprint("k", i))
		ll.Reset(fmt.Sprint("k", i))
	}
	clk.t.Add(int64(2 * time.Second))
	for i := 0; i < 10; i++ {
		if !ll.Allow(fmt.Sprint("again", i)) {
			t.Fatalf("record %d not reusable a window after its Reset: %+v", i, ll.Stats())
		}
	}
}

// Regression: MaxKeys below the shard count tracked one key per shard.
func TestMaxKeysIsACap(t *testing.T) {
	for _, max := range []int{1, 10, 100, 1000} {
		l := newLimiter(t, Config{Algorithm: SlidingCounter, Limit: 1, Window: time.Hour, MaxKeys: max, Shards: 64})
		if got := l.Config().MaxKeys; got > max || got < max/2 {
			t.Fatalf("MaxKeys %d: cap in force %d", max, got)
		}
		for i := 0; i < 3*max; i++ {
			l.Allow(fmt.Sprint("k", i))
		}
		if l.Len() > max {
			t.Fatalf("MaxKeys %d: tracking %d keys", max, l.Len())
		}
	}
}

// Regression: windows near MaxInt64 overflowed the tick and delay arithmetic.
func TestWindowBounds(t *testing.T) {
	for _, a := range algorithms {
		if _, err := New(Config{Algorithm: a, Limit: 1, Window: MaxWindow + 1}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Config.Window") {
			t.Fatalf("%v: Window past MaxWindow: %v", a, err)
		}
		l := newLimiter(t, Config{Algorithm: a, Limit: 2, Window: MaxWindow, Clock: &fakeClock{}})
		d := l.AllowNAt("k", 2, 0)
		if !d.Allowed || d.ResetAfter < MaxWindow {
			t.Fatalf("%v: %+v", a, d)
		}
		d = l.AllowAt("k", Time(time.Hour))
		if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*MaxWindow {
			t.Fatalf("%v: denied decision %+v", a, d)
		}
	}
}
