package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// newHybrid builds a Hybrid, with testTimeout unless cfg sets a Timeout.
func newHybrid(t testing.TB, cfg HybridConfig) *Hybrid {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	h, err := NewHybrid(cfg)
	if err != nil {
		t.Fatalf("NewHybrid: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// maxInWindow returns the largest number of times in any closed interval
// [t-w, t] (times sorted).
func maxInWindow(ts []int64, w int64) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[lo] < ts[hi]-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

type traceReq struct {
	at   int64 // ns from the start
	key  string
	node int
}

// TestHybridOvershoot: three Hybrids (three "nodes") share one Redis, each
// replays a third of one trace in real time, and the admitted requests of
// every key in every window of length Window must stay within Limit +
// Bound(3) (+1 per node: a request measured before a first lease whose
// reservation lands after the window). For SlidingCounter this measures
// the bound that includes the counter's own approximation.
func TestHybridOvershoot(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range hybridAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			testHybridOvershoot(t, func() redis.UniversalClient { return newClient(t, srv.Addr()) }, alg)
		})
	}
}

func testHybridOvershoot(t *testing.T, client func() redis.UniversalClient, alg engine.Algorithm) {
	const (
		nodes  = 3
		limit  = 40
		window = 200 * time.Millisecond
		span   = 1200 * time.Millisecond
	)
	keys := []string{"a", "b"}
	prefix := "hy:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	var hs []*Hybrid
	for range nodes {
		hs = append(hs, newHybrid(t, HybridConfig{
			Config:       Config{Client: client(), Algorithm: alg, Limit: limit, Window: window, Nodes: nodes, Prefix: prefix},
			SyncInterval: 5 * time.Millisecond,
		}))
	}
	// The trace: each key gets Poisson arrivals at three times its limit
	// rate, plus a burst of 2 x Limit at a random moment; request i goes to
	// node i mod 3.
	rng := rand.New(rand.NewPCG(6, uint64(alg)))
	var trace []traceReq
	for _, k := range keys {
		rate := 3 * float64(limit) / float64(window) // per ns
		for at := 0.0; at < float64(span); at += rng.ExpFloat64() / rate {
			trace = append(trace, traceReq{at: int64(at), key: k})
		}
		b := int64(rng.IntN(int(span)))
		for range 2 * limit {
			trace = append(trace, traceReq{at: b, key: k})
		}
	}
	sort.SliceStable(trace, func(i, j int) bool { return trace[i].at < trace[j].at })
	for i := range trace {
		trace[i].node = i % nodes
	}

	var mu sync.Mutex
	admitted := map[string][]int64{}
	start := time.Now()
	var wg sync.WaitGroup
	for n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range trace {
				if r.node != n {
					continue
				}
				if d := time.Until(start.Add(time.Duration(r.at))); d > 0 {
					time.Sleep(d)
				}
				at := int64(time.Since(start)) // before the call: see the bound's note
				if hs[n].Allow(r.key) {
					mu.Lock()
					admitted[r.key] = append(admitted[r.key], at)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	ref, err := engine.New(engine.Config{Algorithm: alg, Limit: limit, Window: window, Clock: zeroClock{}})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	exact := map[string][]int64{} // the engine's admissions on the whole trace, one node, exact times
	for _, r := range trace {
		if ref.AllowAt(r.key, engine.Time(r.at)).Allowed {
			exact[r.key] = append(exact[r.key], r.at)
		}
	}
	bound := hs[0].Bound(nodes) + nodes
	for _, k := range keys {
		ts := admitted[k]
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		peak := maxInWindow(ts, int64(window))
		t.Logf("%v key %s: %d requests; hybrid admitted %d (engine on the whole trace %d); peak in a window %d (engine %d; Limit %d, overshoot %d, bound %d, MaxLease %d)",
			alg, k, countKey(trace, k), len(ts), len(exact[k]), peak, maxInWindow(exact[k], int64(window)), limit, max(0, peak-limit), bound, hs[0].MaxLease())
		if peak > limit+bound {
			t.Errorf("key %s: %d admitted in one window, above Limit %d + bound %d", k, peak, limit, bound)
		}
		if len(ts) == 0 {
			t.Errorf("key %s: nothing admitted", k)
		}
	}
	for i, h := range hs {
		t.Logf("node %d: %+v", i, h.Stats())
	}
}

type zeroClock struct{}

func (zeroClock) Now() int64 { return 0 }

func countKey(tr []traceReq, k string) int {
	n := 0
	for _, r := range tr {
		if r.key == k {
			n++
		}
	}
	return n
}

// TestHybridCloseReturnsTokens: after Close, every reserved but unspent
// token is back, so Redis holds exactly the admitted requests.
func TestHybridCloseReturnsTokens(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for _, alg := range hybridAlgorithms {
		t.Run(alg.String(), func(t *testing.T) { testHybridCloseReturnsTokens(t, client, alg) })
	}
}

func testHybridCloseReturnsTokens(t *testing.T, client redis.UniversalClient, alg engine.Algorithm) {
	h, err := NewHybrid(HybridConfig{
		Config:   Config{Client: client, Algorithm: alg, Limit: 100, Window: time.Hour, Prefix: fmt.Sprintf("ret:%v:", alg), Timeout: testTimeout},
		MaxLease: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 25 {
		if h.Allow("k") {
			admitted++
		}
		time.Sleep(time.Millisecond) // a few syncs: leases retired and returned on the way
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	st := h.Stats()
	if admitted == 0 || st.Allowed != uint64(admitted) || st.Leased-st.Returned != uint64(admitted) {
		t.Fatalf("admitted %d; stats %+v: want Leased - Returned = admitted", admitted, st)
	}
	if inRedis := held(t, client, h.s, "k"); inRedis != int64(admitted) {
		t.Fatalf("Redis holds %d requests after Close, admitted %d", inRedis, admitted)
	}
}

// TestHybridRedisDown: keys with a live lease keep deciding locally; a new
// key gets the fail policy; nothing panics and faults are counted.
func TestHybridRedisDown(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	// SyncInterval 10 s: a lease lives 20 s, however slow the machine.
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter,
		Limit: 1000, Window: time.Hour, OnFailure: FailClosed}, MaxLease: 100, SyncInterval: 10 * time.Second})
	if !h.Allow("warm") {
		t.Fatal("healthy: denied")
	}
	srv.Kill()
	if !h.Allow("warm") {
		t.Fatal("a key with a live lease denied while Redis is down")
	}
	d, err := h.AllowNContext(context.Background(), "new", 1)
	if d.Allowed || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("new key with Redis down under FailClosed: %+v, %v", d, err)
	}
	st := h.Stats()
	if st.Store.FailClosed == 0 || st.Store.Errors+st.Store.Timeouts == 0 || st.PipelineFaults == 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// slowTimeout is the Timeout of the slow-network tests, which are not about
// timeouts: under -race on a loaded machine a lease behind the delay proxy
// has been seen to take seconds. Their clients have no socket timeout of
// their own (ReadTimeout -1), as New requires of a Timeout above 3 s.
const slowTimeout = 10 * time.Second

func slowClient(t *testing.T, addr string) *redis.Client {
	o := testClientOptions(addr)
	o.ReadTimeout, o.WriteTimeout = -1, -1
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// askEvery asks for keys round after round (each key once per round, from
// a few goroutines), pausing gap after each round, until span has passed;
// it returns the admitted and total counts and the slowest decision. With
// a gap above 2 x SyncInterval, a key is never asked twice within one
// lease's life, so a node that gets its leases admits everything.
func askEvery(h *Hybrid, keys []string, gap, span time.Duration) (admitted, total int64, worst time.Duration) {
	var a, w atomic.Int64
	const workers = 128
	start := time.Now()
	for time.Since(start) < span {
		var wg sync.WaitGroup
		for g := range min(workers, len(keys)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < len(keys); i += workers {
					t0 := time.Now()
					if h.Allow(keys[i]) {
						a.Add(1)
					}
					raiseTo(&w, int64(time.Since(t0)))
				}
			}()
		}
		wg.Wait()
		total += int64(len(keys))
		time.Sleep(gap)
	}
	return a.Load(), total, time.Duration(w.Load())
}

func raiseTo(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// slowHybrid is a Hybrid behind proxy: SyncInterval 5 ms, Limit 1000 per
// second (MaxLease 10), FailClosed.
func slowHybrid(t *testing.T, proxy *redistest.Proxy, alg engine.Algorithm) *Hybrid {
	return newHybrid(t, HybridConfig{
		Config: Config{Client: slowClient(t, proxy.Addr()), Algorithm: alg, Limit: 1000, Window: time.Second,
			OnFailure: FailClosed, Timeout: slowTimeout},
		SyncInterval: 5 * time.Millisecond,
	})
}

// requireAllAdmitted asks for keys every 11 ms (askEvery) for span and
// requires every request admitted, none left to the policy.
func requireAllAdmitted(t *testing.T, h *Hybrid, keys []string, span time.Duration) {
	t.Helper()
	admitted, total, worst := askEvery(h, keys, 11*time.Millisecond, span)
	st := h.Stats()
	t.Logf("admitted %d of %d; slowest decision %v; %+v", admitted, total, worst, st)
	if st.Store.FailClosed != 0 || st.Late != 0 || st.PipelineFaults != 0 {
		t.Fatalf("decisions left to the policy: %+v", st)
	}
	if admitted != total {
		t.Fatalf("admitted %d of %d requests far below the limit (a Store admits all)", admitted, total)
	}
}

// TestHybridSlowNetwork: with a round trip of 12 ms and
// SyncInterval 5 ms (a lease used to die 10 ms after its send, so it
// arrived dead) and a request every 11 ms or more, far below the limit,
// the Hybrid admits every request, as a Store would, and leaves none to
// the policy: a request that finds no live lease waits for the one in
// flight.
func TestHybridSlowNetwork(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr(), 6*time.Millisecond)
	for _, alg := range hybridAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			h := slowHybrid(t, proxy, alg)
			requireAllAdmitted(t, h, []string{"k"}, 1500*time.Millisecond)
		})
	}
}

