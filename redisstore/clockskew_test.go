package redisstore

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// The tests here move the servers' wall clocks with redistest's LD_PRELOAD
// library (built with cc; skipped, saying so, without it).

// TestServerHoursAheadIsLearned: a server whose clock is hours ahead of the
// client's (far past what an int32 of µs holds) answers every call: none is
// refused as late, and the limit holds.
func TestServerHoursAheadIsLearned(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Hour, 50 * 24 * time.Hour} {
		srv, _ := redistest.StartSkewed(t, skew)
		for _, alg := range algorithms {
			s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: alg, Limit: 5, Window: time.Minute, OnFailure: FailOpen})
			for i := range 8 {
				d, err := s.AllowNContext(context.Background(), "k", 1)
				if err != nil {
					t.Fatalf("%v ahead, %v, call %d: %v", skew, alg, i, err)
				}
				if want := i < 5; d.Allowed != want {
					t.Fatalf("%v ahead, %v, call %d: allowed %v, want %v", skew, alg, i, d.Allowed, want)
				}
			}
			if st := s.Stats(); st.Late != 0 || st.FailOpen != 0 {
				t.Fatalf("%v ahead, %v: %+v; want no late call and no policy decision", skew, alg, st)
			}
		}
	}
}

// stalledCalls pauses srv, makes calls that time out while it is stalled,
// resumes it and waits until it has run what piled up in its socket.
func stalledCalls(t *testing.T, srv *redistest.Server, calls int, call func()) {
	t.Helper()
	srv.Pause()
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() { defer wg.Done(); call() }()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // the stall outlasts the calls' Timeout
	srv.Resume()
	if _, err := redistest.Do(srv.Addr(), "PING"); err != nil { // answered after what was sent before it
		t.Fatalf("PING after Resume: %v", err)
	}
}

// TestServerHoursBehindKeepsGhostWriteGuard: with the server's clock hours
// behind, calls that time out during a stall write nothing when the server
// wakes up.
func TestServerHoursBehindKeepsGhostWriteGuard(t *testing.T) {
	quietClientLog(t)
	srv, _ := redistest.StartSkewed(t, -3*time.Hour)
	client := newClient(t, srv.Addr())
	for _, alg := range algorithms {
		s := newStore(t, Config{Client: client, Algorithm: alg, Limit: 100, Window: time.Minute, Timeout: 200 * time.Millisecond, OnFailure: FailClosed})
		if _, err := s.AllowNContext(context.Background(), "warm", 1); err != nil {
			t.Fatal(err)
		}
		stalledCalls(t, srv, 5, func() {
			if _, err := s.AllowNContext(context.Background(), "stalled", 10); err == nil {
				t.Error("a call to a stalled server succeeded")
			}
		})
		if n := held(t, client, s, "stalled"); n != 0 {
			t.Fatalf("%v: %d requests recorded by calls that timed out, want 0", alg, n)
		}
	}
}

// TestIdleClientRelearnsSteppedBackClock: an idle client whose estimate of
// the server's clock is older than a period does not use it: 1.5 s after
// the server's clock steps back, calls that time out during a stall write
// nothing.
func TestIdleClientRelearnsSteppedBackClock(t *testing.T) {
	quietClientLog(t)
	srv, clk := redistest.StartSkewed(t, 0)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 100, Window: time.Minute, Timeout: 200 * time.Millisecond, OnFailure: FailClosed})
	if _, err := s.AllowNContext(context.Background(), "warm", 1); err != nil {
		t.Fatal(err)
	}
	if err := clk.Set(-time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(3*clockPeriod/2) * time.Microsecond) // idle: no reply refreshes the estimate
	stalledCalls(t, srv, 3, func() { _, _ = s.AllowNContext(context.Background(), "stalled", 10) })
	if n := held(t, client, s, "stalled"); n != 0 {
		t.Fatalf("%d requests recorded by calls that timed out, want 0", n)
	}
}

