package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// serverAtPhase moves the server's wall clock (clk) so that it is now at
// phase frac of a window of w (windows aligned to multiples of w, as the
// scripts align them), returning the offset it set.
func serverAtPhase(t *testing.T, clk *redistest.Clock, w time.Duration, frac float64) time.Duration {
	t.Helper()
	now := time.Now().UnixNano()
	d := time.Duration(int64(float64(w)*frac) - now%int64(w))
	if err := clk.Set(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCounterStepBackKeepsRecentRequests: a SlidingCounter key filled late
// in one window and used early in the next, whose server's clock then
// steps back into the first window, still counts every request it holds:
// the step must not relabel the full window as the previous one, weighted
// by almost nothing (that admitted about Limit more within a Window, by a
// Store and by a Hybrid alike).
func TestCounterStepBackKeepsRecentRequests(t *testing.T) {
	const W = 2 * time.Second
	const L = 100
	srv, clk := redistest.StartSkewed(t, 0)
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter, Limit: L, Window: W})
	h := newHybrid(t, HybridConfig{Config: Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingCounter, Limit: L, Window: W}})
	ctx := context.Background()
	keys := []string{"store", "hybrid"} // both written by the Store, the second then used by the Hybrid (same key names)
	off := serverAtPhase(t, clk, W, 0.90)
	for _, k := range keys {
		if d, err := s.AllowNContext(ctx, k, L); err != nil || !d.Allowed {
			t.Fatalf("%s: the first %d: %+v, %v", k, L, d, err)
		}
	}
	// On to phase 0.05 of the next window, where the previous window's
	// count, weighted 0.95, leaves room for one more.
	if err := clk.Set(off + W*15/100); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if d, err := s.AllowNContext(ctx, k, 1); err != nil || !d.Allowed {
			t.Fatalf("%s: one more early in the next window: %+v, %v", k, d, err)
		}
	}
	before, err := s.PeekContext(ctx, "store")
	if err != nil {
		t.Fatal(err)
	}
	// The server's clock steps back 200 ms, to phase 0.95 of the first window.
	if err := clk.Set(off - W/10); err != nil {
		t.Fatal(err)
	}
	after, err := s.PeekContext(ctx, "store")
	if err != nil {
		t.Fatal(err)
	}
	if after.Remaining > before.Remaining {
		t.Fatalf("after the step back Remaining = %d, before it %d: the step forgave requests", after.Remaining, before.Remaining)
	}
	if d, err := s.AllowNContext(ctx, "store", 1); err != nil || d.Allowed {
		t.Fatalf("Store after the step back: %+v, %v; want denied (%d requests held within the last Window)", d, err, L+1)
	}
	if d, err := h.AllowNContext(ctx, "hybrid", 1); err != nil || d.Allowed {
		t.Fatalf("Hybrid after the step back: %+v, %v; want denied (%d requests held within the last Window)", d, err, L+1)
	}
}

