package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// recoveryGuard bounds the waits for a state the test drives the system
// into (the breaker opening, recovering). It guards against a hang;
// nothing asserts how fast it happens.
const recoveryGuard = 20 * time.Second

// eventually calls f until it reports true, failing after recoveryGuard.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(recoveryGuard)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, recoveryGuard)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServerKilled kills redis-server mid-run under each fail policy and
// checks the policy's decisions, the breaker, the fault counters and the
// recovery once the server is back.
func TestServerKilled(t *testing.T) {
	quietClientLog(t)
	for _, pol := range []FailPolicy{FailOpen, FailClosed, FailLocal} {
		t.Run(pol.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			const limit, nodes = 4, 2
			s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: limit, Window: time.Hour,
				OnFailure: pol, Nodes: nodes, BreakerThreshold: 1, BreakerCooldown: 20 * time.Millisecond})
			ctx := context.Background()
			for range limit {
				if d, err := s.AllowNContext(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("healthy: %+v, %v", d, err)
				}
			}
			if d, err := s.AllowNContext(ctx, "k", 1); err != nil || d.Allowed {
				t.Fatalf("healthy, over the limit: %+v, %v; want denied", d, err)
			}

			srv.Kill()
			// limit/nodes+1 calls: FailLocal's share is limit/nodes = 2.
			var got []bool
			for i := range limit/nodes + 1 {
				d, err := s.AllowNContext(ctx, "k", 1)
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("down, call %d: err = %v, want ErrUnavailable", i, err)
				}
				got = append(got, d.Allowed)
			}
			want := map[FailPolicy][]bool{
				FailOpen:   {true, true, true},
				FailClosed: {false, false, false},
				FailLocal:  {true, true, false}, // the per-node share, 4/2
			}[pol]
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("down: decisions %v, want %v", got, want)
				}
			}
			// The first failure opened the breaker (threshold 1); between
			// probes calls are not sent.
			eventually(t, "ErrCircuitOpen while down", func() bool {
				_, err := s.AllowNContext(ctx, "k", 1)
				return errors.Is(err, ErrCircuitOpen)
			})
			_ = s.Peek("k")
			s.Reset("other") // faults in Reset are counted, never raised
			st := s.Stats()
			if st.BreakerOpens == 0 || !st.BreakerOpen || st.ShortCircuits == 0 || st.Errors+st.Timeouts == 0 {
				t.Fatalf("stats while down: %+v", st)
			}
			if n := map[FailPolicy]uint64{FailOpen: st.FailOpen, FailClosed: st.FailClosed, FailLocal: st.FailLocal}[pol]; n == 0 {
				t.Fatalf("%v decisions not counted: %+v", pol, st)
			}

			srv.Restart() // a fresh, empty server on the same port
			eventually(t, "recovery", func() bool {
				d, err := s.AllowNContext(ctx, "fresh", 1)
				if err == nil && (!d.Allowed || d.Remaining != limit-1) {
					t.Fatalf("after recovery: %+v, want allowed with Remaining %d", d, limit-1)
				}
				return err == nil
			})
			if st := s.Stats(); st.BreakerOpen {
				t.Fatalf("breaker still open after a successful call: %+v", st)
			}
		})
	}
}

// TestSlowServerTimesOut pauses the server (CLIENT PAUSE) so a call runs past
// Config.Timeout; the timeout is counted and the policy decides.
func TestSlowServerTimesOut(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	cfg := Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 10, Window: time.Second, OnFailure: FailClosed}
	if d := newStore(t, cfg).AllowN("k", 1); !d.Allowed { // healthy, and the script is loaded
		t.Fatalf("healthy: %+v", d)
	}
	cfg.Timeout = 20 * time.Millisecond // this test is about the timeout
	s := newStore(t, cfg)
	if err := client.Do(context.Background(), "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	defer client.Do(context.Background(), "CLIENT", "UNPAUSE")
	d, err := s.AllowNContext(context.Background(), "k", 1)
	if d.Allowed || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused server: %+v, %v; want FailClosed's denial and a deadline error", d, err)
	}
	if st := s.Stats(); st.Timeouts != 1 || st.FailClosed != 1 {
		t.Fatalf("stats: %+v, want 1 timeout decided by FailClosed", st)
	}
}