// TestHybridManyHotKeys: 1100 active keys (three pipeline
// chunks per sync) behind a 12 ms round trip: each chunk's leases count
// from its own send and receipt (they used to share the sync's start, so
// later chunks arrived dead), and every key is served without the policy.
func TestHybridManyHotKeys(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr(), 6*time.Millisecond)
	keys := make([]string, 2*pipelineChunk+76)
	for i := range keys {
		keys[i] = "hot:" + strconv.Itoa(i)
	}
	h := slowHybrid(t, proxy, engine.SlidingCounter)
	requireAllAdmitted(t, h, keys, 3*time.Second)
	if st := h.Stats(); st.SyncedKeys <= uint64(len(keys)) {
		t.Fatalf("the sync loop renewed %d key leases: the test did not exercise multi-chunk syncs", st.SyncedKeys)
	}
}

// TestLateLeaseIsAFault: when the round trip exceeds
// Timeout, no lease can arrive in time: each decision without one is made
// by the fail policy and counted, never silently denied.
func TestLateLeaseIsAFault(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr(), 60*time.Millisecond)
	for _, pol := range []FailPolicy{FailOpen, FailClosed} {
		t.Run(pol.String(), func(t *testing.T) {
			h := newHybrid(t, HybridConfig{
				Config: Config{Client: newClient(t, proxy.Addr()), Algorithm: engine.SlidingLog, Limit: 100, Window: time.Second,
					OnFailure: pol, Timeout: 50 * time.Millisecond, BreakerThreshold: 1000}, // about timeouts
				SyncInterval: 5 * time.Millisecond,
			})
			const n = 10
			for i := range n {
				d, err := h.AllowNContext(context.Background(), "k", 1)
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("decision %d at 120 ms RTT with a 50 ms Timeout: %+v, %v; want a timeout", i, d, err)
				}
				if d.Allowed != (pol == FailOpen) {
					t.Fatalf("decision %d: %+v, want %v's", i, d, pol)
				}
			}
			st := h.Stats()
			policy := st.Store.FailOpen + st.Store.FailClosed
			if policy != n || st.Store.Timeouts+st.Late == 0 {
				t.Fatalf("stats: %+v; want %d policy decisions and the timeouts counted", st, n)
			}
		})
	}
}

