package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// slowSample is a go-redis hook that holds each INFO stats (the Store's
// eviction sample) for delay before sending it, and records whether it
// ended after closed was set.
type slowSample struct {
	delay      time.Duration
	closed     atomic.Bool // set by the test once Store.Close has returned
	started    atomic.Int64
	endedLate  atomic.Bool // an INFO stats ended after Store.Close returned
	endOnce    sync.Once
	firstEnded chan struct{}
}

func (h *slowSample) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowSample) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) != 2 || cmd.Name() != "info" || args[1] != "stats" {
			return next(ctx, cmd)
		}
		h.started.Add(1)
		time.Sleep(h.delay)
		err := next(ctx, cmd)
		if h.closed.Load() {
			h.endedLate.Store(true)
		}
		h.endOnce.Do(func() { close(h.firstEnded) })
		return err
	}
}

func (h *slowSample) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCloseWaitsForEvictionSampleInFlight: an eviction sample (a goroutine
// of the Store running INFO stats on Config.Client) that is out when Close
// is called ends before Close returns, so that the caller may close the
// client right after Close. Before, the sample outlived Close: its INFO
// then raced the caller's client.Close, and go-redis (v9.23) logged
// "Unexpected conn[N] state changed by hook to CLOSED" when the client's
// Close closed the connection between the reply and its return to the
// pool (seen once in the Redis benchmark, which closes each client after
// its Store).
func TestCloseWaitsForEvictionSampleInFlight(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(testClientOptions(srv.Addr()))
	defer client.Close()
	// 200 ms: Close, without waiting, returns long before the INFO is
	// even sent; with waiting, it returns after (no timing is asserted).
	hook := &slowSample{delay: 200 * time.Millisecond, firstEnded: make(chan struct{})}
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Second})
	client.AddHook(hook) // after New, whose baseline sample need not be slow
	s.Allow("a")
	s.evict.next.Store(0) // the next success samples, as a call a second after the last sample does
	s.Allow("a")
	if !s.evict.sampling.Load() {
		t.Fatal("no eviction sample started")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	hook.closed.Store(true)
	select {
	case <-hook.firstEnded:
	case <-time.After(10 * time.Second): // a guard against a hung sample, not a speed assertion
		t.Fatal("the eviction sample's INFO stats never ended")
	}
	if hook.endedLate.Load() {
		t.Fatal("the eviction sample's INFO stats was still out on the client after Store.Close returned")
	}
	if n := hook.started.Load(); n != 1 {
		t.Fatalf("%d INFO stats sent, want the one sample", n)
	}
	if err := s.Close(); err != nil { // a second Close returns at once
		t.Fatal(err)
	}
}

// TestNoEvictionSampleStartsAfterClose: calls after Close still decide,
// but start no eviction sample: no goroutine of the Store uses the client
// the caller may have closed meanwhile.
func TestNoEvictionSampleStartsAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(testClientOptions(srv.Addr()))
	defer client.Close()
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Second})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.evict.next.Store(0) // a sample is due
	d, err := s.AllowNContext(context.Background(), "a", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowN after Close: %+v, %v; want allowed", d, err)
	}
	// maybeSample sets the next due time when it starts a sample.
	if next := s.evict.next.Load(); next != 0 {
		t.Fatalf("a call after Close started an eviction sample (next due %d)", next)
	}
}
