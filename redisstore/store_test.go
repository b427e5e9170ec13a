package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// fakeClock is a settable engine.Clock in nanoseconds.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() int64     { return c.ns.Load() }
func (c *fakeClock) set(ns int64)   { c.ns.Store(ns) }
func (c *fakeClock) setMS(ms int64) { c.ns.Store(base + ms*int64(time.Millisecond)) }

// base is an epoch-like origin (2023-11) so test timestamps look like the
// server's TIME in µs and exercise the same number ranges.
const base = int64(1_700_000_000) * int64(time.Second)

// newClient is the client the Store requires: ContextTimeoutEnabled, and
// no go-redis retries (a retried script can run twice).
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(testClientOptions(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testClientOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
}

// stateKey is the Redis key holding key's state in s.
func stateKey(s *Store, key string) string {
	name, _ := s.ks.state(key)
	return name
}

// logEntries counts the recorded timestamps of a SlidingLog key (the set
// also holds its sequence member "#", scored below 0).
func logEntries(t testing.TB, c redis.UniversalClient, name string) int64 {
	t.Helper()
	n, err := c.ZCount(context.Background(), name, "0", "+inf").Result()
	if err != nil {
		t.Fatalf("ZCOUNT %q: %v", name, err)
	}
	return n
}

// held is how many requests Redis holds for key in s's state: entries of a
// SlidingLog key, the current count of a SlidingCounter key.
func held(t testing.TB, c redis.UniversalClient, s *Store, key string) int64 {
	t.Helper()
	name := stateKey(s, key)
	switch s.cfg.Algorithm {
	case engine.SlidingLog:
		return logEntries(t, c, name)
	case engine.GCRA:
		return gcraDebt(t, c, s, name)
	}
	_, _, cur := readCounter(t, c, name)
	return cur
}

// gcraDebt is how many requests a GCRA key holds at the server's TIME: its
// TAT's distance ahead of now in emission intervals, rounded up; 0 when
// the key is absent or its bucket is full.
func gcraDebt(t testing.TB, c redis.UniversalClient, s *Store, name string) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %q: %v", name, err)
	}
	if len(v) != 12 {
		t.Fatalf("GCRA state %q: %d bytes, want 12", v, len(v))
	}
	tat := int64(math.Float64frombits(binary.BigEndian.Uint64(v)))*1000 + int64(binary.BigEndian.Uint32(v[8:]))
	now := s.cfg.Clock
	var ns int64
	if now != nil {
		ns = now.Now() / 1000 * 1000
	} else {
		tm, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		ns = tm.UnixMicro() * 1000
	}
	tok := s.cfg.gcraToken()
	return max(0, (tat-ns+tok-1)/tok)
}

// readCounter reads a SlidingCounter key's state (16 bytes: big-endian
// float64 window number, uint32 previous and current counts); zeros when
// the key is absent.
func readCounter(t testing.TB, c redis.UniversalClient, name string) (w, prev, cur int64) {
	t.Helper()
	v, err := c.Get(context.Background(), name).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0, 0, 0
	}
	if err != nil {
		t.Fatalf("GET %q: %v", name, err)
	}
	if len(v) != 16 {
		t.Fatalf("counter state %q: %d bytes, want 16", v, len(v))
	}
	return int64(math.Float64frombits(binary.BigEndian.Uint64(v))), int64(binary.BigEndian.Uint32(v[8:])), int64(binary.BigEndian.Uint32(v[12:]))
}

// testTimeout is the Timeout of tests that are not about timeouts: on a
// loaded 2-core machine a healthy local call has been seen to take 60 ms, so
// the 50 ms default would turn load into failures. It stays below the
// client's default ReadTimeout (3 s), as New requires.
const testTimeout = 2 * time.Second

// newStore builds a Store, with testTimeout unless cfg sets a Timeout.
func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// algorithms is every algorithm the Store runs: the engine's list.
var algorithms = engine.Algorithms()

// hybridAlgorithms is every algorithm a Hybrid runs: all but GCRA (see
// NewHybrid).
var hybridAlgorithms = []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter}

