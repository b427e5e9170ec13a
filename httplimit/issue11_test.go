package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// serveRec runs one request through h with a recorder.
func serveRec(h http.Handler, method, target, remote string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	if remote != "" {
		req.RemoteAddr = remote
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func mustNew(t *testing.T, opts Options) *Middleware {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// --- item 1: client-chosen keys ---

func TestKeyChainFallsBackToIPForMissingOrLongKeys(t *testing.T) {
	ip, err := ClientIP(IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := NewKeyChain(Header("X-Api-Key"), ip)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, want string
	}{
		{"api key", "alice", "alice"},
		{"missing", "", "\x001\x00192.0.2.1"},
		{"too long", strings.Repeat("k", MaxKeyLen+1), "\x001\x00192.0.2.1"},
		// An API key spelled like an IP cannot land on that IP's budget.
		{"key spelled as ip", "192.0.2.1", "192.0.2.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if tc.key != "" {
			r.Header.Set("X-Api-Key", tc.key)
		}
		got, err := chain(r)
		if err != nil || got != tc.want {
			t.Errorf("%s: key %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@unix"
	if _, err := chain(r); !errors.Is(err, ErrBadRemoteAddr) {
		t.Errorf("every source failing: err %v, want the last (ErrBadRemoteAddr)", err)
	}
	if _, err := NewKeyChain(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("empty chain: %v", err)
	}
	if _, err := NewKeyChain(ip, nil); err == nil || !strings.Contains(err.Error(), "source 1 is nil") {
		t.Errorf("nil source: %v", err)
	}
}

// TestRandomAPIKeysDoNotBypassLimit pins issue 11 item 1: with key: header,
// 50 random X-API-Key values at 5/min all passed. With a KeyBudget of 2 new
// keys per IP, one IP gets at most (2+1) x 5 whatever it sends.
func TestRandomAPIKeysDoNotBypassLimit(t *testing.T) {
	clk := newClock()
	kb, err := NewKeyBudget(KeyBudgetConfig{Key: Header("X-Api-Key"), NewKeys: 2, Window: time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	m := mustNew(t, Options{Key: kb.Key, Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, clk)}})
	h := m.Handler(okHandler)
	passed := 0
	for i := range 50 {
		rec := serveRec(h, "GET", "/", "198.51.100.7:1000", map[string]string{"X-Api-Key": fmt.Sprintf("rnd-%d", i)})
		if rec.Code == 200 {
			passed++
		}
	}
	// Keys 0 and 1 get their own 5 (1 used each); keys 2..49 share the
	// IP's 5.
	if want := 2 + 5; passed != want {
		t.Errorf("50 random keys from one IP: %d passed, want %d", passed, want)
	}
	// Another IP is unaffected and its first keys are its own.
	if rec := serveRec(h, "GET", "/", "198.51.100.8:1000", map[string]string{"X-Api-Key": "other"}); rec.Code != 200 {
		t.Errorf("other IP: %d", rec.Code)
	}
	// A known key keeps working from the exhausted IP.
	if rec := serveRec(h, "GET", "/", "198.51.100.7:1000", map[string]string{"X-Api-Key": "rnd-0"}); rec.Code != 200 {
		t.Errorf("seen key from the same IP: %d, want 200", rec.Code)
	}
	// No key at all: keyed by the IP, which is exhausted.
	if rec := serveRec(h, "GET", "/", "198.51.100.7:1000", nil); rec.Code != 429 {
		t.Errorf("keyless request from the exhausted IP: %d, want 429", rec.Code)
	}
	// After a window the IP may introduce new keys again.
	clk.Advance(time.Minute + time.Second)
	if rec := serveRec(h, "GET", "/", "198.51.100.7:1000", map[string]string{"X-Api-Key": "fresh"}); rec.Code != 200 {
		t.Errorf("new key a window later: %d, want 200", rec.Code)
	}
}

func TestKeyBudgetVerifiedKeysAreNotCharged(t *testing.T) {
	kb, err := NewKeyBudget(KeyBudgetConfig{
		Key: Header("X-Api-Key"), NewKeys: 1, Window: time.Minute, Clock: newClock(),
		Verified: func(k string) bool { return strings.HasPrefix(k, "good-") },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	key := func(k string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.5:1"
		r.Header.Set("X-Api-Key", k)
		got, err := kb.Key(r)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range 5 {
		if k := fmt.Sprintf("good-%d", i); key(k) != k {
			t.Fatalf("verified key %s was charged", k)
		}
	}
	if got := key("bad-1"); got != "bad-1" {
		t.Errorf("first unverified key: %q", got)
	}
	if got := key("bad-2"); got != fallbackNS+"203.0.113.5" {
		t.Errorf("second unverified key past budget 1: %q, want the IP", got)
	}
}

func TestNewKeyBudgetRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  KeyBudgetConfig
		want string
	}{
		{KeyBudgetConfig{NewKeys: 1, Window: time.Second}, "KeyBudgetConfig.Key is nil"},
		{KeyBudgetConfig{Key: Header("K"), Window: time.Second}, "KeyBudgetConfig.NewKeys must be >= 1"},
		{KeyBudgetConfig{Key: Header("K"), NewKeys: 1}, "KeyBudgetConfig.Window must be in"},
		{KeyBudgetConfig{Key: Header("K"), NewKeys: 1, Window: time.Second, MaxMemory: -1}, "KeyBudgetConfig.MaxMemory"},
		{KeyBudgetConfig{Key: Header("K"), NewKeys: engine.MaxLogLimit + 1, Window: time.Second}, "KeyBudgetConfig.NewKeys"},
	} {
		kb, err := NewKeyBudget(tc.cfg)
		if err == nil {
			kb.Close()
			t.Errorf("%+v: no error, want %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not contain %q", err, tc.want)
		}
	}
}

// TestFailOpenLimitsOverLongKeysByIP pins issue 11 item 1: with fail_open
// an over-long key was never limited.
func TestFailOpenLimitsOverLongKeysByIP(t *testing.T) {
	m := mustNew(t, Options{FailOpen: true, Key: Header("X-Api-Key"), Default: &Rule{Name: "d", Engine: logConfig(2, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	passed := 0
	for i := range 10 {
		long := strings.Repeat("x", MaxKeyLen) + fmt.Sprint(i)
		if serveRec(h, "GET", "/", "192.0.2.77:1", map[string]string{"X-Api-Key": long}).Code == 200 {
			passed++
		}
	}
	if passed != 2 {
		t.Errorf("%d of 10 over-long keys passed, want 2 (the IP's limit)", passed)
	}
	if s := m.Stats(); s.Fallbacks != 10 || s.FailedOpen != 0 || s.KeyErrors != 10 {
		t.Errorf("Stats %+v, want 10 fallbacks", s)
	}
}

// TestFailOpenKeyCollisionIsNamespaced: a client whose API key is the text
// of another client's IP does not spend that client's fallback budget.
func TestFailOpenKeyCollisionIsNamespaced(t *testing.T) {
	m := mustNew(t, Options{FailOpen: true, Key: Header("X-Api-Key"), Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	if rec := serveRec(h, "GET", "/", "198.51.100.1:1", map[string]string{"X-Api-Key": "192.0.2.9"}); rec.Code != 200 {
		t.Fatalf("attacker: %d", rec.Code)
	}
	if rec := serveRec(h, "GET", "/", "192.0.2.9:1", nil); rec.Code != 200 {
		t.Errorf("victim without a key, keyed by its IP: %d, want 200", rec.Code)
	}
}

// --- item 7: header meaning ---

func TestPolicyWindowRoundedUpNeverOmitted(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(5, 2500*time.Millisecond, newClock())}})
	rec := serveRec(m.Handler(okHandler), "GET", "/", "", nil)
	if got := rec.Header().Get("RateLimit-Policy"); got != `"d";q=5;w=3` {
		t.Errorf("RateLimit-Policy %q, want w=3", got)
	}
}

// TestResetNeverExceedsWindowWithRoomLeft pins issue 11 item 7: a 60 s
// counter window said 70 s on an allowed response (until the key is
// empty, up to two windows). With room left, X-RateLimit-Reset is at most
// w for both algorithms, and RateLimit carries no t (see
// TestW3EffectiveWindowHoldsNoMoreThanR).
func TestResetNeverExceedsWindowWithRoomLeft(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := newClock()
			m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: engine.Config{Algorithm: alg, Limit: 100, Window: time.Minute, Clock: clk}}})
			h := m.Handler(okHandler)
			for i := range 30 {
				rec := serveRec(h, "GET", "/", "", nil)
				var r int
				if _, err := fmt.Sscanf(rec.Header().Get("RateLimit"), `"d";r=%d`, &r); err != nil || strings.Contains(rec.Header().Get("RateLimit"), "t=") {
					t.Fatalf("RateLimit %q (%v), want r and no t", rec.Header().Get("RateLimit"), err)
				}
				var reset int
				if _, err := fmt.Sscan(rec.Header().Get("X-RateLimit-Reset"), &reset); err != nil || r == 0 || reset < 1 || reset > 60 {
					t.Fatalf("request %d: r=%d X-RateLimit-Reset %q, want r>0 and 1 <= reset <= 60", i, r, rec.Header().Get("X-RateLimit-Reset"))
				}
				clk.Advance(7 * time.Second) // crosses counter window boundaries
			}
		})
	}
}

// TestLastUnitSaysWhenNextPasses: the response that takes the last unit
// says, in t, exactly when the next request passes (one extra peek).
func TestLastUnitSaysWhenNextPasses(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(2, 10*time.Second, clk)}})
	h := m.Handler(okHandler)
	serveRec(h, "GET", "/", "", nil)
	clk.Advance(4 * time.Second)
	rec := serveRec(h, "GET", "/", "", nil)
	// The first request leaves the window 10s+1ns after it: 6s+1ns from
	// now, so t=6 (nothing passes within 6 s) and X-RateLimit-Reset 7.
	if got := rec.Header().Get("RateLimit"); got != `"d";r=0;t=6` || rec.Header().Get("X-RateLimit-Reset") != "7" {
		t.Fatalf("last unit: RateLimit %q X-RateLimit-Reset %q, want r=0;t=6 and 7", got, rec.Header().Get("X-RateLimit-Reset"))
	}
	clk.Advance(6 * time.Second)
	if rec := serveRec(h, "GET", "/", "", nil); rec.Code != 429 {
		t.Errorf("after t seconds: %d, want 429 (t is rounded down)", rec.Code)
	}
	clk.Advance(time.Second)
	if rec := serveRec(h, "GET", "/", "", nil); rec.Code != 200 {
		t.Errorf("after t seconds: %d, want 200", rec.Code)
	}
}

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

// upstreamHandler plays an upstream that sets its own rate-limit headers
// the way httputil.ReverseProxy copies them (Add).
var upstreamHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Add("X-RateLimit-Limit", "999")
	w.Header().Add("RateLimit", `"up";r=1;t=1`)
	_, _ = io.WriteString(w, "up")
})