// TestHybridStallBoundedByTimeout: eight requests for a new
// key while Redis is stopped all wait for the one lease in flight and give
// up at Timeout: none waits for the others' sends (which made the worst
// decision take 5 x Timeout).
func TestHybridStallBoundedByTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 200 * time.Millisecond // about timeouts
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter,
		Limit: 100, Window: time.Second, OnFailure: FailClosed, Timeout: timeout}})
	h.Allow("warm") // the script is loaded and a connection is open
	srv.Pause()
	w := concurrently(8, func() {
		if d, err := h.AllowNContext(context.Background(), "new", 1); d.Allowed || err == nil {
			t.Errorf("stalled Redis under FailClosed: %+v, %v", d, err)
		}
	})
	srv.Resume()
	t.Logf("slowest decision %v (Timeout %v); %+v", w, timeout, h.Stats())
	if w > 3*timeout {
		t.Fatalf("slowest decision during a stall took %v, more than 3 x Timeout %v", w, timeout)
	}
}

// TestLeaseReturns: returns apply however they leave the
// state (a counter brought back to 0 by a return is 0, not the grant) and
// count once when a node sends them again after a lost reply.
func TestLeaseReturns(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	lease := func(sc *script, keys []string, g int64, rets ...any) []int64 {
		t.Helper()
		argv := append([]any{100, 3_600_000_000, g, 7_200_001, int64(1) << 52, len(rets) / 3}, rets...)
		if sc == counterLeaseScript {
			argv = append(argv, "node-1")
		}
		r, err := client.Eval(ctx, sc.src, keys, argv...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Run("counter", func(t *testing.T) {
		keys := []string{"c", "c!marks"}
		r := lease(counterLeaseScript, keys, 5)
		if r[0] != 5 {
			t.Fatalf("grant: %v", r)
		}
		w := r[1]
		lease(counterLeaseScript, keys, 0, w, 5, 1) // return all 5 (return seq 1)
		if _, _, cur := readCounter(t, client, "c"); cur != 0 {
			t.Fatalf("granted 5, returned 5: the state still counts %d", cur)
		}
		r = lease(counterLeaseScript, keys, 3)
		lease(counterLeaseScript, keys, 0, w, 5, 1) // the same return again (a lost reply)
		if _, _, cur := readCounter(t, client, "c"); cur != r[0] {
			t.Fatalf("a resent return counted twice: state %d, want %d", cur, r[0])
		}
		lease(counterLeaseScript, keys, 0, w, 1, 1, w, 2, 2) // seq 1 again and a new seq 2
		if _, _, cur := readCounter(t, client, "c"); cur != r[0]-2 {
			t.Fatalf("state %d after a new return of 2, want %d", cur, r[0]-2)
		}
	})
	t.Run("log", func(t *testing.T) {
		keys := []string{"l"}
		r := lease(logLeaseScript, keys, 5)
		if r[0] != 5 {
			t.Fatalf("grant: %v", r)
		}
		at, first := r[1], r[2]
		lease(logLeaseScript, keys, 0, at, first, 5)
		if n := logEntries(t, client, "l"); n != 0 {
			t.Fatalf("granted 5, returned 5: %d entries left", n)
		}
		lease(logLeaseScript, keys, 3)
		lease(logLeaseScript, keys, 0, at, first, 5) // resent: members are never reused
		if n := logEntries(t, client, "l"); n != 3 {
			t.Fatalf("a resent return removed later entries: %d left, want 3", n)
		}
	})
}

// TestHybridCallerGivingUp (Hybrid): a caller whose context
// ends while it waits for a lease gets its context's error, not
// ErrUnavailable; the wait is not counted as a late lease and FailLocal
// consumes nothing for it.
func TestHybridCallerGivingUp(t *testing.T) {
	srv := redistest.Start(t)
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog,
		Limit: 2, Window: time.Hour, OnFailure: FailLocal}})
	h.Allow("warm")
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond) // about deadlines
	d, err := h.AllowNContext(ctx, "cold", 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("caller deadline while waiting for a lease: %+v, %v", d, err)
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if _, err := h.AllowNContext(cancelled, "cold2", 1); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled caller: %v", err)
	}
	srv.Resume()
	if st := h.Stats(); st.Late != 0 || st.Store.FailLocal != 2 {
		t.Fatalf("stats: %+v; want no late lease and two FailLocal peeks", st)
	}
	if l := h.s.localLimiter(); l.Peek("cold").Remaining != 2 || l.Peek("cold2").Remaining != 2 {
		t.Fatal("FailLocal consumed for callers that gave up")
	}
}