// TestCallThatReadsTheClockOverSlowLinkIsNotLate: over a link of 210 ms
// each way, with a Timeout of 1 s, a call whose server clock estimate went
// stale (the client was idle) reads the clock first (420 ms) and then runs
// (420 ms): it completes within Timeout and must be neither refused as
// late nor held against the server. The server's deadline used to be taken
// before the clock read, from three quarters of the budget, and the read's
// bound is low by one way: every such call was refused as late (one way
// above 3/16 of Timeout). The link is slow and the Timeout long so that
// the 160 ms left over absorbs a busy machine's scheduling delays.
func TestCallThatReadsTheClockOverSlowLinkIsNotLate(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr(), 210*time.Millisecond)
	client := newClient(t, p.Addr())
	warmPool(t, client, 2)
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 100, Window: time.Minute, Timeout: time.Second, OnFailure: FailClosed})
	// The script loaded beforehand (by a Store on the direct address), so
	// that no call pays a NOSCRIPT round trip.
	if _, err := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 100, Window: time.Minute}).AllowNContext(context.Background(), "load", 1); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Second + 100*time.Millisecond) // the estimate goes stale
		}
		if d, err := s.AllowNContext(context.Background(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
	if st := s.Stats(); st.Late != 0 || st.BreakerOpens != 0 || st.ClockReads != 3 {
		t.Fatalf("%+v; want no late call, no breaker opening, 3 clock reads", st)
	}
}

// TestClusterASKReplyDoesNotLendItsOffset: while a slot migrates from
// master 1 to master 0, whose clock is an hour ahead, a call on a key of
// that slot is redirected (ASK) to master 0; its reply must not feed master
// 1's clock estimate, or master 1's other keys get deadlines an hour late
// and calls that timed out during a stall of master 1 write when it
// resumes.
func TestClusterASKReplyDoesNotLendItsOffset(t *testing.T) {
	quietClientLog(t)
	c, _ := redistest.StartSkewedCluster(t, 3, time.Hour)
	client := clusterClient(t, c)
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 100, Window: time.Minute, Timeout: 200 * time.Millisecond, OnFailure: FailClosed})
	ctx := context.Background()
	var on1 []string // keys of distinct hash tags on master 1
	tags := map[uint16]bool{}
	for k := 0; len(on1) < 3; k++ {
		key := "key-" + strconv.Itoa(k)
		name, tg := s.ks.state(key)
		m, err := client.MasterForKey(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == c.Servers[1].Addr() && !tags[tg] {
			tags[tg] = true
			on1 = append(on1, key)
		}
	}
	mig, warm, other := on1[0], on1[1], on1[2]
	for range 2 { // master 1's clock learned from its own replies
		if _, err := s.AllowNContext(ctx, warm, 1); err != nil {
			t.Fatal(err)
		}
	}
	id0, _ := redistest.Do(c.Servers[0].Addr(), "CLUSTER", "MYID")
	id1, _ := redistest.Do(c.Servers[1].Addr(), "CLUSTER", "MYID")
	name, tg := s.ks.state(mig)
	slot, err := c.KeySlot(name)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := redistest.Do(c.Servers[0].Addr(), "CLUSTER", "SETSLOT", strconv.Itoa(slot), "IMPORTING", id1); err != nil {
		t.Fatal(r, err)
	}
	if r, err := redistest.Do(c.Servers[1].Addr(), "CLUSTER", "SETSLOT", strconv.Itoa(slot), "MIGRATING", id0); err != nil {
		t.Fatal(r, err)
	}
	nc := s.clock.node(ctx, name, tg)
	// ASK -> master 0. The call is judged by master 1's estimate (go-redis
	// names master 1 for the slot), so master 0 refuses it as late: that
	// misjudgement stays the migrating key's own.
	_, _ = s.AllowNContext(ctx, mig, 1)
	if off, ok := nc.offset(instantOf(time.Now())); ok && off > int64(time.Minute/time.Microsecond) {
		t.Fatalf("master 1's estimate is %v after a reply from master 0", time.Duration(off)*time.Microsecond)
	}
	stalledCalls(t, c.Servers[1], 3, func() { _, _ = s.AllowNContext(ctx, other, 10) })
	if n := held(t, client, s, other); n != 0 {
		t.Fatalf("%d requests recorded on master 1 by calls that timed out, want 0", n)
	}
}