// TestErrorReplyDoesNotTrip: a per-key error reply (WRONGTYPE: someone
// wrote a hash where the log keeps a sorted set) is counted but does not
// open the breaker for every other key.
func TestErrorReplyDoesNotTrip(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Second,
		OnFailure: FailOpen, BreakerThreshold: 1})
	if err := client.HSet(context.Background(), stateKey(s, "bad"), "x", 1).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.AllowNContext(context.Background(), "bad", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("WRONGTYPE key: err = %v", err)
		}
	}
	if d, err := s.AllowNContext(context.Background(), "good", 1); err != nil || !d.Allowed {
		t.Fatalf("other key after error replies: %+v, %v", d, err)
	}
	if st := s.Stats(); st.Errors != 3 || st.BreakerOpens != 0 {
		t.Fatalf("stats: %+v, want 3 errors and a closed breaker", st)
	}
}

// TestCallerGivingUpIsNotAServerFault: cancelled contexts,
// expired deadlines and callers whose deadline is shorter than a stall do
// not open the breaker (threshold 1 here: one server fault would), consume
// nothing, and say why with the context's error rather than
// ErrUnavailable. Redis keeps deciding for everyone else.
func TestCallerGivingUpIsNotAServerFault(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for _, pol := range []FailPolicy{FailOpen, FailLocal} {
		t.Run(pol.String(), func(t *testing.T) {
			s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 3, Window: time.Hour,
				OnFailure: pol, BreakerThreshold: 1, Prefix: "giveup:" + pol.String() + ":"})
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel2()
			for range 5 {
				for _, c := range []struct {
					ctx  context.Context
					want error
				}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
					d, err := s.AllowNContext(c.ctx, "k", 1)
					if !errors.Is(err, c.want) || errors.Is(err, ErrUnavailable) {
						t.Fatalf("err = %v, want %v and not ErrUnavailable", err, c.want)
					}
					if pol == FailOpen && !d.Allowed {
						t.Fatalf("FailOpen's decision for a caller that gave up: %+v", d)
					}
				}
			}
			// A stall longer than the caller's own deadline (shorter than
			// Timeout): the caller's problem, not a server fault.
			srv.Pause()
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond) // about deadlines
				_, err := s.AllowNContext(ctx, "k", 1)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
					t.Fatalf("caller deadline during a stall: err = %v", err)
				}
			}
			srv.Resume()
			st := s.Stats()
			if st.BreakerOpens != 0 || st.BreakerOpen || st.Canceled != 15 || st.Timeouts+st.Late+st.Errors != 0 {
				t.Fatalf("stats: %+v, want 15 Canceled and no fault", st)
			}
			if pol == FailLocal {
				// FailLocal answered by peeking: the local engine is untouched.
				if d := s.localLimiter().Peek("k"); !d.Allowed || d.Remaining != 3 {
					t.Fatalf("FailLocal engine after callers gave up: %+v, want an untouched key (Remaining 3)", d)
				}
			}
			for i := range 3 {
				if d, err := s.AllowNContext(context.Background(), "k", 1); err != nil || !d.Allowed {
					t.Fatalf("request %d after the cancellations: %+v, %v; nothing may have been consumed", i, d, err)
				}
			}
		})
	}
}