// TestHybridReturnsAcrossIdleDrop: a key entry dropped while idle and
// created again still has its returns applied (return seqs are per node,
// not per entry; with per-entry seqs Redis skipped the new entry's returns
// as resends and held the tokens), so after Close Redis holds exactly the
// admitted requests.
func TestHybridReturnsAcrossIdleDrop(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	h, err := NewHybrid(HybridConfig{Config: Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 1000,
		Window: time.Hour, Timeout: testTimeout}, MaxLease: 10})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for round := range 2 {
		for range 3 {
			if h.Allow("k") {
				admitted++
			}
		}
		if round == 0 {
			eventually(t, "the idle key's entry dropped", func() bool { return h.Stats().Keys == 0 })
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, held := readCounter(t, client, stateKey(h.s, "k")); held != int64(admitted) {
		t.Fatalf("Redis holds %d after Close, admitted %d; %+v", held, admitted, h.Stats())
	}
}

// TestHybridStallNoStrayLeases (Hybrid): lease requests that
// sit in a stopped server's socket and time out are refused when it wakes
// up, so no tokens end up reserved that the node never received: after
// Close, Redis holds exactly what the node admitted, key by key.
func TestHybridStallNoStrayLeases(t *testing.T) {
	for _, alg := range hybridAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			client := newClient(t, srv.Addr())
			h, err := NewHybrid(HybridConfig{Config: Config{Client: client, Algorithm: alg, Limit: 1000, Window: time.Hour,
				OnFailure: FailClosed, Timeout: 200 * time.Millisecond}, MaxLease: 10}) // about timeouts
			if err != nil {
				t.Fatal(err)
			}
			admitted := map[string]int64{}
			allow := func(k string) {
				if h.Allow(k) {
					admitted[k]++
				}
			}
			allow("warm")
			warmPool(t, client, 8)
			srv.Pause()
			for i := range 6 {
				allow("cold" + strconv.Itoa(i)) // each sends a lease into the socket and times out
			}
			time.Sleep(300 * time.Millisecond) // the background syncs time out too
			srv.Resume()
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			for _, k := range append([]string{"warm"}, "cold0", "cold5") {
				if n := held(t, client, h.s, k); n != admitted[k] {
					t.Fatalf("key %s: Redis holds %d after Close, the node admitted %d (a lease ran after its deadline?); %+v", k, n, admitted[k], h.Stats())
				}
			}
		})
	}
}

