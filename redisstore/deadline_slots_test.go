package redisstore

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// These tests attack the shared Done slots that a call gets when its
// caller's context cannot end (see callCtx), from the guarantees the
// package states: such a call's wait for a pooled connection ends no
// earlier than Timeout/16 before its deadline and never much after it, a
// caller's context that can end keeps the exact deadline, an idle Store
// keeps no armed slot, and concurrent calls with a Close in the middle are
// safe under -race.

// holdPool takes every connection of client's pool (PoolSize) with BLPOPs
// that block for hold, and returns once they all hold one; wait waits for
// them to end.
func holdPool(t *testing.T, client *redis.Client, hold time.Duration) (wait func()) {
	t.Helper()
	size := client.Options().PoolSize
	var wg sync.WaitGroup
	for i := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = client.BLPop(context.Background(), hold, "slots:hold:"+string(rune('a'+i))).Err()
		}()
	}
	for client.PoolStats().TotalConns < uint32(size) || client.PoolStats().IdleConns > 0 {
		time.Sleep(time.Millisecond) // until every BLPOP holds its connection
	}
	return wg.Wait
}

// TestUnendingContextPoolWaitEndsAtMostASlotEarly: with every pooled
// connection busy, calls whose context cannot end (AllowN's) wait for a
// turn on a shared slot's Done. Each must fail with an error wrapping
// ErrUnavailable and context.DeadlineExceeded, no sooner than
// Timeout - Timeout/16 after it started (timers never fire early, so this
// lower bound holds on any machine), and within a generous multiple of
// Timeout.
func TestUnendingContextPoolWaitEndsAtMostASlotEarly(t *testing.T) {
	srv := redistest.Start(t)
	o := testClientOptions(srv.Addr())
	o.PoolSize = 1
	o.ReadTimeout = -1 // no socket timeout: the BLPOP below blocks
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	const timeout = 160 * time.Millisecond // about deadlines: a slot is 10 ms
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 100, Window: time.Second,
		OnFailure: FailClosed, Timeout: timeout})
	if s.slots.size == 0 {
		t.Fatal("a Timeout of 160 ms does not use the shared slots")
	}
	s.Allow("warm")
	wait := holdPool(t, client, 3*time.Second)
	defer wait()
	var mu sync.Mutex
	var shortest time.Duration = 1 << 62
	worst := concurrently(8, func() {
		start := time.Now()
		d, err := s.AllowNContext(context.Background(), "k", 1)
		took := time.Since(start)
		mu.Lock()
		shortest = min(shortest, took)
		mu.Unlock()
		if d.Allowed || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call with no free connection: %+v, %v; want a denial wrapping ErrUnavailable and context.DeadlineExceeded", d, err)
		}
	})
	if low := timeout - timeout/16; shortest < low {
		t.Fatalf("a wait for a pooled connection ended %v after the call started, want at least Timeout - Timeout/16 = %v", shortest, low)
	}
	if worst > 10*timeout {
		t.Fatalf("slowest wait for a pooled connection %v, Timeout %v", worst, timeout)
	}
}

// TestCancellableContextPoolWaitKeepsExactDeadline: a caller's context
// that can end (here one never cancelled) keeps context.WithDeadline's
// exact deadline: the wait for a pooled connection ends no sooner than
// Timeout after the call started, never a slot early.
func TestCancellableContextPoolWaitKeepsExactDeadline(t *testing.T) {
	srv := redistest.Start(t)
	o := testClientOptions(srv.Addr())
	o.PoolSize = 1
	o.ReadTimeout = -1
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	const timeout = 160 * time.Millisecond // about deadlines
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Second,
		OnFailure: FailClosed, Timeout: timeout})
	s.Allow("warm")
	wait := holdPool(t, client, 3*time.Second)
	defer wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var shortest time.Duration = 1 << 62
	concurrently(4, func() {
		start := time.Now()
		_, err := s.AllowNContext(ctx, "k", 1)
		took := time.Since(start)
		mu.Lock()
		shortest = min(shortest, took)
		mu.Unlock()
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call with no free connection: %v; want ErrUnavailable and context.DeadlineExceeded", err)
		}
	})
	if shortest < timeout {
		t.Fatalf("a cancellable caller's wait ended %v after the call started, before its Timeout %v", shortest, timeout)
	}
}

