package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// newWaitLimiter uses an exact monotonic clock (not the cached one), so that
// real sleeps and the limiter's times agree to the nanosecond.
func newWaitLimiter(t *testing.T, alg engine.Algorithm, limit int, window time.Duration) *engine.Limiter {
	t.Helper()
	l, err := engine.New(engine.Config{Algorithm: alg, Limit: limit, Window: window, Clock: engine.MonotonicClock()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestWaitAdmitsAfterRetryAfter: a full key admits the waiter once its
// window has room, and not before (sleeps are never shorter than asked, so
// the lower bound holds on any machine; no upper bound is asserted).
func TestWaitAdmitsAfterRetryAfter(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			const window = 40 * time.Millisecond
			l := newWaitLimiter(t, alg, 2, window)
			start := time.Now()
			for range 2 {
				if !l.Allow("k") {
					t.Fatal("fresh key denied")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := l.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < window/2 {
				t.Fatalf("Wait admitted after %v, before the window had room (window %v)", el, window)
			}
			if alg == engine.SlidingLog {
				if el := time.Since(start); el < window {
					t.Fatalf("exact log admitted after %v < window %v", el, window)
				}
			}
		})
	}
}

// TestWaitCancelled: a waiter whose context is cancelled returns
// context.Canceled and consumes nothing.
func TestWaitCancelled(t *testing.T) {
	l := newWaitLimiter(t, engine.SlidingLog, 1, time.Hour)
	l.Allow("k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, "k") }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if s := l.Stats(); s.Allowed != 1 {
		t.Fatalf("allowed = %d, want 1 (the waiter consumed)", s.Allowed)
	}
}

// TestWaitDeadlineTooSoon: when the retry would pass the context's deadline,
// WaitN returns at once with an error that is context.DeadlineExceeded.
func TestWaitDeadlineTooSoon(t *testing.T) {
	l := newWaitLimiter(t, engine.SlidingLog, 1, time.Hour)
	l.Allow("k")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := l.Wait(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Wait slept until the deadline instead of returning at once")
	}
}

// TestWaitExceedsLimit: requests no wait can admit fail at once.
func TestWaitExceedsLimit(t *testing.T) {
	l := newWaitLimiter(t, engine.SlidingCounter, 3, time.Hour)
	for _, n := range []int{0, -1, 4, 1 << 30} {
		if err := l.WaitN(context.Background(), "k", n); !errors.Is(err, engine.ErrExceedsLimit) {
			t.Fatalf("WaitN(n=%d) = %v, want ErrExceedsLimit", n, err)
		}
	}
	if s := l.Stats(); s.Allowed != 0 {
		t.Fatalf("allowed = %d, want 0", s.Allowed)
	}
}

// TestWaitConcurrent: many waiters on one key all get through, and the exact
// log never admits more than Limit in any window while they do, checked on
// the time each admission counted at (recovered from its Decision: a late
// request counts at the key's newest time, and ResetAfter is measured from
// the request's own time to one tick past the newest plus the Window).
func TestWaitConcurrent(t *testing.T) {
	const limit, window, workers, each = 3, 15 * time.Millisecond, 6, 4
	clock := engine.MonotonicClock()
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: limit, Window: window, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec := &recordingLimiter{Limiter: l}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := engine.WaitN(ctx, rec, "hot", 1); err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := ok.Load(); got != workers*each {
		t.Fatalf("%d of %d waits admitted", got, workers*each)
	}
	if s := l.Stats(); s.Allowed != workers*each {
		t.Fatalf("limiter admitted %d, want %d", s.Allowed, workers*each)
	}
	res := int64(l.Resolution())
	at := rec.admitted()
	if len(at) != workers*each {
		t.Fatalf("recorded %d admissions, want %d", len(at), workers*each)
	}
	slices.Sort(at)
	for i := limit; i < len(at); i++ {
		// at[i-limit] .. at[i] are limit+1 admissions: they must not all
		// lie in one closed window [t-W, t] of ticks.
		if at[i]/res-at[i-limit]/res <= int64(window)/res {
			t.Fatalf("%d admissions within one window: ticks %v", limit+1, at[i-limit:i+1])
		}
	}
}

// recordingLimiter decides with AllowNAt at a clock reading of its own and
// records the time each admission counted at.
type recordingLimiter struct {
	*engine.Limiter
	mu sync.Mutex
	at []int64
}

func (r *recordingLimiter) AllowNContext(_ context.Context, key string, n int) (engine.Decision, error) {
	now := r.Now()
	ns := int64(now)
	d := r.AllowNAt(key, n, now)
	if d.Allowed {
		res := int64(r.Resolution())
		eff := ns/res*res + int64(d.ResetAfter) + ns%res - int64(r.Config().Window) - res // ResetAfter = newest + Wq + 1 tick - now
		r.mu.Lock()
		r.at = append(r.at, eff)
		r.mu.Unlock()
	}
	return d, nil
}

func (r *recordingLimiter) admitted() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at)
}

// failingBackend denies every call with an error, as a Redis store under
// FailClosed does when the server is down.
type failingBackend struct{ engine.RateLimiter }

var errDown = errors.New("backend down")

func (failingBackend) AllowNContext(context.Context, string, int) (engine.Decision, error) {
	return engine.Decision{Limit: 10}, errDown
}

// TestWaitBackendError: a backend that cannot decide and denies ends the
// wait with its error (no retry loop against a dead server).
func TestWaitBackendError(t *testing.T) {
	if err := engine.Wait(context.Background(), failingBackend{}, "k"); !errors.Is(err, errDown) {
		t.Fatalf("err = %v, want the backend's error", err)
	}
}

// Wait blocks until the key's window has room, like x/time/rate's
// Limiter.Wait, but per key and for any backend.
func ExampleLimiter_Wait() {
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 3 {
		if err := l.Wait(ctx, "batch-job"); err != nil {
			panic(err)
		}
		fmt.Println("request", i, "admitted")
	}
	// Output:
	// request 0 admitted
	// request 1 admitted
	// request 2 admitted
}