// TestHybridOpenBreakerNoResendLoop: with the breaker open, a request
// without a lease gets the policy's decision after one short-circuited
// send, not after resending in a loop until its deadline (a send the
// breaker refused used to leave no send time, so the next was due at once).
func TestHybridOpenBreakerNoResendLoop(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter,
		Limit: 100, Window: time.Minute, OnFailure: FailClosed, BreakerThreshold: 1, BreakerCooldown: time.Hour}})
	srv.Kill()
	eventually(t, "the breaker open", func() bool {
		h.Allow("k")
		return h.Stats().Store.BreakerOpen
	})
	before := h.Stats().Store.ShortCircuits
	for i := range 20 {
		h.Allow("new" + strconv.Itoa(i))
	}
	// One send per new key, plus whatever the background sync sent meanwhile
	// (at most one per key per SyncInterval).
	if n := h.Stats().Store.ShortCircuits - before; n > 200 {
		t.Fatalf("%d short-circuited sends for 20 requests", n)
	}
}

// TestWaitSurfacesBackendFault: engine.WaitN on a
// Hybrid or a Store whose Redis is gone returns the backend's error (the
// FailClosed policy denied) instead of retrying until the context ends.
func TestWaitSurfacesBackendFault(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	base := Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 2, Window: time.Hour, OnFailure: FailClosed}
	h := newHybrid(t, HybridConfig{Config: base, MaxLease: 2, SyncInterval: 20 * time.Millisecond})
	s := newStore(t, base)
	for _, rl := range []engine.RateLimiter{h, s} {
		for range 2 { // the key is full: a waiter must wait for Redis
			if err := engine.Wait(context.Background(), rl, fmt.Sprintf("%T", rl)); err != nil {
				t.Fatalf("%T healthy: %v", rl, err)
			}
		}
	}
	srv.Kill()
	for _, rl := range []engine.RateLimiter{h, s} {
		// A minute: far longer than any fault takes to show; the test is
		// that WaitN returns the fault, not that it is quick.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := engine.Wait(ctx, rl, fmt.Sprintf("%T", rl))
		ended := ctx.Err()
		cancel()
		if !errors.Is(err, ErrUnavailable) || ended != nil || strings.Contains(err.Error(), "values, want") {
			t.Errorf("%T: Wait with Redis down = %v (ctx %v); want ErrUnavailable before the context ends", rl, err, ended)
		}
	}
}

