package httplimit

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

func stacked(t *testing.T, clk engine.Clock, dry bool) *Middleware {
	return mustNew(t, Options{MatchAll: true, DryRun: dry, Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(2, time.Minute, clk)},
		{Name: "all", Engine: logConfig(3, time.Minute, clk)},
	}})
}

func TestStackedLimitsAllApplyAndDenialConsumesNothing(t *testing.T) {
	m := stacked(t, newClock(), false)
	h := m.Handler(okHandler)
	post := func() *httptest.ResponseRecorder { return serveRec(h, "POST", "/login", "", nil) }
	rec := post()
	if rec.Code != 200 {
		t.Fatalf("first login: %d", rec.Code)
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"login";q=2;w=60, "all";q=3;w=60` {
		t.Errorf("RateLimit-Policy %q, want both policies", got)
	}
	if got := rec.Header().Get("RateLimit"); got != `"login";r=1, "all";r=2` {
		t.Errorf("RateLimit %q", got)
	}
	// X-RateLimit-* describe the most restrictive policy.
	if rec.Header().Get("X-RateLimit-Limit") != "2" || rec.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("X-RateLimit %q/%q, want login's 2/1", rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	post()
	// login is exhausted: refusals must not eat into "all".
	for range 5 {
		rec := post()
		if rec.Code != 429 {
			t.Fatalf("third login: %d, want 429", rec.Code)
		}
		if !strings.Contains(rec.Body.String(), `"violated-policies":["login"]`) {
			t.Errorf("body %s", rec.Body)
		}
	}
	if rec := serveRec(h, "GET", "/other", "", nil); rec.Code != 200 || rec.Header().Get("RateLimit") != `"all";r=0;t=60` {
		t.Errorf("GET after login refusals: %d %q, want 200 and all;r=0 (only 2 of 3 used)", rec.Code, rec.Header().Get("RateLimit"))
	}
	// Now "all" refuses; login (still exhausted) is not charged either.
	if rec := serveRec(h, "GET", "/other", "", nil); rec.Code != 429 {
		t.Errorf("GET past all: %d", rec.Code)
	}
	s := m.Stats()
	if s.Allowed != 3 || s.Denied != 6 {
		t.Errorf("Stats %+v, want 3 allowed 6 denied", s)
	}
	rs := m.RuleStats()
	if len(rs) != 2 || rs[0] != (RuleStats{Rule: "login", Allowed: 2, Denied: 5}) || rs[1] != (RuleStats{Rule: "all", Allowed: 3, Denied: 1}) {
		t.Errorf("RuleStats %+v", rs)
	}
}

func TestStackedRetryAfterIsTheLongestWait(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{MatchAll: true, Rules: []Rule{
		{Name: "sec", Engine: logConfig(1, time.Second, clk)},
		{Name: "min", Engine: logConfig(1, time.Minute, clk)},
	}})
	h := m.Handler(okHandler)
	serveRec(h, "GET", "/", "", nil)
	rec := serveRec(h, "GET", "/", "", nil)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "61" {
		t.Errorf("%d Retry-After %q, want 429 and 61 (the minute rule)", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// TestStackedConcurrentNeverExceedsAnyLimit runs under -race: many
// requests race the peek-then-take; neither rule admits more than its limit.
func TestStackedConcurrentNeverExceedsAnyLimit(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{MatchAll: true, Rules: []Rule{
		{Name: "a", Engine: logConfig(30, time.Minute, clk)},
		{Name: "b", Engine: logConfig(20, time.Minute, clk)},
	}})
	h := m.Handler(okHandler)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if serveRec(h, "GET", "/", "", nil).Code == 200 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 20 {
		t.Errorf("%d admitted, want exactly b's limit 20", ok.Load())
	}
	if rs := m.RuleStats(); rs[0].Allowed != 20 || rs[1].Allowed != 20 || rs[1].Denied+rs[0].Denied != 180 {
		t.Errorf("RuleStats %+v, want 20 admitted by each and 180 refusals in all", rs)
	}
}

func TestStackedDryRunConsumesNothingOnDenial(t *testing.T) {
	m := stacked(t, newClock(), true)
	h := m.Handler(okHandler)
	for range 4 {
		if rec := serveRec(h, "POST", "/login", "", nil); rec.Code != 200 {
			t.Fatalf("dry run refused: %d", rec.Code)
		}
	}
	// 2 admitted by both, 2 refused by login: "all" holds 2, not 4.
	if rec := serveRec(h, "GET", "/", "", nil); rec.Header().Get("RateLimit") != `"all";r=0;t=60` {
		t.Errorf("RateLimit %q, want all;r=0 (3rd unit)", rec.Header().Get("RateLimit"))
	}
	if s := m.Stats(); s.Allowed != 3 || s.DryRunDenied != 2 {
		t.Errorf("Stats %+v", s)
	}
}

// TestStackedRetryAfterNeverBeforeAnyEffectiveWindow: when stacked rules refuse, the
// Retry-After is never earlier than any t in the response (draft-11
// section 6), even when a rule taken before the refusing one (a
// concurrent request filled it between peek and take) has a longer t.
func TestStackedRetryAfterNeverBeforeAnyEffectiveWindow(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{MatchAll: true, Rules: []Rule{
		{Name: "min", Engine: logConfig(1, time.Minute, clk)},
		{Name: "sec", Limiter: racyLimiter{}, Limit: 1, Window: time.Second},
	}})
	rec := serveRec(m.Handler(okHandler), "GET", "/", "", nil)
	if rec.Code != 429 {
		t.Fatalf("status %d", rec.Code)
	}
	if got := rec.Header().Get("RateLimit"); got != `"min";r=0;t=60, "sec";r=0;t=0` {
		t.Errorf("RateLimit %q", got)
	}
	if got := rec.Header().Get("Retry-After"); got != "61" {
		t.Errorf("Retry-After %q, want 61: min's unit is spent until then", got)
	}
	if !strings.Contains(rec.Body.String(), "retry in 61 s") {
		t.Errorf("problem detail disagrees with Retry-After: %s", rec.Body)
	}
}

// racyLimiter admits on Peek and refuses the take, as a backend does when
// a concurrent request took the last unit between the two.
type racyLimiter struct{}

func (racyLimiter) AllowN(string, int) engine.Decision {
	return engine.Decision{Limit: 1, RetryAfter: 300 * time.Millisecond}
}

func (racyLimiter) Peek(string) engine.Decision {
	return engine.Decision{Allowed: true, Limit: 1, Remaining: 1}
}

func (racyLimiter) Reset(string) {}

func (r racyLimiter) AllowNContext(_ context.Context, k string, n int) (engine.Decision, error) {
	return r.AllowN(k, n), nil
}

func (r racyLimiter) PeekContext(_ context.Context, k string) (engine.Decision, error) {
	return r.Peek(k), nil
}

func (racyLimiter) ResetContext(context.Context, string) error { return nil }
