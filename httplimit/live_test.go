package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

func gcraConfig(limit, burst int, window time.Duration, clk engine.Clock) engine.Config {
	return engine.Config{Algorithm: engine.GCRA, Limit: limit, Burst: burst, Window: window, Clock: clk}
}

// A GCRA rule advertises its bucket as q and the time a full bucket takes
// to refill as w; r counts down the bucket, t and Retry-After say when the
// next request passes (t rounded down, Retry-After up).
func TestGCRARuleHeadersFreshKeyBurstAndDenial(t *testing.T) {
	clk := newClock()
	// 3 per 10 s: one every 3.33 s; bucket 2, refilled in 6.67 s (w=7).
	srv, _ := serve(t, Options{Default: &Rule{Name: "g", Engine: gcraConfig(3, 2, 10*time.Second, clk)}})

	r := get(t, srv.URL+"/")
	if r.status != 200 {
		t.Fatalf("fresh key: status %d", r.status)
	}
	// Fresh key: one of two taken; the bucket is full again 3.33 s on.
	wantHeaders(t, r, map[string]string{
		"RateLimit-Policy": `"g";q=2;w=7`, "RateLimit": `"g";r=1`,
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "4",
	})
	r = get(t, srv.URL+"/")
	if r.status != 200 {
		t.Fatalf("second of the burst: status %d", r.status)
	}
	// The burst is spent: the next passes 3.33 s on (t=3 rounded down,
	// X-RateLimit-Reset 4 rounded up).
	wantHeaders(t, r, map[string]string{
		"RateLimit-Policy": `"g";q=2;w=7`, "RateLimit": `"g";r=0;t=3`,
		"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4",
	})
	r = get(t, srv.URL+"/")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("after the burst: status %d, want 429", r.status)
	}
	wantHeaders(t, r, map[string]string{
		"RateLimit-Policy": `"g";q=2;w=7`, "RateLimit": `"g";r=0;t=3`, "Retry-After": "4",
	})
	// 3 s on, 0.33 s are left: t=0, Retry-After 1 (never early).
	clk.Advance(3 * time.Second)
	r = get(t, srv.URL+"/")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("3 s on: status %d, want 429", r.status)
	}
	wantHeaders(t, r, map[string]string{"RateLimit": `"g";r=0;t=0`, "Retry-After": "1"})
	// Retry-After was exact and rounded up: one second on, one passes.
	clk.Advance(time.Second)
	if r = get(t, srv.URL+"/"); r.status != 200 {
		t.Fatalf("after Retry-After: status %d, want 200", r.status)
	}
}

// A ready *engine.Limiter says its numbers: a Rule that leaves Limit and
// Window zero advertises the limiter's (GCRA: its bucket and refill time).
func TestReadyGCRALimiterAdvertisesItsOwnNumbers(t *testing.T) {
	clk := newClock()
	l, err := engine.New(gcraConfig(10, 5, 10*time.Second, clk))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv, _ := serve(t, Options{Default: &Rule{Name: "g", Limiter: l}})
	wantHeaders(t, get(t, srv.URL+"/"), map[string]string{"RateLimit-Policy": `"g";q=5;w=5`, "RateLimit": `"g";r=4`})
}