// oneTokenLeases is a Hybrid on srv whose leases hold one token
// (MaxLease 1, SyncInterval 5 ms), with key "k" admitted once: its lease
// is live and too small for any request of n > 1.
func oneTokenLeases(t *testing.T, srv *redistest.Server, alg engine.Algorithm, limit int, prefix string) *Hybrid {
	t.Helper()
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: alg,
		Limit: limit, Window: time.Hour, Prefix: prefix + alg.String() + ":"}, MaxLease: 1, SyncInterval: 5 * time.Millisecond})
	if !h.Allow("k") {
		t.Fatal("first Allow denied")
	}
	return h
}

// TestHybridRequestAboveMaxLease (found by an adversarial review): with a
// live lease renewed at the key's usual size (MaxLease 1 here),
// AllowN(k, n > MaxLease) was denied from that lease forever, though Redis
// had room: the lease cannot judge n. Such a request asks Redis for n; on
// an empty window every one is admitted, and WaitN(n) succeeds at once.
func TestHybridRequestAboveMaxLease(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			// 10 requests of 3 in a window of Limit 100, 4 x SyncInterval
			// apart: each finds a lease renewed at the usual size, or
			// one widened to 3 and unspent (the lease the previous one
			// spent, sent and received before it, expired at most
			// 2 x SyncInterval after it). (A request that finds a lease asked for n or more
			// but partly spent is denied until the next sync, as one of 1
			// is: MaxLease per SyncInterval, widened to n here, is the
			// node's pace.)
			h := oneTokenLeases(t, srv, alg, 100, "above:")
			for i := range 10 {
				time.Sleep(20 * time.Millisecond)
				if d := h.AllowN("k", 3); !d.Allowed {
					t.Fatalf("AllowN(k, 3) #%d denied with 100 per window and %d used: %+v; %+v", i, 1+3*i, d, h.Stats())
				}
			}
			if err := engine.WaitN(context.Background(), h, "k", 3); err != nil {
				t.Fatalf("WaitN(k, 3): %v", err)
			}
		})
	}
}

// TestHybridWideRequestNotBlockedByOwnLease (found reviewing the fix above): a
// request of n larger than the live lease was asked for retires that
// lease first, so its unspent tokens go back in the same script run: on a
// Limit-10 key with one request admitted, AllowN(k, 9) is admitted (it
// never was while the node kept its own token reserved).
func TestHybridWideRequestNotBlockedByOwnLease(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			h := oneTokenLeases(t, srv, alg, 10, "wide:")
			time.Sleep(12 * time.Millisecond) // the sync renews a one-token lease
			if d := h.AllowN("k", 9); !d.Allowed {
				t.Fatalf("AllowN(k, 9) after 1 of 10: %+v; %+v", d, h.Stats())
			}
			if d := h.AllowN("k", 2); d.Allowed {
				t.Fatalf("AllowN(k, 2) with 10 of 10 used: admitted; %+v", h.Stats())
			}
		})
	}
}