// TestConformanceVector is the seed-001 vector: Limit 2, Window 1 s.
func TestConformanceVector(t *testing.T) {
	srv := redistest.Start(t)
	clk := &fakeClock{}
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 2, Window: time.Second, Clock: clk})
	steps := []struct {
		ms    int64
		allow bool
		retry time.Duration // checked when denied
	}{
		{0, true, 0}, {999, true, 0}, {1000, false, 1 * time.Microsecond},
		{1001, true, 0}, {1002, false, 997*time.Millisecond + time.Microsecond},
		{1999, false, time.Microsecond}, {2000, true, 0},
	}
	for _, st := range steps {
		clk.setMS(st.ms)
		d, err := s.AllowNContext(context.Background(), "user", 1)
		if err != nil {
			t.Fatalf("t=%dms: %v", st.ms, err)
		}
		if d.Allowed != st.allow {
			t.Fatalf("t=%dms: Allowed=%v, want %v (%+v)", st.ms, d.Allowed, st.allow, d)
		}
		if !st.allow && d.RetryAfter != st.retry {
			t.Fatalf("t=%dms: RetryAfter=%v, want %v", st.ms, d.RetryAfter, st.retry)
		}
	}
}

// TestDifferential runs random traces through the Store and the in-memory
// engine at the same explicit times and requires identical decisions.
// Retry/reset durations are compared at the server's µs resolution.
func TestDifferential(t *testing.T) {
	srv := redistest.Start(t)
	testDifferential(t, newClient(t, srv.Addr()))
}

func testDifferential(t *testing.T, client redis.UniversalClient) {
	for _, alg := range algorithms {
		for _, penalty := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/penalty=%v", alg, penalty), func(t *testing.T) {
				const window = 100 * time.Millisecond
				limit, burst := 5, 0
				if alg == engine.GCRA {
					// An emission interval that is not a whole number of µs
					// (100 ms / 7, rounded up to a ns), and a bucket of its
					// own: the script must be exact to the ns, as the engine.
					limit, burst = 7, 4
				}
				clk := &fakeClock{}
				clk.set(base)
				s := newStore(t, Config{Client: client, Algorithm: alg, Limit: limit, Burst: burst, Window: window,
					Penalty: penalty, Clock: clk, Prefix: fmt.Sprintf("diff:%v:%v:", alg, penalty)})
				// The engine's counter aligns windows to its epoch (the clock
				// at New); base is a multiple of the window, as Redis aligns
				// to multiples of the window since the Unix epoch.
				ref, err := engine.New(engine.Config{Algorithm: alg, Limit: limit, Burst: burst, Window: window, Penalty: penalty, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				defer ref.Close()
				rng := rand.New(rand.NewPCG(1, uint64(alg)*2+map[bool]uint64{false: 0, true: 1}[penalty]))
				now := base
				for i := range 1500 {
					switch r := rng.IntN(20); {
					case r < 4: // same timestamp: equal scores, unique members
					case r == 4: // a jump past both windows
						now += int64(window) * int64(2+rng.IntN(3))
					default:
						now += int64(rng.IntN(40_000)) * int64(time.Microsecond)
					}
					clk.set(now)
					key := fmt.Sprintf("k%d", rng.IntN(3))
					var got, want engine.Decision
					op := "allow"
					switch r := rng.IntN(20); {
					case r == 1:
						// A reset key behaves as a fresh one: the next
						// decisions must agree again.
						op = "reset"
						if err := s.ResetContext(context.Background(), key); err != nil {
							t.Fatalf("step %d reset: %v", i, err)
						}
						ref.Reset(key)
						continue
					case r == 0:
						op = "peek"
						got, err = s.PeekContext(context.Background(), key)
						want = ref.PeekAt(key, engine.Time(now))
					default:
						n := 1
						if r < 4 {
							n = rng.IntN(limit+2) - 0 // 0..limit+1 covers the invalid sizes too
						}
						op = fmt.Sprintf("allow(%d)", n)
						got, err = s.AllowNContext(context.Background(), key, n)
						want = ref.AllowNAt(key, n, engine.Time(now))
					}
					if err != nil {
						t.Fatalf("step %d %s: %v", i, op, err)
					}
					if alg != engine.GCRA { // GCRA's script answers in ns, exactly
						if want.RetryAfter != engine.Never {
							want.RetryAfter = ceilUS(want.RetryAfter)
						}
						want.ResetAfter = ceilUS(want.ResetAfter)
					}
					if got != want {
						t.Fatalf("step %d %s %s at +%v: redis %+v, engine %+v", i, op, key, time.Duration(now-base), got, want)
					}
				}
			})
		}
	}
}