// TestIdleStoreKeepsNoArmedSlot: a Store used sporadically, with idle gaps
// longer than Timeout, arms a slot's timer per call at most, and once it
// has been idle for a Timeout every slot it still points at is closed (its
// timer fired: nothing left armed); after Close, the goroutines it started
// are gone.
func TestIdleStoreKeepsNoArmedSlot(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	const timeout = 32 * time.Millisecond // about deadlines: a slot is 2 ms
	before := runtime.NumGoroutine()
	s, err := New(Config{Client: client, Algorithm: engine.SlidingLog, Limit: 100, Window: time.Second, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := s.AllowNContext(context.Background(), "k", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * timeout)
	}
	closedWithin := func(ch chan struct{}) bool {
		deadline := time.Now().Add(10 * time.Second) // a guard against a hang, not a speed assertion
		for time.Now().Before(deadline) {
			select {
			case <-ch:
				return true
			default:
				time.Sleep(time.Millisecond)
			}
		}
		return false
	}
	for _, p := range []*doneSlot{s.slots.cur.Load(), s.slots.old.Load()} {
		if p != nil && !closedWithin(p.ch) {
			t.Fatalf("slot ending at %d still open 10 s after its end: its timer never fired", p.end)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = client.Close()
	deadline := time.Now().Add(10 * time.Second) // a guard against a hang
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before New:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestConcurrentUnendingCallsAcrossSlotsAndClose: many goroutines call
// AllowN, Peek and Reset with context.Background over several slots while
// the Store is closed in the middle: no data race (run under -race), every
// call returns, and a call that fails says why with the documented
// sentinels.
func TestConcurrentUnendingCallsAcrossSlotsAndClose(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	const timeout = 16 * time.Millisecond // the shortest Timeout that uses slots (1 ms each)
	s, err := New(Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 1000, Window: time.Second,
		OnFailure: FailOpen, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if s.slots.size != int64(time.Millisecond) {
		t.Fatalf("slot of %v for a Timeout of 16 ms, want 1 ms", time.Duration(s.slots.size))
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k" + string(rune('a'+g%4))
			for i := range 60 {
				var err error
				switch i % 5 {
				case 3:
					_, err = s.PeekContext(context.Background(), key)
				case 4:
					err = s.ResetContext(context.Background(), key)
				default:
					_, err = s.AllowNContext(context.Background(), key, 1)
				}
				if err != nil && !errors.Is(err, ErrUnavailable) {
					t.Errorf("call failed with %v, want nil or an error wrapping ErrUnavailable", err)
				}
				if i == 30 && g == 0 {
					_ = s.Close()
				}
			}
		}()
	}
	wg.Wait()
}

// TestLogScriptExactOnServerTimeAcrossSeconds: the log script, on the
// server's own TIME (its scores built as text from TIME's fields), run
// serially on one key for over a second with Windows of 1 ms, 1 ms + 1 µs
// and 0.3 s, so that its µs values take every width and it crosses
// second boundaries: each call is admitted exactly when fewer than Limit
// admitted calls lie in [t-Window, t] at its own server time t (never
// more than Limit in any Window, never a denial with room).
func TestLogScriptExactOnServerTimeAcrossSeconds(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	for _, c := range []struct {
		winUS int64
		limit int
	}{{1000, 3}, {1001, 2}, {300_000, 40}} {
		key := "slots:log:" + time.Duration(c.winUS*1000).String()
		type call struct {
			at      int64
			allowed bool
		}
		var calls []call
		start := time.Now()
		seconds := map[int64]bool{}
		for time.Since(start) < 400*time.Millisecond || len(seconds) < 2 {
			r, err := client.Eval(ctx, logScript.src, []string{key},
				c.limit, c.winUS, 1, 1, "", 10_000, "100000000000000000").Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			if len(calls) > 0 && r[4] <= calls[len(calls)-1].at {
				t.Skipf("the server's TIME went from %d to %d µs (a clock step): the check needs it to advance", calls[len(calls)-1].at, r[4])
			}
			calls = append(calls, call{r[4], r[0] == 1})
			seconds[r[4]/1_000_000] = true
			if time.Since(start) > 20*time.Second { // a guard against a hang, not a speed assertion
				break
			}
		}
		admitted, denied := 0, 0
		for i, ci := range calls {
			inWindow := 0
			for _, cj := range calls[:i] {
				if cj.allowed && cj.at >= ci.at-c.winUS {
					inWindow++
				}
			}
			if want := inWindow < c.limit; ci.allowed != want {
				t.Fatalf("Window %d µs, Limit %d: call at %d µs allowed=%v with %d admitted in [t-W, t], want allowed=%v",
					c.winUS, c.limit, ci.at, ci.allowed, inWindow, want)
			}
			if ci.allowed {
				admitted++
			} else {
				denied++
			}
		}
		if admitted == 0 || denied == 0 {
			t.Fatalf("Window %d µs: %d admitted, %d denied: the trace did not exercise both", c.winUS, admitted, denied)
		}
	}
}