// TestStalledServerNoGhostWrites: requests that sit in the
// socket of a stopped server and time out must not consume quota when the
// server wakes up and reads them. Under FailClosed they were denied, under
// FailLocal decided locally: either way Redis must hold exactly what was
// admitted before the stall, as read by a plain client afterwards.
func TestStalledServerNoGhostWrites(t *testing.T) {
	for _, alg := range algorithms {
		for _, pol := range []FailPolicy{FailClosed, FailLocal} {
			t.Run(alg.String()+"/"+pol.String(), func(t *testing.T) {
				srv := redistest.Start(t)
				admin := newClient(t, srv.Addr())
				const stalled = 18
				s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: alg, Limit: 100, Window: time.Hour,
					OnFailure: pol, Timeout: 200 * time.Millisecond}) // this test is about the timeout
				for range 2 {
					if d, err := s.AllowNContext(context.Background(), "k", 1); err != nil || !d.Allowed {
						t.Fatalf("before the stall: %+v, %v", d, err)
					}
				}
				warmPool(t, s.cfg.Client, stalled)
				srv.Pause()
				concurrently(stalled, func() {
					d, err := s.AllowNContext(context.Background(), "k", 1)
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("stalled call: %+v, %v; want a timeout", d, err)
					}
					if pol == FailClosed && d.Allowed {
						t.Errorf("FailClosed admitted during the stall: %+v", d)
					}
				})
				srv.Resume()
				// The server now reads the buffered scripts, in order, before
				// it gets to this PING on a new connection.
				if err := admin.Ping(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				n := held(t, admin, s, "k")
				if n != 2 {
					t.Fatalf("after the stall Redis holds %d requests, want the 2 admitted before it (%d timed-out calls ran late)", n, n-2)
				}
				if st := s.Stats(); st.Timeouts != stalled {
					t.Fatalf("stats: %+v, want %d timeouts", st, stalled)
				}
			})
		}
	}
}

// warmPool opens n connections in client's pool and leaves them idle, so
// that n concurrent calls write their commands at once, without a
// connection handshake that a paused server would never answer: the
// commands then really sit in the server's socket.
func warmPool(t *testing.T, client redis.UniversalClient, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// BLPOP holds its connection for 100 ms, so the n calls
			// overlap and each takes its own.
			err := client.BLPop(context.Background(), 100*time.Millisecond, fmt.Sprintf("warm:%d", i)).Err()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Errorf("warm-up: %v", err)
			}
		}()
	}
	wg.Wait()
	if st := client.PoolStats(); st.IdleConns < uint32(n) {
		t.Fatalf("pool holds %d idle connections after the warm-up, want %d", st.IdleConns, n)
	}
}

