package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// ctxLimiter records the context each call gets and can fail.
type ctxLimiter struct {
	fixedLimiter
	mu   sync.Mutex
	ctxs []context.Context
	err  error
}

func (c *ctxLimiter) AllowNContext(ctx context.Context, k string, n int) (engine.Decision, error) {
	c.mu.Lock()
	c.ctxs = append(c.ctxs, ctx)
	c.mu.Unlock()
	return c.d, c.err
}

func (c *ctxLimiter) PeekContext(ctx context.Context, k string) (engine.Decision, error) {
	return c.AllowNContext(ctx, k, 1)
}

type ctxKey struct{}

func TestRequestContextReachesBackend(t *testing.T) {
	cl := &ctxLimiter{fixedLimiter: fixedLimiter{engine.Decision{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: time.Second}}}
	m := mustNew(t, Options{Default: &Rule{Name: "d", Limiter: cl, Limit: 10, Window: time.Second}})
	req := httptest.NewRequest("GET", "/", nil)
	req = req.WithContext(context.WithValue(req.Context(), ctxKey{}, "mine"))
	m.Handler(okHandler).ServeHTTP(httptest.NewRecorder(), req)
	if len(cl.ctxs) != 1 || cl.ctxs[0].Value(ctxKey{}) != "mine" {
		t.Errorf("backend got contexts %v, want the request's", cl.ctxs)
	}
}

// blockingLimiter waits for its context, as a remote store does when the
// network stalls, then answers with a fail-closed decision.
type blockingLimiter struct{ fixedLimiter }

func (b blockingLimiter) AllowNContext(ctx context.Context, _ string, _ int) (engine.Decision, error) {
	<-ctx.Done()
	return engine.Decision{Limit: 10}, ctx.Err()
}

func (b blockingLimiter) PeekContext(ctx context.Context, k string) (engine.Decision, error) {
	return b.AllowNContext(ctx, k, 1)
}

// TestStalledBackendReleasedByClientCancel: a client that goes away ends
// the middleware's wait on a stalled backend; the failure is counted as a
// backend error and the backend's failure decision applies.
func TestStalledBackendReleasedByClientCancel(t *testing.T) {
	var got atomic.Value
	m := mustNew(t, Options{
		Default: &Rule{Name: "remote", Limiter: blockingLimiter{}, Limit: 10, Window: time.Second},
		Observe: func(_ *http.Request, e Event) { got.Store(e) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		m.Handler(okHandler).ServeHTTP(rec, req)
		done <- rec.Code
	}()
	cancel()
	if code := <-done; code != 429 {
		t.Errorf("status %d, want the backend's fail-closed 429", code)
	}
	e, _ := got.Load().(Event)
	if !errors.Is(e.Err, context.Canceled) || e.Outcome != OutcomeDenied {
		t.Errorf("event %+v, want a denied outcome carrying context.Canceled", e)
	}
	if rs := m.RuleStats(); rs[0].BackendErrors != 1 || rs[0].Denied != 1 {
		t.Errorf("RuleStats %+v", rs)
	}
}