// TestClusterSkewedMasterLendsNoOffset: one master of a cluster runs 20 s
// ahead. A call with a new hash tag on another master, stalled, must be
// judged by that master's own clock: it writes nothing after timing out.
func TestClusterSkewedMasterLendsNoOffset(t *testing.T) {
	quietClientLog(t)
	c, _ := redistest.StartSkewedCluster(t, 3, 20*time.Second)
	client := clusterClient(t, c)
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 100, Window: time.Minute, Timeout: 200 * time.Millisecond, OnFailure: FailClosed})
	// keysOn finds keys whose state lives on master i, each with its own tag.
	keysOn := func(i, n int) []string {
		var ks []string
		tags := map[uint16]bool{}
		for k := 0; len(ks) < n; k++ {
			key := "key-" + strconv.Itoa(k)
			name, tag := s.ks.state(key)
			m, err := client.MasterForKey(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if m.Options().Addr == c.Servers[i].Addr() && !tags[tag] {
				tags[tag] = true
				ks = append(ks, key)
			}
		}
		return ks
	}
	ahead, other := keysOn(0, 1), keysOn(1, 4)
	// Both masters well known, the skewed master's reply last. (Each key
	// twice: a first call may be refused as late where no estimate is
	// used yet; that is not what this test checks.)
	for _, k := range []string{other[0], other[1], other[2], ahead[0]} {
		_, _ = s.AllowNContext(context.Background(), k, 1)
		if _, err := s.AllowNContext(context.Background(), k, 1); err != nil {
			t.Fatal(err)
		}
	}
	fresh := other[3]
	stalledCalls(t, c.Servers[1], 3, func() { _, _ = s.AllowNContext(context.Background(), fresh, 10) })
	if n := held(t, client, s, fresh); n != 0 {
		t.Fatalf("%d requests recorded on the stalled master by calls that timed out, want 0", n)
	}
}

// TestClockStepBackFreesKeyWithinWindow: after the server's clock steps
// back ten minutes (an NTP step, a failover to a replica behind), a key at
// its limit is denied with a RetryAfter of at most its memory (one Window
// for SlidingLog, two for SlidingCounter, one bucket for GCRA), and waiting that long admits
// again: the key is not held for the size of the step.
func TestClockStepBackFreesKeyWithinWindow(t *testing.T) {
	const window = time.Second
	srv, clk := redistest.StartSkewed(t, 0)
	type tc struct {
		alg     engine.Algorithm
		penalty bool
	}
	var cases []tc
	for _, alg := range algorithms {
		cases = append(cases, tc{alg, false})
	}
	// GCRA's penalty keeps a TAT up to two buckets ahead: the cap after a
	// step back is that, not one bucket (a penalty is not forgiven).
	cases = append(cases, tc{engine.GCRA, true})
	for _, c := range cases {
		alg := c.alg
		t.Run(alg.String()+map[bool]string{false: "", true: "/penalty"}[c.penalty], func(t *testing.T) {
			if err := clk.Set(0); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: alg, Limit: 2, Window: window, Penalty: c.penalty,
				Prefix: "step:" + alg.String() + map[bool]string{false: ":", true: ":p:"}[c.penalty]})
			ctx := context.Background()
			for range 2 {
				if d, err := s.AllowNContext(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("before the step: %+v, %v", d, err)
				}
			}
			if c.penalty {
				// Hammering, denied: the penalty pushes the TAT to two
				// buckets ahead.
				for range 3 {
					if d, err := s.AllowNContext(ctx, "k", 1); err != nil || d.Allowed {
						t.Fatalf("hammering before the step: %+v, %v", d, err)
					}
				}
			}
			if err := clk.Set(-10 * time.Minute); err != nil {
				t.Fatal(err)
			}
			memory := window // GCRA: its bucket, Burst x Window/Limit, here a Window
			if alg == engine.SlidingCounter || c.penalty {
				memory = 2 * window
			}
			// Each wait is the RetryAfter Redis gave (at most memory); a
			// few tries absorb a loaded machine's delays.
			for try := 0; ; try++ {
				d, err := s.AllowNContext(ctx, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					break
				}
				if c.penalty && try == 0 && d.RetryAfter <= window {
					// Two buckets ahead, less the time since: a second
					// bucket of penalty still to serve (1.5 s here, minus
					// the few ms the calls took), not forgiven by the cap.
					t.Fatalf("penalised key after the step: RetryAfter %v, want above %v (the penalty kept)", d.RetryAfter, window)
				}
				if d.RetryAfter <= 0 || d.RetryAfter > memory+time.Microsecond {
					t.Fatalf("denied after the step with RetryAfter %v, want within (0, %v]", d.RetryAfter, memory)
				}
				if try == 3 {
					t.Fatalf("still denied after waiting RetryAfter %d times (last %v)", try+1, d.RetryAfter)
				}
				time.Sleep(d.RetryAfter + 10*time.Millisecond)
			}
		})
	}
}