// TestLateWriteTakenBack: a script whose writes run past
// its deadline (here AllowN of 65535 with a 1 ms deadline in the server's
// clock: adding 65535 entries takes far longer) takes them back and says
// late; with time to spare it records all of them.
func TestLateWriteTakenBack(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	const n = engine.MaxLogLimit
	run := func(key string, budget time.Duration) []int64 {
		tm, err := client.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		dl := tm.Add(budget).UnixMicro()
		r, err := client.Eval(context.Background(), logScript.src, []string{key}, n, 3_600_000_000, n, 1, "", 3_600_001, dl).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := run("late", time.Millisecond); r[0] != -1 {
		t.Fatalf("65535 entries within 1 ms: reply %v, want late (-1)", r)
	}
	if got := logEntries(t, client, "late"); got != 0 {
		t.Fatalf("a late write left %d entries", got)
	}
	if ttl := client.PTTL(context.Background(), "late").Val(); ttl < 0 && ttl != -2*time.Nanosecond {
		t.Fatalf("the late key has no TTL (%v): it would never be removed", ttl)
	}
	if r := run("ok", time.Minute); r[0] != 1 {
		t.Fatalf("65535 entries within a minute: reply %v, want allowed", r)
	}
	if got := logEntries(t, client, "ok"); got != n {
		t.Fatalf("recorded %d entries, want %d", got, n)
	}
}

// TestHugeAllowNConsistentUnderTightBudget: AllowN(k, 65535) under a budget
// too short to write 65535 entries returns a fault and records nothing
// (Redis takes its writes back), and under a generous one is admitted and
// records all: the caller's view and Redis agree.
func TestHugeAllowNConsistentUnderTightBudget(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	cfg := Config{Client: client, Algorithm: engine.SlidingLog, Limit: engine.MaxLogLimit, Window: time.Hour, OnFailure: FailClosed}
	warm := newStore(t, cfg)
	warm.Peek("warm")                  // loads the script
	cfg.Timeout = 8 * time.Millisecond // about the deadline: 6 ms for the server, far too little
	short := newStore(t, cfg)
	d, err := short.AllowNContext(context.Background(), "k", engine.MaxLogLimit)
	if err == nil || d.Allowed {
		t.Fatalf("65535 within 8 ms: %+v, %v; want a timeout", d, err)
	}
	if got := logEntries(t, client, stateKey(short, "k")); got != 0 {
		t.Fatalf("denied to the client, yet Redis recorded %d", got)
	}
	if d, err := warm.AllowNContext(context.Background(), "k", engine.MaxLogLimit); err != nil || !d.Allowed {
		t.Fatalf("65535 within %v: %+v, %v", testTimeout, d, err)
	}
	if got := logEntries(t, client, stateKey(warm, "k")); got != engine.MaxLogLimit {
		t.Fatalf("admitted 65535, Redis recorded %d", got)
	}
}

// TestBreakerCountsIntervalsNotCalls: a stall shorter than a
// few Timeouts with many calls in flight counts as one failing interval
// (or two), so it does not open the breaker; a sustained outage does.
func TestBreakerCountsIntervalsNotCalls(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	const inFlight = 12
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter, Limit: 1000, Window: time.Minute,
		OnFailure: FailOpen, Timeout: 100 * time.Millisecond, BreakerThreshold: 4}) // about timeouts
	if d := s.AllowN("k", 1); !d.Allowed {
		t.Fatalf("healthy: %+v", d)
	}
	srv.Pause()
	concurrently(inFlight, func() { _, _ = s.AllowNContext(context.Background(), "k", 1) })
	srv.Resume()
	if st := s.Stats(); st.Timeouts != inFlight || st.BreakerOpens != 0 {
		t.Fatalf("after one stall with %d calls in flight: %+v; want %d timeouts and a closed breaker", inFlight, st, inFlight)
	}
	if _, err := s.AllowNContext(context.Background(), "k", 1); err != nil {
		t.Fatalf("after the stall: %v", err)
	}
	srv.Kill() // a sustained outage: refused connections, interval after interval
	eventually(t, "breaker opening under a sustained outage", func() bool {
		_, err := s.AllowNContext(context.Background(), "k", 1)
		return errors.Is(err, ErrCircuitOpen)
	})
}

// TestBreakerIntervals drives the breaker with synthetic times.
func TestBreakerIntervals(t *testing.T) {
	b := &breaker{threshold: 3, cooldown: 1000, interval: 100}
	b.lastFail.Store(-1)
	for _, now := range []int64{0, 5, 50, 99} { // one interval
		b.failure(now, false)
	}
	if b.streak.Load() != 1 || b.isOpen() {
		t.Fatalf("4 failures in one interval: streak %d, open %v", b.streak.Load(), b.isOpen())
	}
	b.failure(150, false)
	b.success()
	b.failure(250, false)
	b.failure(350, false)
	if b.isOpen() {
		t.Fatal("a success between failing intervals must restart the count")
	}
	b.failure(450, false)
	if !b.isOpen() || b.opens.Load() != 1 {
		t.Fatalf("3 consecutive failing intervals: open %v, opens %d", b.isOpen(), b.opens.Load())
	}
	if ok, _ := b.allow(500); ok {
		t.Fatal("open breaker let a call through during the cool-down")
	}
	ok, probe := b.allow(1450)
	if !ok || !probe {
		t.Fatal("no probe after the cool-down")
	}
	if ok, _ := b.allow(1450); ok {
		t.Fatal("a second call while the probe is in flight")
	}
	b.abandon() // the probe's caller gave up: the next call probes
	if ok, probe := b.allow(1451); !ok || !probe {
		t.Fatal("no probe after an abandoned one")
	}
	b.success()
	if b.isOpen() {
		t.Fatal("successful probe did not close the breaker")
	}
}