// SetLimit on a running Middleware keeps every client's count: a client at
// 4 of 5 gets exactly 6 more under 10, and the policy says q=10.
func TestSetLimitKeepsCountsAndAdvertisesNewLimit(t *testing.T) {
	for _, alg := range engine.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			clk := newClock()
			cfg := engine.Config{Algorithm: alg, Limit: 5, MaxLimit: 10, Window: time.Minute, Clock: clk}
			srv, m := serve(t, Options{Rules: []Rule{{Name: "api", Engine: cfg}}})
			for i := 0; i < 4; i++ {
				if r := get(t, srv.URL+"/"); r.status != 200 {
					t.Fatalf("request %d: status %d", i, r.status)
				}
			}
			if err := m.SetLimit("api", 10); err != nil {
				t.Fatalf("SetLimit: %v", err)
			}
			for i := 0; i < 6; i++ {
				r := get(t, srv.URL+"/")
				if r.status != 200 {
					t.Fatalf("request %d after SetLimit(10): status %d, want 6 more to pass", i, r.status)
				}
				if got := r.header.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"api";q=10;`) {
					t.Fatalf("RateLimit-Policy = %q, want q=10", got)
				}
				if got := r.header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(5-i) {
					t.Errorf("request %d: X-RateLimit-Remaining %s, want %d", i, got, 5-i)
				}
			}
			if r := get(t, srv.URL+"/"); r.status != http.StatusTooManyRequests {
				t.Fatalf("11th request in the window: status %d, want 429 (4 + 6 of 10)", r.status)
			}
		})
	}
}

func TestSetBurstChangesGCRABucketAndPolicy(t *testing.T) {
	clk := newClock()
	srv, m := serve(t, Options{Default: &Rule{Name: "g", Engine: engine.Config{
		Algorithm: engine.GCRA, Limit: 10, Burst: 2, Window: 10 * time.Second, Clock: clk}}})
	get(t, srv.URL+"/")
	get(t, srv.URL+"/")
	if r := get(t, srv.URL+"/"); r.status != http.StatusTooManyRequests {
		t.Fatalf("third of a bucket of 2: status %d", r.status)
	}
	if err := m.SetBurst("g", 4); err != nil {
		t.Fatalf("SetBurst: %v", err)
	}
	// The key owes 2 of the new bucket of 4: 2 more pass.
	for i := 0; i < 2; i++ {
		r := get(t, srv.URL+"/")
		if r.status != 200 {
			t.Fatalf("request %d after SetBurst(4): status %d", i, r.status)
		}
		wantHeaders(t, r, map[string]string{"RateLimit-Policy": `"g";q=4;w=4`})
	}
	if r := get(t, srv.URL+"/"); r.status != http.StatusTooManyRequests {
		t.Fatalf("after 2 + 2 of 4: status %d", r.status)
	}
	// An explicit burst no longer follows the limit: the rate doubles, the
	// bucket stays 4, refilled in 2 s.
	if err := m.SetLimit("g", 20); err == nil {
		t.Fatal("SetLimit above MaxLimit (10) succeeded")
	} else if !errors.Is(err, engine.ErrInvalidLimit) {
		t.Fatalf("SetLimit(20) = %v, want ErrInvalidLimit", err)
	}
	wantHeaders(t, get(t, srv.URL+"/"), map[string]string{"RateLimit-Policy": `"g";q=4;w=4`})
	if err := m.SetLimit("g", 5); err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, get(t, srv.URL+"/"), map[string]string{"RateLimit-Policy": `"g";q=4;w=8`})
}

// With the default Burst a GCRA rule's bucket follows its limit, in the
// engine and in the advertised q.
func TestSetLimitOnDefaultBurstGCRAMovesTheBucket(t *testing.T) {
	clk := newClock()
	srv, m := serve(t, Options{Default: &Rule{Name: "g", Engine: engine.Config{
		Algorithm: engine.GCRA, Limit: 4, MaxLimit: 8, Window: 8 * time.Second, Clock: clk}}})
	if err := m.SetLimit("g", 8); err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, get(t, srv.URL+"/"), map[string]string{"RateLimit-Policy": `"g";q=8;w=8`, "RateLimit": `"g";r=7`})
}

func TestSetLimitErrors(t *testing.T) {
	clk := newClock()
	shared, err := engine.New(logConfig(5, time.Minute, clk))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	m, err := New(Options{Rules: []Rule{
		{Name: "log", PathPrefix: "/log", Engine: logConfig(5, time.Minute, clk)},
		{Name: "fixed", PathPrefix: "/fixed", Limiter: opaque{shared}, Limit: 5, Window: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"unknown rule", m.SetLimit("nope", 3), ErrUnknownRule},
		{"unknown rule burst", m.SetBurst("nope", 3), ErrUnknownRule},
		{"fixed backend", m.SetLimit("fixed", 3), ErrFixedLimit},
		{"burst on the log", m.SetBurst("log", 3), engine.ErrNoBurst},
		{"above MaxLimit", m.SetLimit("log", 6), engine.ErrInvalidLimit},
		{"zero", m.SetLimit("log", 0), engine.ErrInvalidLimit},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: error %v, want one wrapping %v", tc.name, tc.err, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler(okHandler).ServeHTTP(rec, httptest.NewRequest("GET", "/log", nil))
	if got := rec.Header().Get("RateLimit-Policy"); got != `"log";q=5;w=60` {
		t.Errorf("after refused changes RateLimit-Policy = %q, want the limit in force", got)
	}
}

// Rules sharing one ready *engine.Limiter all advertise its new limit.
func TestSetLimitOnSharedLimiterUpdatesEveryRule(t *testing.T) {
	clk := newClock()
	shared, err := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 5, Window: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	m, err := New(Options{Rules: []Rule{
		{Name: "a", PathPrefix: "/a", Limiter: shared},
		{Name: "b", PathPrefix: "/b", Limiter: shared},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.SetLimit("a", 9); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a", "/b"} {
		rec := httptest.NewRecorder()
		m.Handler(okHandler).ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if got := rec.Header().Get("X-RateLimit-Limit"); got != "9" {
			t.Errorf("%s: X-RateLimit-Limit %q, want 9", p, got)
		}
	}
}

// While SetLimit moves a limit between 5 and 10, every response's q is the
// limit its decision was made under: a fresh key's r is q-1, never a
// remaining of the one limit beside the q of the other.
func TestSetLimitHeadersMatchTheirDecision(t *testing.T) {
	clk := newClock()
	m, err := New(Options{
		Key:     Header("X-Key"),
		Default: &Rule{Name: "d", Engine: engine.Config{Algorithm: engine.SlidingCounter, Limit: 5, MaxLimit: 10, Window: time.Minute, Clock: clk}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Handler(okHandler)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := m.SetLimit("d", 5+5*(i%2)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var bad sync.Map
	var rw sync.WaitGroup
	for g := 0; g < 4; g++ {
		rw.Add(1)
		go func() {
			defer rw.Done()
			for i := 0; i < 2000; i++ {
				req := httptest.NewRequest("GET", "/", nil)
				req.Header.Set("X-Key", strconv.Itoa(g)+"-"+strconv.Itoa(i)) // a fresh key: r = q-1
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				pol, lim, rem := rec.Header().Get("RateLimit-Policy"), rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining")
				q, _ := strconv.Atoi(lim)
				r, _ := strconv.Atoi(rem)
				if r != q-1 || !strings.HasPrefix(pol, `"d";q=`+lim+";") {
					bad.Store(pol+" limit "+lim+" remaining "+rem, true)
				}
			}
		}()
	}
	rw.Wait()
	close(stop)
	wg.Wait()
	bad.Range(func(k, _ any) bool { t.Errorf("torn header: %s", k); return true })
}

// EngineStats sums the owned limiters' Invalid calls too.
func TestEngineStatsSumsInvalidCalls(t *testing.T) {
	m, err := New(Options{Default: &Rule{Name: "d", Engine: logConfig(2, time.Minute, newClock())}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.owned[0].AllowN("k", 3) // above the limit: invalid
	if got := m.EngineStats().Invalid; got != 1 {
		t.Errorf("EngineStats().Invalid = %d, want 1", got)
	}
}

// While SetLimit cycles a limit through five values as fast as it can,
// every response's RateLimit-Policy q and X-RateLimit-Limit are the Limit
// of the decision it carries, and w the window of that setting: a request
// decided under a setting two or more changes back still finds its own
// (it used to look back only one change, and gave r=8 beside q=7).
func TestRapidSetLimitPolicyMatchesEveryDecision(t *testing.T) {
	type limitKey struct{}
	for _, alg := range []engine.Algorithm{engine.GCRA, engine.SlidingLog, engine.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := engine.New(engine.Config{Algorithm: alg, Limit: 5, MaxLimit: 100, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			m, err := New(Options{Default: &Rule{Name: "d", Limiter: l}, Observe: func(r *http.Request, e Event) {
				if p, ok := r.Context().Value(limitKey{}).(*atomic.Int64); ok {
					p.Store(int64(e.Decision.Limit))
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			h := m.Handler(okHandler)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var bad, seen atomic.Int64
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						var lim atomic.Int64
						req := httptest.NewRequest("GET", "/", nil)
						req.RemoteAddr = "10.0." + strconv.Itoa(g) + "." + strconv.Itoa(i%50) + ":1"
						req = req.WithContext(context.WithValue(req.Context(), limitKey{}, &lim))
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, req)
						want := strconv.FormatInt(lim.Load(), 10)
						// Every setting here has w = the window: SlidingLog's
						// and SlidingCounter's is the window, and a default
						// GCRA bucket follows the limit (Limit x Window / Limit).
						pol, xl := rec.Header().Get("RateLimit-Policy"), rec.Header().Get("X-RateLimit-Limit")
						seen.Add(1)
						if pol != `"d";q=`+want+";w=3600" || xl != want {
							if bad.Add(1) <= 5 {
								t.Errorf("decision Limit %s: RateLimit-Policy %q, X-RateLimit-Limit %q, RateLimit %q", want, pol, xl, rec.Header().Get("RateLimit"))
							}
						}
					}
				}()
			}
			vals := []int{5, 7, 9, 3, 11}
			for i := 0; i < 3000; i++ {
				if err := m.SetLimit("d", vals[i%len(vals)]); err != nil {
					t.Fatal(err)
				}
			}
			stop.Store(true)
			wg.Wait()
			if bad.Load() > 0 {
				t.Errorf("%d of %d responses advertised a policy other than their decision's", bad.Load(), seen.Load())
			}
		})
	}
}

// A decision made under a setting older than the kept history (or under
// a change made on the engine directly) gets a policy rendered from its
// own Limit, once: the next such decision reuses it.
func TestDecisionOlderThanHistoryGetsItsOwnPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  engine.Config
		want string // the policy for a decision with Limit 4
	}{
		{"SlidingLog", engine.Config{Algorithm: engine.SlidingLog, Limit: 4, MaxLimit: 100, Window: time.Minute}, `"d";q=4;w=60`},
		// The bucket follows the limit: w is the window whatever q is.
		{"GCRA default bucket", engine.Config{Algorithm: engine.GCRA, Limit: 4, MaxLimit: 100, Window: time.Minute}, `"d";q=4;w=60`},
		// A bucket of its own: SetBurst moves q; w is q x window / limit (4 x 60 s / 30).
		{"GCRA own bucket", engine.Config{Algorithm: engine.GCRA, Limit: 30, Burst: 4, MaxLimit: 100, Window: time.Minute}, `"d";q=4;w=8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Options{Default: &Rule{Name: "d", Engine: tc.cfg}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			set := m.SetLimit
			if tc.cfg.Burst != 0 {
				set = m.SetBurst
			}
			for v := 10; v < 10+2*historyLen; v++ { // pushes 4 out of the history
				if err := set("d", v); err != nil {
					t.Fatal(err)
				}
			}
			lv := m.byName["d"].live
			d := engine.Decision{Limit: 4}
			p := lv.current(&d)
			if p.item != tc.want || p.limitStr != "4" {
				t.Fatalf("decision Limit 4: policy %q, X-RateLimit-Limit %q, want %q, 4", p.item, p.limitStr, tc.want)
			}
			if again := lv.current(&d); again != p {
				t.Errorf("a second decision with Limit 4 rendered its policy again")
			}
			// One within the history finds the published setting itself.
			d.Limit = 10 + 2*historyLen - 3
			if p := lv.current(&d); p.q != d.Limit || p.from != nil {
				t.Errorf("decision Limit %d: policy %q (rendered: %v), want the published one", d.Limit, p.item, p.from != nil)
			}
		})
	}
}
