package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// fixedLimiter answers every request with one Decision, so that a
// benchmark through it measures the middleware alone, not a backend.
type fixedLimiter struct{ d engine.Decision }

func (f fixedLimiter) AllowN(string, int) engine.Decision { return f.d }
func (f fixedLimiter) Peek(string) engine.Decision        { return f.d }
func (f fixedLimiter) Reset(string)                       {}
func (f fixedLimiter) AllowNContext(context.Context, string, int) (engine.Decision, error) {
	return f.d, nil
}
func (f fixedLimiter) PeekContext(context.Context, string) (engine.Decision, error) { return f.d, nil }
func (f fixedLimiter) ResetContext(context.Context, string) error                   { return nil }

// The handlers write no status: the recorder's default 200 stands, and no
// WriteHeader call makes the recorder snapshot (clone) the header map, a
// cost a real server does not have.
var (
	// noopHandler touches nothing: against it the middleware also pays for
	// the header map's first bucket, which it is the first to write.
	noopHandler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	// ctHandler sets Content-Type, as every real handler or upstream does,
	// so the header map's allocation is in the baseline too.
	ctHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = ctValue
	})
	ctValue = []string{"text/plain; charset=utf-8"}
)

// runHandler serves one reused request into a fresh httptest.ResponseRecorder
// per op. The recorder's own allocations are in both the bare and the
// limited numbers, so their difference is the middleware's.
func runHandler(b *testing.B, h http.Handler, tick func()) {
	b.Helper()
	req := httptest.NewRequest("GET", "/api/users", nil)
	req.RemoteAddr = "192.0.2.1:4711"
	var rec *httptest.ResponseRecorder
	b.ReportAllocs()
	for b.Loop() {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if tick != nil {
			tick()
		}
	}
	if rec.Code != 200 {
		b.Fatalf("status %d, want 200 (benchmark must measure the allowed path)", rec.Code)
	}
}

// BenchmarkHandler compares a bare handler with the same handler behind the
// middleware: once with a fixed-answer backend (the middleware's own cost:
// rule match, socket-IP key, headers, counters) and once with the in-memory
// engine (what a gateway pays). The engine's clock advances 2ms per request
// so a 1000/s limit never denies.
func BenchmarkHandler(b *testing.B) {
	for _, hc := range []struct {
		name string
		h    http.Handler
	}{{"handler=noop", noopHandler}, {"handler=content-type", ctHandler}} {
		b.Run(hc.name+"/bare", func(b *testing.B) { runHandler(b, hc.h, nil) })
		b.Run(hc.name+"/middleware/backend=fixed/upstream=unchecked", func(b *testing.B) {
			m, err := New(Options{Upstream: UpstreamUnchecked, Default: &Rule{
				Name:    "default",
				Limiter: fixedLimiter{engine.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 30 * time.Second}},
				Limit:   100, Window: time.Minute,
			}})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			runHandler(b, m.Handler(hc.h), nil)
		})
		b.Run(hc.name+"/middleware/backend=fixed", func(b *testing.B) {
			m, err := New(Options{Default: &Rule{
				Name:    "default",
				Limiter: fixedLimiter{engine.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 30 * time.Second}},
				Limit:   100, Window: time.Minute,
			}})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			runHandler(b, m.Handler(hc.h), nil)
		})
		for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter} {
			b.Run(hc.name+"/middleware/backend=engine-"+alg.String(), func(b *testing.B) {
				clk := newClock()
				m, err := New(Options{Default: &Rule{Name: "default", Engine: engine.Config{
					Algorithm: alg, Limit: 1000, Window: time.Second, Clock: clk,
				}}})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				runHandler(b, m.Handler(hc.h), func() { clk.Advance(2 * time.Millisecond) })
			})
		}
	}
}

// BenchmarkStacked measures MatchAll with two matching engine rules (peek
// both, then take both) against one rule, on the allowed path.
func BenchmarkStacked(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			clk := newClock()
			var rules []Rule
			for i := range n {
				rules = append(rules, Rule{Name: fmt.Sprintf("r%d", i), Engine: engine.Config{
					Algorithm: engine.SlidingLog, Limit: 1000, Window: time.Second, Clock: clk,
				}})
			}
			m, err := New(Options{MatchAll: true, Rules: rules})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			runHandler(b, m.Handler(ctHandler), func() { clk.Advance(2 * time.Millisecond) })
		})
	}
}

// The policy lookup after every decision: the newest policy in the common
// case, a match in the kept history while SetLimit runs. Neither allocates.
func BenchmarkPolicyForDecision(b *testing.B) {
	m, err := New(Options{Default: &Rule{Name: "d", Engine: engine.Config{Algorithm: engine.SlidingLog, Limit: 5, MaxLimit: 100, Window: time.Minute}}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, v := range []int{7, 9, 3, 11} {
		if err := m.SetLimit("d", v); err != nil {
			b.Fatal(err)
		}
	}
	lv := m.byName["d"].live
	for _, bc := range []struct {
		name  string
		limit int
	}{{"newest", 11}, {"history", 7}} {
		b.Run(bc.name, func(b *testing.B) {
			d := engine.Decision{Limit: bc.limit}
			b.ReportAllocs()
			for b.Loop() {
				if lv.current(&d).q != bc.limit {
					b.Fatal("wrong policy")
				}
			}
		})
	}
}

// BenchmarkDenied is BenchmarkHandler's refusal path: a fixed backend that
// refuses every request (30 s to wait), with the default RFC 9457 body
// (DenyProblem) and the short text one (DenyText), into a reused writer
// whose header map is cleared (a recorder would clone it at WriteHeader).
// Its allocations are the refusal's own: the rate-limit headers, Retry-After, the body and its
// headers (BenchmarkMiddleware in bench/peers sets them beside the peers'
// middlewares).
func BenchmarkDenied(b *testing.B) {
	for _, dc := range []struct {
		name string
		deny func(http.ResponseWriter, *http.Request, Denial)
	}{{"deny=problem", DenyProblem}, {"deny=text", DenyText}} {
		b.Run(dc.name, func(b *testing.B) {
			m, err := New(Options{OnDeny: dc.deny, Default: &Rule{
				Name:    "default",
				Limiter: fixedLimiter{engine.Decision{Limit: 100, RetryAfter: 30 * time.Second, ResetAfter: 30 * time.Second}},
				Limit:   100, Window: time.Minute,
			}})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			h := m.Handler(ctHandler)
			req := httptest.NewRequest("GET", "/api/users", nil)
			req.RemoteAddr = "192.0.2.1:4711"
			w := &sinkWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, req)
			}
			if w.code != http.StatusTooManyRequests {
				b.Fatalf("status %d, want 429 (benchmark must measure the refusal)", w.code)
			}
		})
	}
}

// sinkWriter keeps the status and drops the body.
type sinkWriter struct {
	h    http.Header
	code int
}

func (w *sinkWriter) Header() http.Header { return w.h }
func (w *sinkWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *sinkWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
