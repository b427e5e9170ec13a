package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

func newHybrid(t testing.TB, cfg HybridConfig) *Hybrid {
	t.Helper()
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
// every key in every window of length Window must stay within
// Limit + Bound(3) (+1 per node: a request measured before a blocking first
// lease whose reservation lands after the window). The exact global answer
// (the in-memory engine on the whole trace) is reported next to it.
func TestHybridOvershoot(t *testing.T) {
	srv := redistest.Start(t)
	const (
		nodes  = 3
		limit  = 40
		window = 200 * time.Millisecond
		span   = 1200 * time.Millisecond
	)
	keys := []string{"a", "b"}
	var hs []*Hybrid
	for range nodes {
		hs = append(hs, newHybrid(t, HybridConfig{
			Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: limit, Window: window,
				Nodes: nodes, Timeout: time.Second, Prefix: "hy:"},
			SyncInterval: 5 * time.Millisecond,
		}))
	}
	// The trace: each key gets Poisson arrivals at three times its limit
	// rate, plus a burst of 2 x Limit at a random moment; request i goes to
	// node i mod 3.
	rng := rand.New(rand.NewPCG(6, 6))
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

	ref, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: limit, Window: window, Clock: zeroClock{}})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	exact := map[string]int{}
	for _, r := range trace {
		if ref.AllowAt(r.key, r.at).Allowed {
			exact[r.key]++
		}
	}
	bound := hs[0].Bound(nodes) + nodes
	for _, k := range keys {
		ts := admitted[k]
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		peak := maxInWindow(ts, int64(window))
		t.Logf("key %s: %d requests; hybrid admitted %d, exact global %d; peak in a window %d (Limit %d, overshoot %d, bound %d, MaxLease %d)",
			k, countKey(trace, k), len(ts), exact[k], peak, limit, max(0, peak-limit), bound, hs[0].MaxLease())
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
// token is back, so the Redis log holds exactly the admitted requests.
func TestHybridCloseReturnsTokens(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			prefix := fmt.Sprintf("ret:%v:", alg)
			h, err := NewHybrid(HybridConfig{
				Config:   Config{Client: client, Algorithm: alg, Limit: 100, Window: time.Hour, Prefix: prefix},
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
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			st := h.Stats()
			if admitted == 0 || st.Allowed != uint64(admitted) || st.Leased-st.Returned != uint64(admitted) {
				t.Fatalf("admitted %d; stats %+v: want Leased - Returned = admitted", admitted, st)
			}
			var inRedis int64
			if alg == engine.SlidingLog {
				inRedis = client.ZCard(context.Background(), prefix+"{k}:l").Val()
			} else {
				inRedis, _ = client.HGet(context.Background(), prefix+"{k}:c", "c").Int64()
			}
			if inRedis != int64(admitted) {
				t.Fatalf("Redis holds %d requests after Close, admitted %d", inRedis, admitted)
			}
		})
	}
}

// TestHybridRedisDown: keys with a live lease keep deciding locally; a new
// key gets the fail policy; nothing panics and faults are counted.
// The timeout is generous: the first decision for a key is a real round trip
// (with a script load) that under -race on a loaded 2-core machine took over
// 200 ms and was failed closed; a killed server refuses at once anyway.
func TestHybridRedisDown(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter,
		Limit: 1000, Window: time.Hour, OnFailure: FailClosed, Timeout: time.Second}, MaxLease: 100})
	if !h.Allow("warm") {
		t.Fatal("healthy: denied")
	}
	srv.Kill()
	if d := h.AllowN("new", 1); d.Allowed {
		t.Fatalf("new key with Redis down under FailClosed: %+v", d)
	}
	st := h.Stats()
	if st.Store.FailClosed == 0 || st.Store.Errors+st.Store.Timeouts == 0 {
		t.Fatalf("stats: %+v", st)
	}
}