// TestHybridClockStepBackFreesKey: a Hybrid key that spent its limit is
// granted leases again about a Window after the server's clock steps back
// ten minutes, not ten minutes later.
func TestHybridClockStepBackFreesKey(t *testing.T) {
	const window = time.Second
	srv, clk := redistest.StartSkewed(t, 0)
	for _, alg := range hybridAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			if err := clk.Set(0); err != nil {
				t.Fatal(err)
			}
			h, err := NewHybrid(HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: alg, Limit: 5, Window: window,
				Timeout: testTimeout, Prefix: "hstep:" + alg.String() + ":"}, MaxLease: 5})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			// One lease of the whole limit, spent: Redis holds 5 for the key.
			for i := range 5 {
				if !h.Allow("k") {
					t.Fatalf("request %d before the step denied", i)
				}
			}
			if err := clk.Set(-10 * time.Minute); err != nil {
				t.Fatal(err)
			}
			// A guard against a hang, far below the step: the key must be
			// admitted again after about one (counter: two) Window.
			eventually(t, "an admission after the step back", func() bool {
				time.Sleep(20 * time.Millisecond)
				return h.Allow("k")
			})
		})
	}
}

// TestHybridServerHoursAheadGetsLeases: a Hybrid against a server whose
// clock is hours ahead gets its leases (none refused as late) and admits
// the limit.
func TestHybridServerHoursAheadGetsLeases(t *testing.T) {
	srv, _ := redistest.StartSkewed(t, 3*time.Hour)
	for _, alg := range hybridAlgorithms {
		h, err := NewHybrid(HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: alg, Limit: 5, Window: time.Minute,
			Timeout: testTimeout, OnFailure: FailClosed, Prefix: "hahead:" + alg.String() + ":"}, MaxLease: 5})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if d, err := h.AllowNContext(context.Background(), "k", 1); err != nil || !d.Allowed {
				t.Fatalf("%v, request %d: %+v, %v; want admitted from a lease", alg, i, d, err)
			}
		}
		if st := h.Stats(); st.PipelineFaults != 0 || st.Store.Late != 0 || st.Leased == 0 {
			t.Fatalf("%v: %+v; want leases and no fault", alg, st)
		}
		_ = h.Close()
	}
}

// TestRingShardClocksApart: a Ring of two shards, one of them hours ahead:
// every key is judged by its own shard's clock (none refused as late) and
// keeps its limit.
func TestRingShardClocksApart(t *testing.T) {
	ahead, _ := redistest.StartSkewed(t, 3*time.Hour)
	plain := redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"ahead": ahead.Addr(), "plain": plain.Addr()},
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	s := newStore(t, Config{Client: ring, Algorithm: engine.SlidingLog, Limit: 2, Window: time.Minute, OnFailure: FailOpen})
	for k := range 40 {
		key := "key-" + strconv.Itoa(k)
		for i := range 3 {
			d, err := s.AllowNContext(context.Background(), key, 1)
			if err != nil {
				t.Fatalf("%s, call %d: %v", key, i, err)
			}
			if want := i < 2; d.Allowed != want {
				t.Fatalf("%s, call %d: allowed %v, want %v", key, i, d.Allowed, want)
			}
		}
	}
	for _, srv := range []*redistest.Server{ahead, plain} {
		if n, err := redistest.Do(srv.Addr(), "DBSIZE"); err != nil || n == "0" {
			t.Fatalf("shard %s holds %s keys (%v); want the keys spread over both", srv.Addr(), n, err)
		}
	}
}

// TestFailoverToReplicaBehindFreesKey: Sentinel fails over to a replica
// whose clock is five minutes behind the old master's. A key at its limit
// is denied with a RetryAfter of at most its Window (not the five minutes)
// and admits again once that has passed.
func TestFailoverToReplicaBehindFreesKey(t *testing.T) {
	quietClientLog(t)
	const window = time.Second
	st, _ := redistest.StartSkewedSentinel(t, -5*time.Minute)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: []string{st.Sentinel.Addr()},
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 2, Window: window, OnFailure: FailClosed})
	ctx := context.Background()
	for i := range 2 {
		if d, err := s.AllowNContext(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d before the failover: %+v, %v", i, d, err)
		}
	}
	if err := client.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	st.Master.Kill()
	eventually(t, "failover to the replica", func() bool {
		_, err := s.PeekContext(ctx, "k")
		return err == nil
	})
	for try := 0; ; try++ {
		d, err := s.AllowNContext(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			return
		}
		if d.RetryAfter <= 0 || d.RetryAfter > window+time.Microsecond {
			t.Fatalf("denied after the failover with RetryAfter %v, want within (0, %v]", d.RetryAfter, window)
		}
		if try == 3 {
			t.Fatalf("still denied after waiting RetryAfter %d times (last %v)", try+1, d.RetryAfter)
		}
		time.Sleep(d.RetryAfter + 10*time.Millisecond)
	}
}