// TestRejectsClientsThatIgnoreTimeout: clients whose
// options would let a call outlive Timeout, or go-redis resend a script,
// are rejected at New with an error naming the option.
func TestRejectsClientsThatIgnoreTimeout(t *testing.T) {
	base := Config{Algorithm: engine.SlidingLog, Limit: 1, Window: time.Second, Timeout: 50 * time.Millisecond}
	cases := []struct {
		name   string
		client redis.UniversalClient
		want   string // in the error
	}{
		{"no ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), "ContextTimeoutEnabled"},
		{"retries", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), "MaxRetries"},
		{"no socket deadline", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: -2}), "ReadTimeout"},
		{"socket deadline first", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, WriteTimeout: 10 * time.Millisecond}), "WriteTimeout"},
		{"cluster without ContextTimeoutEnabled", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), "ContextTimeoutEnabled"},
		{"cluster retries", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, MaxRetries: 2}), "MaxRetries"},
		{"ring retries", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true}), "MaxRetries"},
		{"unknown client type", wrapped{redis.NewClient(testClientOptions("127.0.0.1:1"))}, "cannot be checked"},
	}
	for _, c := range cases {
		cfg := base
		cfg.Client = c.client
		_, err := New(cfg)
		if !errors.Is(err, engine.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Config.Client") {
			t.Errorf("%s: err = %v; want ErrInvalidConfig naming Config.Client and %s", c.name, err, c.want)
		}
		_ = c.client.Close()
	}
	for _, c := range []redis.UniversalClient{
		redis.NewClient(testClientOptions("127.0.0.1:1")),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true, MaxRetries: -1}),
	} {
		cfg := base
		cfg.Client = c
		if _, err := New(cfg); err != nil {
			t.Errorf("%T with the required options rejected: %v", c, err)
		}
		_ = c.Close()
	}
}

// wrapped is a redis.UniversalClient New cannot see through.
type wrapped struct{ *redis.Client }

// TestKeyTooLongDeniedWithoutRoundTrip: a key longer than MaxKeyLen is denied with
// an errors.Is-able error and never reaches Redis; MaxKeyLen itself is
// fine.
func TestKeyTooLongDeniedWithoutRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 5, Window: time.Minute, OnFailure: FailOpen})
	h := newHybrid(t, HybridConfig{Config: Config{Client: client, Algorithm: engine.SlidingLog, Limit: 5, Window: time.Minute, OnFailure: FailOpen}})
	long := strings.Repeat("k", MaxKeyLen+1)
	for name, rl := range map[string]engine.RateLimiter{"store": s, "hybrid": h} {
		d, err := rl.AllowNContext(context.Background(), long, 1)
		if d.Allowed || !errors.Is(err, ErrKeyTooLong) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: key of %d bytes: %+v, %v; want denied with ErrKeyTooLong", name, len(long), d, err)
		}
		if _, err := rl.PeekContext(context.Background(), long); !errors.Is(err, ErrKeyTooLong) {
			t.Fatalf("%s: peek: %v", name, err)
		}
		if err := rl.ResetContext(context.Background(), long); !errors.Is(err, ErrKeyTooLong) {
			t.Fatalf("%s: reset: %v", name, err)
		}
	}
	if n := client.DBSize(context.Background()).Val(); n != 0 {
		t.Fatalf("a too-long key reached Redis: %d keys", n)
	}
	if st := s.Stats(); st.KeysTooLong != 3 {
		t.Fatalf("KeysTooLong = %d, want 3", st.KeysTooLong)
	}
	if d, err := s.AllowNContext(context.Background(), long[:MaxKeyLen], 1); err != nil || !d.Allowed {
		t.Fatalf("key of MaxKeyLen bytes: %+v, %v", d, err)
	}
}

// quietClientLog drops go-redis's internal log lines ("failed to dial ..."),
// which the fault tests provoke on purpose. The logger is process-wide; no
// test here depends on it.
func quietClientLog(*testing.T) { redis.SetLogger(voidLogger{}) }

type voidLogger struct{}

func (voidLogger) Printf(context.Context, string, ...interface{}) {}