// concurrently runs call in n goroutines at once, waits for all, and
// returns the slowest call's duration.
func concurrently(n int, call func()) time.Duration {
	var worst atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			call()
			raiseTo(&worst, int64(time.Since(t0)))
		}()
	}
	wg.Wait()
	return time.Duration(worst.Load())
}

func ceilUS(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// TestConcurrentOneKey: many goroutines at once on one key, all at the same
// timestamp, admit exactly Limit (GCRA: Burst; atomic script; unique log
// members).
func TestConcurrentOneKey(t *testing.T) {
	srv := redistest.Start(t)
	testConcurrentOneKey(t, newClient(t, srv.Addr()))
}

func testConcurrentOneKey(t *testing.T, client redis.UniversalClient) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const workers, each = 16, 10
			limit, burst := 50, 0
			if alg == engine.GCRA {
				burst = 20 // a bucket of its own: exactly Burst are admitted at once
			}
			clk := &fakeClock{}
			clk.set(base)
			s := newStore(t, Config{Client: client, Algorithm: alg, Limit: limit, Burst: burst, Window: time.Minute, Clock: clk, Prefix: "conc:"})
			want := int64(s.Config().Burst)
			var admitted atomic.Int64
			var firstErr atomic.Value
			concurrently(workers, func() {
				for range each {
					d, err := s.AllowNContext(context.Background(), "hot", 1)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
			if err := firstErr.Load(); err != nil {
				t.Fatal(err)
			}
			if got := admitted.Load(); got != want {
				t.Fatalf("admitted %d of %d, want exactly %d", got, workers*each, want)
			}
			if alg == engine.SlidingLog {
				if n := logEntries(t, client, stateKey(s, "hot")); n != want {
					t.Fatalf("log holds %d members, want %d (members must be unique at equal timestamps)", n, limit)
				}
			}
		})
	}
}

// TestServerTime uses the server's TIME (no Clock) and checks the keys'
// TTL follows the window.
func TestServerTime(t *testing.T) {
	srv := redistest.Start(t)
	testServerTime(t, newClient(t, srv.Addr()))
}

func testServerTime(t *testing.T, client redis.UniversalClient) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, Config{Client: client, Algorithm: alg, Limit: 3, Window: time.Hour, Prefix: "time:"})
			for i := range 3 {
				if d := s.AllowN("k", 1); !d.Allowed || d.Remaining != 2-i {
					t.Fatalf("request %d: %+v, want allowed with Remaining %d", i, d, 2-i)
				}
			}
			d := s.AllowN("k", 1)
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Hour {
				t.Fatalf("4th request: %+v, want denied with 0 < RetryAfter <= 2h", d)
			}
			key := stateKey(s, "k")
			ttl := client.PTTL(context.Background(), key).Val()
			if ttl <= 0 || ttl > 2*time.Hour+2*time.Millisecond {
				t.Fatalf("PTTL(%s) = %v, want about the window", key, ttl)
			}
			// GCRA's key lives until its bucket is full again: ResetAfter
			// rounded up to a ms plus one (the script's PX), less the time
			// since. PTTL can read up to one ms more than that: ResetAfter is
			// dated by the script's TIME (µs), PTTL by its own command's
			// time truncated to the ms, which can lie up to a ms before that
			// TIME reading when both fall in one ms (seen on a loaded
			// machine: PTTL 59m59.998s, ResetAfter 59m59.995975s).
			if alg == engine.GCRA && (ttl > d.ResetAfter+3*time.Millisecond || ttl < d.ResetAfter-time.Minute) {
				t.Fatalf("PTTL(%s) = %v, want the time until the bucket is full, %v", key, ttl, d.ResetAfter)
			}
			s.Reset("k")
			if n := client.Exists(context.Background(), key).Val(); n != 0 {
				t.Fatalf("after Reset %d keys remain", n)
			}
			if d := s.AllowN("k", 1); !d.Allowed {
				t.Fatalf("after Reset: %+v, want allowed", d)
			}
			if st := s.Stats(); st.Errors+st.Timeouts != 0 || st.Allowed != 4 || st.Denied != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	c := redis.NewClient(testClientOptions("127.0.0.1:1"))
	defer c.Close()
	ok := Config{Client: c, Algorithm: engine.SlidingLog, Limit: 1, Window: time.Second}
	cases := map[string]func(*Config){
		"Client":           func(c *Config) { c.Client = nil },
		"Algorithm":        func(c *Config) { c.Algorithm = 99 },
		"Limit":            func(c *Config) { c.Limit = 0 },
		"Limit 65536":      func(c *Config) { c.Limit = engine.MaxLogLimit + 1 },
		"Window":           func(c *Config) { c.Window = 0 },
		"Window µs":        func(c *Config) { c.Window = time.Second + 1 },
		"Prefix":           func(c *Config) { c.Prefix = "a{b" },
		"Timeout":          func(c *Config) { c.Timeout = -1 },
		"OnFailure":        func(c *Config) { c.OnFailure = 9 },
		"Nodes":            func(c *Config) { c.Nodes = -1 },
		"BreakerThreshold": func(c *Config) { c.BreakerThreshold = -1 },
		"BreakerCooldown":  func(c *Config) { c.BreakerCooldown = -1 },
		"Burst":            func(c *Config) { c.Burst = 2 }, // SlidingLog's burst is its Limit
		"Burst GCRA":       func(c *Config) { c.Algorithm, c.Burst = engine.GCRA, -1 },
		"Burst GCRA max":   func(c *Config) { c.Algorithm, c.Burst = engine.GCRA, engine.MaxGCRALimit+1 },
		"Burst GCRA depth": func(c *Config) { c.Algorithm, c.Window, c.Burst = engine.GCRA, engine.MaxWindow, 1000 },
		"Limit GCRA":       func(c *Config) { c.Algorithm, c.Limit = engine.GCRA, engine.MaxGCRALimit+1 },
		"Window GCRA":      func(c *Config) { c.Algorithm, c.Limit, c.Window = engine.GCRA, 6, time.Microsecond },
	}
	for name, mutate := range cases {
		cfg := ok
		mutate(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, engine.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want engine.ErrInvalidConfig", name, err)
		} else if field, _, _ := strings.Cut(name, " "); !strings.Contains(err.Error(), "Config."+field) {
			t.Errorf("%s: err = %v, does not name Config.%s", name, err, field)
		}
	}
	if _, err := New(ok); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
}