func TestUpstreamRateLimitHeadersNeverConflict(t *testing.T) {
	for _, tc := range []struct {
		up        UpstreamHeaders
		limit, rl string
	}{
		{UpstreamOurs, "5", `"d";r=4`},
		{UpstreamTheirs, "999", `"up";r=1;t=1`},
	} {
		m := mustNew(t, Options{Upstream: tc.up, Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}})
		srv := httptest.NewServer(m.Handler(upstreamHandler))
		r := get(t, srv.URL)
		srv.Close()
		wantHeaders(t, r, map[string]string{"X-RateLimit-Limit": tc.limit, "RateLimit": tc.rl, "RateLimit-Policy": `"d";q=5;w=60`})
	}
	// Ours also holds for a handler that only sets headers and writes
	// nothing (the server commits the header after the middleware returns).
	m0 := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}})
	rec0 := serveRec(m0.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("X-RateLimit-Limit", "999")
		w.Header().Del("RateLimit")
	})), "GET", "/", "", nil)
	if got := rec0.Header().Values("X-RateLimit-Limit"); len(got) != 1 || got[0] != "5" {
		t.Errorf("silent handler: X-RateLimit-Limit %q, want [5]", got)
	}
	if got := rec0.Header().Get("RateLimit"); got != `"d";r=4` {
		t.Errorf("silent handler deleted RateLimit: %q, want ours restored", got)
	}
	// Unchecked: the handler's additions go out beside ours.
	m := mustNew(t, Options{Upstream: UpstreamUnchecked, Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}})
	rec := serveRec(m.Handler(upstreamHandler), "GET", "/", "", nil)
	if got := rec.Header().Values("X-RateLimit-Limit"); len(got) != 2 || got[0] != "5" || got[1] != "999" {
		t.Errorf("unchecked: X-RateLimit-Limit %q, want ours then theirs", got)
	}
	if _, err := New(Options{Upstream: 7}); err == nil || !strings.Contains(err.Error(), "Options.Upstream 7") {
		t.Errorf("Upstream 7: %v", err)
	}
}