// TestHybridGaveUpAfterFailedSend: a caller whose context has ended gets
// its context's error and consumes nothing, also on a key whose last
// lease request failed (where the policy decides for the others).
func TestHybridGaveUpAfterFailedSend(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog,
		Limit: 4, Window: time.Hour, OnFailure: FailLocal, Nodes: 1}, SyncInterval: time.Second})
	srv.Kill()
	if _, err := h.AllowNContext(context.Background(), "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis down: err = %v, want ErrUnavailable", err)
	}
	before := h.s.localLimiter().Peek("k").Remaining
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if _, err := h.AllowNContext(ctx, "k", 1); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("cancelled caller: err = %v, want context.Canceled only", err)
		}
	}
	if after := h.s.localLimiter().Peek("k").Remaining; after != before {
		t.Fatalf("FailLocal share went from %d to %d remaining for callers that gave up", before, after)
	}
}

// TestNewHybridRejectsPenalty: a Hybrid decides denials in memory, so it
// cannot record them in Redis; NewHybrid refuses Penalty with an error
// naming the field instead of ignoring it.
func TestNewHybridRejectsPenalty(t *testing.T) {
	for _, alg := range hybridAlgorithms {
		h, err := NewHybrid(HybridConfig{Config: Config{Client: newClient(t, "127.0.0.1:1"), Algorithm: alg, Limit: 10, Window: 500 * time.Millisecond, Penalty: true}})
		if err == nil {
			_ = h.Close()
			t.Fatalf("%v: NewHybrid accepted Penalty", alg)
		}
		if !errors.Is(err, engine.ErrInvalidConfig) || !strings.Contains(err.Error(), "Penalty") {
			t.Fatalf("%v: err = %v; want ErrInvalidConfig naming Penalty", alg, err)
		}
	}
}

// TestInvalidSizeNeverAdmissible: as in the engine, a request of n <= 0 or
// n > Limit is denied with RetryAfter engine.Never (no wait admits it),
// counted as Invalid rather than Denied, and consumes nothing.
func TestInvalidSizeNeverAdmissible(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 3, Window: time.Minute, Prefix: "inv:"})
	h, err := NewHybrid(HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 3, Window: time.Minute, Timeout: testTimeout, Prefix: "invh:"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, rl := range []engine.RateLimiter{s, h} {
		for _, n := range []int{0, -1, 4} {
			if d := rl.AllowN("k", n); d.Allowed || d.RetryAfter != engine.Never || d.Admissible() {
				t.Fatalf("%T AllowN(%d) = %+v; want denied with RetryAfter Never", rl, n, d)
			}
		}
		if d := rl.AllowN("k", 3); !d.Allowed {
			t.Fatalf("%T: the invalid calls consumed quota: %+v", rl, d)
		}
	}
	if st := s.Stats(); st.Invalid != 3 || st.Denied != 0 {
		t.Fatalf("Store stats %+v; want Invalid 3, Denied 0", st)
	}
	if st := h.Stats(); st.Invalid != 3 || st.Denied != 0 {
		t.Fatalf("Hybrid stats %+v; want Invalid 3, Denied 0", st)
	}
}

// TestHybridAfterCloseReservesNoLease: after Close no sync returns leases,
// so a decision without one is made by an exact round trip: Redis holds
// only the requests admitted, not a lease's spare tokens.
func TestHybridAfterCloseReservesNoLease(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for _, alg := range hybridAlgorithms {
		h := newHybrid(t, HybridConfig{Config: Config{Client: client, Algorithm: alg, Limit: 100, Window: time.Minute, Prefix: "closed" + alg.String() + ":"}, MaxLease: 50})
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if !h.Allow("k") {
				t.Fatalf("%v: request %d after Close denied", alg, i)
			}
		}
		if n := held(t, client, h.s, "k"); n != 3 {
			t.Fatalf("%v: Redis holds %d for key k after 3 admitted requests, want 3 (no lease after Close)", alg, n)
		}
	}
}