// TestZeroAlgorithmIsTheEnginesDefault checks that a Config without an
// Algorithm means what it means to the in-memory engine, so one Config
// gives the same window in memory and in Redis.
func TestZeroAlgorithmIsTheEnginesDefault(t *testing.T) {
	c := redis.NewClient(testClientOptions("127.0.0.1:1"))
	defer c.Close()
	s, err := New(Config{Client: c, Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatalf("zero Algorithm rejected: %v", err)
	}
	if got := s.Config().Algorithm; got != engine.DefaultAlgorithm {
		t.Errorf("Config().Algorithm = %v, want engine.DefaultAlgorithm (%v)", got, engine.DefaultAlgorithm)
	}
}

// TestLogKeyOutlivesItsEntries: a SlidingLog key's expiry is set only on
// the first write of each aligned window, at the end of the next window;
// after every write the key must still live at least a Window, or an entry
// still in the window would vanish with it.
func TestLogKeyOutlivesItsEntries(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	const window = 300 * time.Millisecond
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 1000, Window: window})
	name := stateKey(s, "k")
	rng := rand.New(rand.NewPCG(10, 10))
	for range 40 {
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		before := time.Now()
		if d := s.AllowN("k", 1); !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		ttl := client.PTTL(context.Background(), name).Val()
		// The entry was written after before; the key must outlive it by a
		// Window: expiry >= before + window, so ttl >= window - (now - before).
		if min := window - time.Since(before) - time.Millisecond; ttl < min {
			t.Fatalf("PTTL %v after a write, want at least %v", ttl, min)
		}
	}
}

// TestGCRAResetIsFresh: a GCRA key reset while deep in debt decides as a key
// never seen: Burst at once, then one per emission interval, with the
// same RetryAfter and ResetAfter as a fresh key's.
func TestGCRAResetIsFresh(t *testing.T) {
	srv := redistest.Start(t)
	clk := &fakeClock{}
	clk.set(base)
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.GCRA, Limit: 10, Burst: 3, Window: time.Second,
		Penalty: true, Clock: clk, Prefix: "gcrareset:"})
	ctx := context.Background()
	for range 20 { // deep in (penalty) debt
		if _, err := s.AllowNContext(ctx, "used", 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ResetContext(ctx, "used"); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		clk.set(base + int64(i)*int64(30*time.Millisecond))
		got, err := s.AllowNContext(ctx, "used", 1)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.AllowNContext(ctx, "fresh", 1)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("request %d: reset key %+v, fresh key %+v", i, got, want)
		}
	}
}