// TestReverseProxyUpstreamHeaders runs the real proxy: the upstream's
// X-RateLimit-Limit must not reach the client beside ours.
func TestReverseProxyUpstreamHeaders(t *testing.T) {
	up := httptest.NewServer(upstreamHandler)
	defer up.Close()
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := serveHandler(t, Options{Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}}, httputil.NewSingleHostReverseProxy(u))
	r := get(t, srv.URL)
	if r.status != 200 || r.body != "up" {
		t.Fatalf("proxied: %d %q", r.status, r.body)
	}
	wantHeaders(t, r, map[string]string{"X-RateLimit-Limit": "5", "RateLimit": `"d";r=4`})
}

func serveHandler(t *testing.T, opts Options, h http.Handler) (*httptest.Server, *Middleware) {
	t.Helper()
	m := mustNew(t, opts)
	srv := httptest.NewServer(m.Handler(h))
	t.Cleanup(srv.Close)
	return srv, m
}

// TestWrappedWriterKeepsFlushAndHijack: streaming and websockets pass
// through the writer the middleware hands on.
func TestWrappedWriterKeepsFlushAndHijack(t *testing.T) {
	srv, _ := serveHandler(t, Options{Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/flush" {
				w.Header().Add("X-RateLimit-Limit", "999")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "flushed")
				return
			}
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
			_ = brw.Flush()
		}))
	r := get(t, srv.URL+"/flush")
	if r.body != "flushed" {
		t.Errorf("flush body %q", r.body)
	}
	wantHeaders(t, r, map[string]string{"X-RateLimit-Limit": "5"})
	if r := get(t, srv.URL+"/hijack"); r.body != "hijacked" {
		t.Errorf("hijack body %q", r.body)
	}
}