// TestRingRehashDoesNotBorrowTheDeadShardsOffset: a Ring keeps one clock
// estimate per hash tag. When the shard holding a tag (an hour ahead) goes
// down and the Ring moves the tag to another shard, the new shard's replies
// must not keep the dead shard's estimate alive: with it, calls that timed
// out during a stall of the new shard carried deadlines an hour late and
// wrote when it resumed.
func TestRingRehashDoesNotBorrowTheDeadShardsOffset(t *testing.T) {
	quietClientLog(t)
	a, _ := redistest.StartSkewed(t, time.Hour)
	b := redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()},
		ContextTimeoutEnabled: true, MaxRetries: -1, HeartbeatFrequency: 50 * time.Millisecond})
	t.Cleanup(func() { _ = ring.Close() })
	s := newStore(t, Config{Client: ring, Algorithm: engine.SlidingLog, Limit: 1000, Window: time.Minute, Timeout: 200 * time.Millisecond, OnFailure: FailClosed})
	ctx := context.Background()
	var k string // a key on shard a
	for i := 0; ; i++ {
		k = "k" + strconv.Itoa(i)
		if _, err := s.AllowNContext(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
		if r, _ := redistest.Do(a.Addr(), "EXISTS", stateKey(s, k)); r == "1" {
			break
		}
	}
	a.Kill()
	for { // until the Ring has moved the key to b
		if _, err := s.AllowNContext(ctx, k, 1); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := held(t, ring, s, k)
	stalledCalls(t, b, 3, func() { _, _ = s.AllowNContext(ctx, k, 10) })
	if after := held(t, ring, s, k); after != before {
		t.Fatalf("shard b holds %d more entries, written by calls that timed out", after-before)
	}
}

// TestLogRunNamedLikeAnEarlierOneCountsAllItsEntries: a write of n entries
// names them after its script run's TIME R (R:1 .. R:n). A run named like
// an earlier one (the server's clock went back) may find part of that
// run's names still present, the first one gone (penalty trimming removes
// a run's entries by rank): every one of its n entries must still be
// recorded, under names no other run holds. Here R:2 is planted, scored 1
// (far outside the window), for every R of the next 300 ms.
func TestLogRunNamedLikeAnEarlierOneCountsAllItsEntries(t *testing.T) {
	srv, clk := redistest.StartSkewed(t, 0)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Hour})
	ctx := context.Background()
	name := stateKey(s, "k")
	start := time.Now()
	from := start.UnixMicro()
	const span = 300_000
	p := client.Pipeline()
	for r := from; r < from+span; r += 1000 {
		m := make([]redis.Z, 0, 1000)
		for i := r; i < r+1000; i++ {
			m = append(m, redis.Z{Score: 1, Member: strconv.FormatInt(i, 10) + ":2"})
		}
		p.ZAdd(ctx, name, m...)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Back to the start of the planted span (the planting took a while).
	if err := clk.Set(-time.Since(start)); err != nil {
		t.Fatal(err)
	}
	if d, err := s.AllowNContext(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("AllowN(3): %+v, %v", d, err)
	}
	names, err := client.ZRangeByScore(ctx, name, &redis.ZRangeBy{Min: "2", Max: "+inf"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 {
		t.Fatalf("entries in the window after AllowN(3): %q; want 3", names)
	}
	r, _, _ := strings.Cut(names[0], ":")
	if at, _ := strconv.ParseInt(r, 10, 64); at < from || at >= from+span {
		t.Fatalf("the run's TIME %d is outside the planted span [%d, %d): nothing was checked", at, from, from+span)
	}
}

// TestCanceledCallWhoseReplyArrivesReportsRedisDecision: a caller that
// cancels while its call is out (here: the server paused) gets, when the
// reply still comes back within Timeout, Redis's decision and no error:
// the server recorded the request, so the decision is reported, not the
// policy's (go-redis does not interrupt a read in progress on
// cancellation).
func TestCanceledCallWhoseReplyArrivesReportsRedisDecision(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 3, Window: time.Hour, OnFailure: FailClosed})
	if _, err := s.PeekContext(context.Background(), "k"); err != nil { // the clock and the script loaded
		t.Fatal(err)
	}
	srv.Pause()
	resumed := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { srv.Resume(); close(resumed) })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	d, err := s.AllowNContext(ctx, "k", 1)
	<-resumed
	if ctx.Err() == nil {
		t.Fatal("the call returned before the caller cancelled")
	}
	if err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("%+v, %v; want Redis's decision (allowed, 2 remaining) and no error", d, err)
	}
	if n := held(t, client, s, "k"); n != 1 {
		t.Fatalf("Redis holds %d, want 1", n)
	}
}

// TestFirstCallsOverSlowLinkFitTimeout: New loads the scripts on the
// server, so the first call (which reads the clock, then runs the script)
// costs two round trips, not four: over 25 ms each way with a 150 ms
// Timeout it succeeds. Loaded by the calls themselves (NOSCRIPT, then
// EVAL), each call timed out before its EVAL went out, and so did every
// later one.
func TestFirstCallsOverSlowLinkFitTimeout(t *testing.T) {
	quietClientLog(t)
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr(), 25*time.Millisecond)
	client := newClient(t, p.Addr())
	warmPool(t, client, 2)
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute, Timeout: 150 * time.Millisecond, OnFailure: FailClosed})
	for i := range 2 {
		if i > 0 {
			time.Sleep(time.Second + 100*time.Millisecond) // the estimate goes stale
		}
		if d, err := s.AllowNContext(context.Background(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
}