// TestHybridRejectsGCRA: a Hybrid cannot bound GCRA (its leases cannot be
// given back to a bucket), so NewHybrid refuses it, naming the field,
// before any round trip.
func TestHybridRejectsGCRA(t *testing.T) {
	c := redis.NewClient(testClientOptions("127.0.0.1:1"))
	defer c.Close()
	_, err := NewHybrid(HybridConfig{Config: Config{Client: c, Algorithm: engine.GCRA, Limit: 10, Window: time.Second}})
	if !errors.Is(err, engine.ErrInvalidConfig) || !strings.Contains(err.Error(), "Algorithm") {
		t.Fatalf("NewHybrid(GCRA) = %v, want an error wrapping engine.ErrInvalidConfig naming Algorithm", err)
	}
}

// TestGCRARequestAboveBurstIsInvalid: n above the bucket can never be
// admitted: RetryAfter engine.Never, counted in Stats.Invalid (not Denied),
// nothing sent or written; n = Burst on a fresh key is admitted whole.
func TestGCRARequestAboveBurstIsInvalid(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.GCRA, Limit: 100, Burst: 5, Window: time.Second, Prefix: "gcrainv:"})
	d, err := s.AllowNContext(context.Background(), "k", 6)
	if err != nil || d.Allowed || d.RetryAfter != engine.Never || d.Limit != 5 {
		t.Fatalf("AllowN(6) with Burst 5: %+v, %v; want denied, RetryAfter Never, Limit 5", d, err)
	}
	if st := s.Stats(); st.Invalid != 1 || st.Denied != 0 {
		t.Fatalf("stats %+v, want Invalid 1, Denied 0", st)
	}
	if n := client.Exists(context.Background(), stateKey(s, "k")).Val(); n != 0 {
		t.Fatalf("an invalid call wrote the key")
	}
	if d := s.AllowN("k", 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(5) on a fresh key with Burst 5: %+v, want admitted with Remaining 0", d)
	}
}

// TestAcceptedConfigsBuildTheEngine: a Config the Store accepts at the edge
// of its rules also builds the in-memory engine (the FailLocal engine, and
// the same limiter in memory), so the Store's rules do not drift from the
// engine's.
func TestAcceptedConfigsBuildTheEngine(t *testing.T) {
	c := redis.NewClient(testClientOptions("127.0.0.1:1"))
	defer c.Close()
	edges := []Config{
		{Algorithm: engine.SlidingLog, Limit: engine.MaxLogLimit, Window: time.Microsecond},
		{Algorithm: engine.SlidingCounter, Limit: engine.MaxCounterLimit, Window: engine.MaxWindow},
		{Algorithm: engine.GCRA, Limit: 5, Window: time.Microsecond},                // 200 ns a request
		{Algorithm: engine.GCRA, Limit: 1, Burst: 1 << 20, Window: 2 * time.Second}, // a bucket of 2^21 s: deepest the script takes is 2^51 ns
		{Algorithm: engine.GCRA, Limit: engine.MaxGCRALimit, Burst: 1, Window: 215 * time.Second},
		{Algorithm: engine.GCRA, Limit: 1000, Burst: engine.MaxGCRALimit, Window: time.Second, Penalty: true},
	}
	for _, cfg := range edges {
		cfg.Client = c
		s, err := New(cfg)
		if err != nil {
			t.Errorf("%v Limit %d Burst %d Window %v: a valid edge refused by the Store: %v", cfg.Algorithm, cfg.Limit, cfg.Burst, cfg.Window, err)
			continue
		}
		got := s.Config()
		lim, err := engine.New(engine.Config{Algorithm: got.Algorithm, Limit: got.Limit, Burst: got.Burst, Window: got.Window, Penalty: got.Penalty})
		if err != nil {
			t.Errorf("%v Limit %d Burst %d Window %v: the Store accepts it, the engine refuses it: %v", cfg.Algorithm, cfg.Limit, cfg.Burst, cfg.Window, err)
			continue
		}
		_ = lim.Close()
		_ = s.Close()
	}
}