// TestLogNamesNeverShared: a log entry's name is taken from the writing
// script run's TIME; when that name is already taken (a failover to a
// server whose clock is behind, a clock that stepped back), the write picks
// a fresh one instead of overwriting the old entry (which would lose a
// request). The script's write is run here with a TIME the test chooses.
func TestLogNamesNeverShared(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	// logWrite with its inputs: TIME (sec, µs) as given, n entries at t.
	harness := `
local tm = {ARGV[1], ARGV[2]}
local real = tm[1] * 1000000 + tm[2]
local K = KEYS[1]
local n = tonumber(ARGV[3])
local single = true
local t, now, W, from, dl, last = real, real, 1000000, real - 1000000, 1e17, nil
local tS, fromS = string.format('%d', t), string.format('%d', from)
local relTTL = '60000'
` + logWrite + `
return {ok and 1 or 0, first}`
	write := func(sec, usec string, n int) []int64 {
		t.Helper()
		r, err := client.Eval(ctx, harness, []string{"names"}, sec, usec, n).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	write("1700000000", "5", 1)
	write("1700000000", "5", 1) // the same µs again: a second entry, not an overwrite
	write("1700000000", "5", 1)
	if got := client.ZCard(ctx, "names").Val(); got != 3 {
		t.Fatalf("three writes of one request at one µs left %d entries", got)
	}
	r1 := write("1700000001", "7", 3)
	r2 := write("1700000001", "7", 3)
	if got := client.ZCard(ctx, "names").Val(); got != 9 || r1[1] != 1 || r2[1] != 1000001 {
		t.Fatalf("two writes of three at one µs: %d entries, first indexes %d and %d", got, r1[1], r2[1])
	}
}

// TestLogScoresFromServerTimeExactForEveryMicrosecond: the log script
// builds now's score as text from TIME's two fields (seconds, then µs
// without leading zeros), padding the µs to six digits. Run here with a
// TIME the test chooses, every width of the µs field must give the entry
// the exact µs as its score, and the window that the next call counts must
// hold exactly the entries of the last Window.
func TestLogScoresFromServerTimeExactForEveryMicrosecond(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	// logWindow and logWrite with TIME (sec, µs) as given; ARGV[5] is ""
	// (the server's clock), as in a Store without Config.Clock.
	harness := `
local tm = {ARGV[1], ARGV[2]}
local real = tm[1] * 1000000 + tm[2]
local now, rebase, W, n, dl = real, true, 1000000, 1, 1e17
` + logWindow + `
local single, relTTL = true, nil
` + logWrite + `
return {c, ok and 1 or 0}`
	var want []int64
	for i, usec := range []string{"0", "7", "45", "306", "1234", "56789", "123456", "999999"} {
		sec := "1700000000"
		if i >= 4 { // a second later: the first four leave the window
			sec = "1700000001"
		}
		r, err := client.Eval(ctx, harness, []string{"scores"}, sec, usec, "", "", "").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := strconv.ParseInt(sec, 10, 64)
		u, _ := strconv.ParseInt(usec, 10, 64)
		at := s*1_000_000 + u
		// Entries in [at-W, at] before this one: the count the script saw.
		inWindow := int64(0)
		for _, w := range want {
			if w >= at-1_000_000 && w <= at {
				inWindow++
			}
		}
		if r[0] != inWindow || r[1] != 1 {
			t.Fatalf("call at %d µs counted %d entries in its window (ok %d), want %d", at, r[0], r[1], inWindow)
		}
		want = append(want, at)
	}
	got, err := client.ZRangeWithScores(ctx, "scores", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var scores []int64
	for _, z := range got {
		scores = append(scores, int64(z.Score))
	}
	slices.Sort(want)
	if !slices.Equal(scores, want) {
		t.Fatalf("entry scores %v, want the calls' µs %v", scores, want)
	}
}

// TestCancelOnTheWireBoundedByTimeout: a caller that
// cancels while its call sits in a stopped server's socket gets its answer
// when the call's deadline passes (go-redis does not interrupt a read on
// cancellation), so Timeout bounds how long a client that left holds a
// goroutine. It gets its context's error, and nothing is consumed for it:
// not in Redis (the server runs the call after its deadline), not from
// FailLocal's share; the stall still counts as the server's timeout.
func TestCancelOnTheWireBoundedByTimeout(t *testing.T) {
	quietClientLog(t)
	for _, pol := range []FailPolicy{FailClosed, FailLocal} {
		t.Run(pol.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			const timeout = 300 * time.Millisecond // about timeouts
			client := newClient(t, srv.Addr())
			s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 3, Window: time.Hour,
				OnFailure: pol, Timeout: timeout})
			warmPool(t, client, 1)
			srv.Pause()
			var worst time.Duration
			for range 3 {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(20*time.Millisecond, cancel)
				start := time.Now()
				d, err := s.AllowNContext(ctx, "k", 1)
				worst = max(worst, time.Since(start))
				if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
					t.Errorf("call cancelled during a stall: %+v, %v; want context.Canceled, not ErrUnavailable", d, err)
				}
			}
			srv.Resume()
			if worst > 3*timeout {
				t.Errorf("a cancelled call returned after %v, more than 3 x Timeout %v", worst, timeout)
			}
			if st := s.Stats(); st.Timeouts+st.Late == 0 {
				t.Errorf("stats %+v: the stall must still count as the server's", st)
			}
			if pol == FailLocal {
				if d := s.localLimiter().Peek("k"); d.Remaining != 3 {
					t.Errorf("FailLocal engine after three cancelled calls: %+v, want an untouched key (Remaining 3)", d)
				}
			}
			if n := held(t, client, s, "k"); n != 0 {
				t.Errorf("Redis holds %d requests for k after the cancelled calls; want 0", n)
			}
		})
	}
}