// --- stacked limits ---

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

// --- exemptions ---

func TestExemptionsSkipLimits(t *testing.T) {
	m := mustNew(t, Options{
		Exempt: Exemptions{
			Paths:   []string{"/healthz"},
			Methods: []string{"HEAD"},
			CIDRs:   []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("::ffff:172.16.0.0/108")},
			IP:      IPConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")}},
		},
		Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())},
	})
	h := m.Handler(okHandler)
	for i, tc := range []struct {
		method, target, remote string
		hdr                    map[string]string
	}{
		{"GET", "/healthz", "192.0.2.1:1", nil},
		{"GET", "/healthz/live", "192.0.2.1:1", nil},
		{"HEAD", "/", "192.0.2.1:1", nil},
		{"GET", "/", "10.1.2.3:1", nil},
		{"GET", "/", "172.16.5.5:1", nil},
		{"GET", "/", "10.9.9.9:1", map[string]string{"X-Forwarded-For": "10.1.7.7"}}, // via a trusted proxy
		{"OPTIONS", "/api", "192.0.2.1:1", map[string]string{"Origin": "https://a.example", "Access-Control-Request-Method": "POST"}},
	} {
		for range 3 {
			rec := serveRec(h, tc.method, tc.target, tc.remote, tc.hdr)
			if rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
				t.Fatalf("case %d %s %s: %d RateLimit %q, want exempt", i, tc.method, tc.target, rec.Code, rec.Header().Get("RateLimit"))
			}
		}
	}
	if s := m.Stats(); s.Exempt != 21 || s.Allowed != 0 {
		t.Errorf("Stats %+v, want 21 exempt", s)
	}
	// Not exempt: a spoofed XFF from an untrusted peer, a path that only
	// shares letters, and an OPTIONS that is no preflight.
	for i, tc := range []struct {
		method, target, remote string
		hdr                    map[string]string
	}{
		{"GET", "/", "192.0.2.50:1", map[string]string{"X-Forwarded-For": "10.1.7.7"}},
		{"GET", "/healthzx", "192.0.2.51:1", nil},
		{"GET", "/api/../healthz", "192.0.2.53:1", nil}, // not clean: never exempt
		{"GET", "//healthz", "192.0.2.54:1", nil},
		{"OPTIONS", "/", "192.0.2.52:1", nil},
	} {
		serveRec(h, tc.method, tc.target, tc.remote, tc.hdr)
		if rec := serveRec(h, tc.method, tc.target, tc.remote, tc.hdr); rec.Code != 429 {
			t.Errorf("case %d: second request %d, want 429 (not exempt)", i, rec.Code)
		}
	}
}

func TestPreflightExemptWithoutConfig(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	pre := map[string]string{"Origin": "https://a.example", "Access-Control-Request-Method": "GET"}
	for range 5 {
		if rec := serveRec(h, "OPTIONS", "/", "", pre); rec.Code != 200 {
			t.Fatalf("preflight: %d", rec.Code)
		}
	}
	if rec := serveRec(h, "GET", "/", "", nil); rec.Code != 200 {
		t.Errorf("real request after preflights: %d, want 200 (preflights consumed nothing)", rec.Code)
	}
}

func TestExemptionsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		ex   Exemptions
		want string
	}{
		{Exemptions{Paths: []string{"healthz"}}, `Exempt.Paths[0] "healthz" must start with /`},
		{Exemptions{Methods: []string{""}}, `Exempt.Methods[0] ""`},
		{Exemptions{CIDRs: []netip.Prefix{{}}}, "Exempt.CIDRs[0] is not a valid prefix"},
		{Exemptions{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IP: IPConfig{Header: "X-Nope"}}, "IPConfig.Header"},
	} {
		_, err := New(Options{Exempt: tc.ex})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want %q", tc.ex, err, tc.want)
		}
	}
}

// --- 429 body and CORS ---

func TestDenyBodyIsProblemJSON(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "api.v1", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(okHandler)
	serveRec(h, "GET", "/", "", nil)
	rec := serveRec(h, "GET", "/", "", nil)
	if rec.Code != 429 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var p struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Policies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
	if p.Type != ProblemTypeQuotaExceeded || p.Status != 429 || len(p.Policies) != 1 || p.Policies[0] != "api.v1" || !strings.Contains(p.Detail, "61 s") {
		t.Errorf("problem %+v", p)
	}
	// text/plain stays available.
	m2 := mustNew(t, Options{OnDeny: DenyText, Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h2 := m2.Handler(okHandler)
	serveRec(h2, "GET", "/", "", nil)
	rec = serveRec(h2, "GET", "/", "", nil)
	if rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" || rec.Body.String() != "429 too many requests\n" {
		t.Errorf("DenyText: %q %q", rec.Header().Get("Content-Type"), rec.Body)
	}
}

func TestCORSExposesRateLimitHeaders(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Access-Control-Expose-Headers", "X-Trace")
	}))
	origin := map[string]string{"Origin": "https://app.example"}
	for i, want := range []int{200, 429} {
		rec := serveRec(h, "GET", "/", "", origin)
		got := strings.Join(rec.Header().Values("Access-Control-Expose-Headers"), ", ")
		if rec.Code != want || !strings.Contains(got, "RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit") {
			t.Errorf("request %d: %d Expose %q", i, rec.Code, got)
		}
		if i == 0 && !strings.Contains(got, "X-Trace") {
			t.Errorf("handler's own expose list lost: %q", got)
		}
	}
	m2 := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
	if rec := serveRec(m2.Handler(okHandler), "GET", "/", "", nil); rec.Header().Get("Access-Control-Expose-Headers") != "" {
		t.Error("Expose-Headers without Origin")
	}
}

// --- observability ---

func TestObserveAndRuleStats(t *testing.T) {
	var mu sync.Mutex
	var evs []Event
	fail := &ctxLimiter{fixedLimiter: fixedLimiter{engine.Decision{Allowed: true, Limit: 9, Remaining: 8}}, err: errors.New("redis: i/o timeout")}
	m := mustNew(t, Options{
		Key: Header("X-Api-Key"),
		Rules: []Rule{
			{Name: "remote", PathPrefix: "/remote", Limiter: fail, Limit: 9, Window: time.Second},
		},
		Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())},
		Observe: func(_ *http.Request, e Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() },
	})
	h := m.Handler(okHandler)
	k := map[string]string{"X-Api-Key": "a"}
	serveRec(h, "GET", "/", "", k)
	serveRec(h, "GET", "/", "", k)
	serveRec(h, "GET", "/", "", nil) // key error, fail closed
	serveRec(h, "GET", "/remote", "", k)
	want := []struct {
		rule string
		o    Outcome
		err  bool
	}{{"d", OutcomeAllowed, false}, {"d", OutcomeDenied, false}, {"d", OutcomeKeyError, true}, {"remote", OutcomeAllowed, true}}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		e := evs[i]
		if e.Rule != w.rule || e.Outcome != w.o || (e.Err != nil) != w.err || e.Latency <= 0 {
			t.Errorf("event %d = %+v (%s), want %s %s err=%v and a latency", i, e, e.Outcome, w.rule, w.o, w.err)
		}
	}
	rs := m.RuleStats()
	wantRS := []RuleStats{{Rule: "remote", Allowed: 1, BackendErrors: 1}, {Rule: "d", Allowed: 1, Denied: 1, KeyErrors: 1}}
	if len(rs) != 2 || rs[0] != wantRS[0] || rs[1] != wantRS[1] {
		t.Errorf("RuleStats %+v, want %+v", rs, wantRS)
	}
	for o, s := range map[Outcome]string{OutcomeAllowed: "allowed", OutcomeDenied: "denied", OutcomeDryRunDenied: "dry_run_denied", OutcomeKeyError: "key_error", 9: "unknown"} {
		if o.String() != s {
			t.Errorf("Outcome(%d) = %q, want %q", o, o.String(), s)
		}
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