// TestGaveUpDuringServerFaultCountsTheFault: a caller that gave up while
// its call failed for the server's own reason (killed with the request in
// its socket: the connection breaks) gets its context's error, and the
// fault still counts as the server's (Stats.Errors, the breaker).
func TestGaveUpDuringServerFaultCountsTheFault(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 3, Window: time.Hour,
		OnFailure: FailClosed, BreakerThreshold: 1})
	warmPool(t, client, 1)
	srv.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, func() {
		cancel()
		srv.Kill() // the paused server dies: the call's connection is reset
	})
	_, err := s.AllowNContext(ctx, "k", 1)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want context.Canceled only", err)
	}
	if st := s.Stats(); st.Errors+st.Timeouts == 0 || st.BreakerOpens == 0 {
		t.Fatalf("stats %+v: the broken connection must count as the server's fault", st)
	}
}

// TestGCRAFailLocalGetsItsShareOfTheBurst: with Redis away, each node's
// FailLocal engine runs GCRA at Limit/Nodes per Window with a bucket of
// Burst/Nodes: two nodes, Burst 4, so this node admits 2 at once, then
// denies with the local engine's RetryAfter, and reports Burst/Nodes as
// its Limit.
func TestGCRAFailLocalGetsItsShareOfTheBurst(t *testing.T) {
	quietClientLog(t)
	c := redis.NewClient(testClientOptions("127.0.0.1:1")) // nothing listens
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(Config{Client: c, Algorithm: engine.GCRA, Limit: 10, Burst: 4, Window: time.Second,
		Nodes: 2, OnFailure: FailLocal, BreakerThreshold: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for i, want := range []bool{true, true, false} {
		d, err := s.AllowNContext(context.Background(), "k", 1)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d: err %v, want ErrUnavailable", i, err)
		}
		if d.Allowed != want || d.Limit != 2 {
			t.Fatalf("call %d: %+v, want allowed %v with Limit 2 (the node's share of Burst 4)", i, d, want)
		}
		if !want && (d.RetryAfter <= 0 || d.RetryAfter > time.Second) {
			t.Fatalf("call %d: RetryAfter %v, want the local engine's, within (0, 1s]", i, d.RetryAfter)
		}
	}
	if st := s.Stats(); st.FailLocal != 3 {
		t.Fatalf("stats %+v, want 3 FailLocal decisions", st)
	}
}
