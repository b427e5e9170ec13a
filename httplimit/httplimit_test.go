package httplimit

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// manualClock is an engine.Clock the test moves by hand.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) Now() int64              { return c.ns.Load() }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(int64(time.Hour)) // well past zero, like a running process
	return c
}

func logConfig(limit int, window time.Duration, clk engine.Clock) engine.Config {
	return engine.Config{Algorithm: engine.SlidingLog, Limit: limit, Window: window, Clock: clk}
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

// serve starts a real server on 127.0.0.1 running the middleware over
// okHandler and closes both at the end of the test.
func serve(t *testing.T, opts Options) (*httptest.Server, *Middleware) {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(m.Handler(okHandler))
	t.Cleanup(func() {
		srv.Close()
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv, m
}

type resp struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url string, hdr map[string]string) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, string(b)}
}

func get(t *testing.T, url string) resp { t.Helper(); return do(t, "GET", url, nil) }

func wantHeaders(t *testing.T, r resp, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := r.header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want [%q]", k, got, v)
		}
	}
}

func TestAllowedThenDeniedWithHeaders(t *testing.T) {
	clk := newClock()
	srv, m := serve(t, Options{Default: &Rule{Name: "default", Engine: logConfig(3, time.Minute, clk)}})

	// The engine's window is the closed interval [t-W, t]: a request at
	// exactly t0+60s still sees t0, so the window empties, and a retry
	// passes, 60s+1ns after t0, which rounds up to 61 whole seconds. With
	// room left RateLimit has no t (draft-11's t is the time within which
	// the client can use no more than r, and a sliding window's quota can
	// grow any moment) and X-RateLimit-Reset is capped at w; the request
	// that takes the last unit says when the next can pass: t rounded down
	// (60: within 60 s nothing passes) and X-RateLimit-Reset rounded up
	// (61, Retry-After's value).
	for i, tc := range []struct{ rem, rl, reset string }{{"2", "", "60"}, {"1", "", "60"}, {"0", ";t=60", "61"}} {
		r := get(t, srv.URL+"/x")
		if r.status != 200 || r.body != "ok" {
			t.Fatalf("request %d: status %d body %q, want 200 ok", i, r.status, r.body)
		}
		wantHeaders(t, r, map[string]string{
			"RateLimit-Policy":      `"default";q=3;w=60`,
			"RateLimit":             `"default";r=` + tc.rem + tc.rl,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": tc.rem,
			"X-RateLimit-Reset":     tc.reset,
		})
		if r.header.Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on an allowed response", i)
		}
	}

	clk.Advance(30 * time.Second)
	r := get(t, srv.URL+"/x")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("4th request: status %d, want 429", r.status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(r.body, ProblemTypeQuotaExceeded) {
		t.Errorf("deny: Content-Type %q body %q, want a quota-exceeded problem", ct, r.body)
	}
	// 30s+1ns left until the first request leaves the window: a retry
	// passes after 31 whole seconds, none within 30.
	wantHeaders(t, r, map[string]string{
		"Retry-After":           "31",
		"RateLimit-Policy":      `"default";q=3;w=60`,
		"RateLimit":             `"default";r=0;t=30`,
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "31",
	})

	// Honouring Retry-After is enough.
	clk.Advance(31 * time.Second)
	if r := get(t, srv.URL+"/x"); r.status != 200 {
		t.Fatalf("after Retry-After: status %d, want 200", r.status)
	}
	want := Stats{Allowed: 4, Denied: 1}
	if got := m.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if es := m.EngineStats(); es.Allowed != 4 || es.Denied != 1 || es.Keys != 1 {
		t.Errorf("EngineStats = %+v, want 4 allowed, 1 denied, 1 key", es)
	}
}

func TestRetryAfterRoundsUpToAtLeastOne(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {-time.Second, 0}, {1, 1}, {time.Second, 1},
		{time.Second + 1, 2}, {1500 * time.Millisecond, 2}, {time.Hour, 3600},
		// engine.Never (a call no wait admits) must not overflow negative.
		{engine.Never, int64(engine.Never/time.Second) + 1},
	} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	// A sub-second window: RetryAfter < 1s must still say 1; t (rounded
	// down) says 0.
	clk := newClock()
	srv, _ := serve(t, Options{Default: &Rule{Name: "fast", Engine: logConfig(1, 200*time.Millisecond, clk)}})
	get(t, srv.URL)
	r := get(t, srv.URL)
	if r.status != 429 {
		t.Fatalf("status %d, want 429", r.status)
	}
	wantHeaders(t, r, map[string]string{
		"Retry-After": "1",
		// w is rounded up, never left out.
		"RateLimit-Policy": `"fast";q=1;w=1`,
		"RateLimit":        `"fast";r=0;t=0`,
	})
}

func TestSpoofedForwardedForFromUntrustedPeerIsIgnored(t *testing.T) {
	clk := newClock()
	for _, tc := range []struct {
		name string
		key  func(t *testing.T) KeyFunc
	}{
		{"default key", func(*testing.T) KeyFunc { return nil }},
		{"other proxies trusted", func(t *testing.T) KeyFunc {
			k, err := ClientIP(IPConfig{TrustedProxies: mustPrefixes(t, "10.0.0.0/8", "192.168.0.0/16")})
			if err != nil {
				t.Fatal(err)
			}
			return k
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := serve(t, Options{
				Key:     tc.key(t),
				Default: &Rule{Name: "d", Engine: logConfig(2, time.Minute, clk)},
			})
			// Each request claims a different client; all are the socket peer.
			for i, xff := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"} {
				r := do(t, "GET", srv.URL, map[string]string{
					"X-Forwarded-For": xff, "Forwarded": "for=" + xff, "X-Real-IP": xff,
				})
				want := 200
				if i == 2 {
					want = 429
				}
				if r.status != want {
					t.Fatalf("request %d (XFF %s): status %d, want %d", i, xff, r.status, want)
				}
			}
		})
	}
}

func TestRulesAndTiersFirstMatchWins(t *testing.T) {
	clk := newClock()
	srv, m := serve(t, Options{
		Tier: func(r *http.Request) string { return r.Header.Get("X-Test-Tier") },
		Rules: []Rule{
			{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(2, time.Minute, clk)},
			{Name: "api-pro", PathPrefix: "/api", Tier: "pro", Engine: logConfig(100, time.Minute, clk)},
			{Name: "api", PathPrefix: "/api/", Engine: logConfig(5, time.Minute, clk)},
			// Shadowed by "api" for every /api path: first match wins.
			{Name: "api-shadowed", PathPrefix: "/api/v2", Engine: logConfig(7, time.Minute, clk)},
		},
		Default: &Rule{Name: "default", Engine: logConfig(10, time.Minute, clk)},
	})
	for _, tc := range []struct {
		method, path, tier string
		policy             string
	}{
		{"POST", "/login", "", `"login";q=2;w=60`},
		{"POST", "/login/sso", "", `"login";q=2;w=60`},
		{"GET", "/login", "", `"default";q=10;w=60`},   // method differs
		{"POST", "/loginx", "", `"default";q=10;w=60`}, // not a segment prefix
		{"GET", "/api/users", "pro", `"api-pro";q=100;w=60`},
		{"GET", "/api", "pro", `"api-pro";q=100;w=60`},
		{"GET", "/api/users", "free", `"api";q=5;w=60`},
		{"GET", "/api/v2/users", "", `"api";q=5;w=60`},
		{"GET", "/apiary", "pro", `"default";q=10;w=60`},
		{"GET", "/x/../api/users", "", `"api";q=5;w=60`}, // cleaned before matching
		{"GET", "/", "pro", `"default";q=10;w=60`},
	} {
		req, err := http.NewRequest(tc.method, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = tc.path // send the path verbatim, dot segments included
		if tc.tier != "" {
			req.Header.Set("X-Test-Tier", tc.tier)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("RateLimit-Policy"); got != tc.policy {
			t.Errorf("%s %s tier %q: policy %s, want %s", tc.method, tc.path, tc.tier, got, tc.policy)
		}
	}
	if s := m.Stats(); s.Allowed != 11 {
		t.Errorf("Stats = %+v, want 11 allowed", s)
	}
}

func TestNoDefaultRulePassesUnmatched(t *testing.T) {
	srv, m := serve(t, Options{Rules: []Rule{{Name: "only", PathPrefix: "/limited", Engine: logConfig(1, time.Minute, newClock())}}})
	for range 3 {
		r := get(t, srv.URL+"/free")
		if r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("unmatched request: status %d RateLimit %q", r.status, r.header.Get("RateLimit"))
		}
	}
	if s := m.Stats(); s.Unmatched != 3 {
		t.Errorf("Stats = %+v, want 3 unmatched", s)
	}
}

func TestDryRunNeverBlocks(t *testing.T) {
	srv, m := serve(t, Options{DryRun: true, Default: &Rule{Name: "shadow", Engine: logConfig(2, time.Minute, newClock())}})
	for i := range 6 {
		r := get(t, srv.URL)
		if r.status != 200 {
			t.Fatalf("request %d: status %d, want 200 in dry-run", i, r.status)
		}
		if i >= 2 {
			wantHeaders(t, r, map[string]string{"RateLimit": `"shadow";r=0;t=60`, "X-RateLimit-Remaining": "0"})
			if r.header.Get("Retry-After") != "" {
				t.Errorf("request %d: Retry-After in dry-run", i)
			}
		}
	}
	want := Stats{Allowed: 2, DryRunDenied: 4}
	if got := m.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestKeyErrorFailsOpenOrClosed(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		srv, m := serve(t, Options{
			FailOpen: failOpen,
			Key:      Header("X-API-Key"),
			Default:  &Rule{Name: "k", Engine: logConfig(1, time.Minute, newClock())},
		})
		r := get(t, srv.URL) // no X-API-Key
		var want Stats
		if failOpen {
			// Failing open keys the request by its IP
			// instead of passing it unlimited.
			want = Stats{KeyErrors: 1, Fallbacks: 1, Allowed: 1}
			if r.status != 200 || r.header.Get("RateLimit") != `"k";r=0;t=60` {
				t.Errorf("fail open: status %d RateLimit %q, want 200 keyed by IP", r.status, r.header.Get("RateLimit"))
			}
			if r := get(t, srv.URL); r.status != 429 {
				t.Errorf("fail open, second keyless request: status %d, want 429 (same IP)", r.status)
			}
			want.Denied, want.KeyErrors, want.Fallbacks = 1, 2, 2
		} else {
			want = Stats{KeyErrors: 1, FailedClosed: 1}
			if r.status != http.StatusBadRequest {
				t.Errorf("fail closed: status %d, want 400", r.status)
			}
			if strings.Contains(r.body, "X-Api-Key") {
				t.Errorf("fail closed body leaks the error: %q", r.body)
			}
		}
		if got := m.Stats(); got != want {
			t.Errorf("failOpen=%v: Stats = %+v, want %+v", failOpen, got, want)
		}
		// With the key present the request is limited as usual.
		hdr := map[string]string{"X-API-Key": "k1"}
		if r := do(t, "GET", srv.URL, hdr); r.status != 200 {
			t.Errorf("keyed request: %d", r.status)
		}
		if r := do(t, "GET", srv.URL, hdr); r.status != 429 {
			t.Errorf("second keyed request: %d, want 429", r.status)
		}
	}
}

func TestHeaderKeyRefusesLongKeys(t *testing.T) {
	k := Header("X-API-Key")
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", strings.Repeat("a", MaxKeyLen+1))
	if _, err := k(r); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("long key: err %v, want ErrKeyTooLong", err)
	}
	r.Header.Del("X-API-Key")
	if _, err := k(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("missing key: err %v, want ErrNoKey", err)
	}
}

func TestSharedLimiterIsNamespacedPerRule(t *testing.T) {
	shared, err := engine.New(logConfig(1, time.Minute, newClock()))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	srv, _ := serve(t, Options{
		Rules: []Rule{
			{Name: "a", PathPrefix: "/a", Limiter: shared, Limit: 1, Window: time.Minute},
			{Name: "b", PathPrefix: "/b", Limiter: shared, Limit: 1, Window: time.Minute},
		},
	})
	if r := get(t, srv.URL+"/a"); r.status != 200 {
		t.Fatalf("/a: %d", r.status)
	}
	if r := get(t, srv.URL+"/a"); r.status != 429 {
		t.Fatalf("/a again: %d, want 429", r.status)
	}
	// Same client, same backend, other rule: untouched budget.
	if r := get(t, srv.URL+"/b"); r.status != 200 {
		t.Fatalf("/b: %d, want 200 (rules must not share state)", r.status)
	}
	if n := shared.Len(); n != 2 {
		t.Errorf("shared limiter holds %d keys, want 2 (one per rule)", n)
	}
}

func TestCustomDenyHandler(t *testing.T) {
	var got atomic.Value
	srv, _ := serve(t, Options{
		Key:     Header("X-API-Key"),
		Default: &Rule{Name: "custom", Engine: logConfig(1, time.Minute, newClock())},
		OnDeny: func(w http.ResponseWriter, _ *http.Request, d Denial) {
			got.Store(d)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"type":"quota-exceeded"}`)
		},
	})
	hdr := map[string]string{"X-API-Key": "alice"}
	do(t, "GET", srv.URL, hdr)
	r := do(t, "GET", srv.URL, hdr)
	if r.status != 429 || r.body != `{"type":"quota-exceeded"}` || r.header.Get("Retry-After") != "61" {
		t.Fatalf("custom deny: status %d body %q Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	d, _ := got.Load().(Denial)
	if d.Rule != "custom" || d.Key != "alice" || d.Decision.Allowed {
		t.Errorf("Denial = %+v", d)
	}
}

// TestConcurrentRequestsCountExactly runs under -race: with a fixed clock
// the exact algorithm admits exactly Limit of many concurrent requests.
func TestConcurrentRequestsCountExactly(t *testing.T) {
	const limit, workers, each = 50, 8, 20
	srv, m := serve(t, Options{Default: &Rule{Name: "c", Engine: logConfig(limit, time.Minute, newClock())}})
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				res, err := http.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				switch res.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					denied.Add(1)
				default:
					t.Errorf("status %d", res.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != limit || denied.Load() != workers*each-limit {
		t.Errorf("ok %d denied %d, want %d and %d", ok.Load(), denied.Load(), limit, workers*each-limit)
	}
	if s := m.Stats(); s.Allowed != limit || s.Denied != workers*each-limit {
		t.Errorf("Stats = %+v", s)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	clk := newClock()
	good := logConfig(1, time.Minute, clk)
	lim, err := engine.New(good)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"empty name", Options{Default: &Rule{Engine: good}}, `Default.Name ""`},
		{"bad name", Options{Default: &Rule{Name: `a"b`, Engine: good}}, `Default.Name "a\"b"`},
		{"duplicate name", Options{Rules: []Rule{{Name: "x", Engine: good}, {Name: "x", Engine: good}}}, `Rules[1].Name "x" is used`},
		{"bad engine", Options{Rules: []Rule{{Name: "x", Engine: logConfig(0, time.Minute, clk)}}}, "Rules[0] (x).Engine: engine: Config.Limit must be > 0, got 0"},
		{"limiter without limit", Options{Default: &Rule{Name: "x", Limiter: opaque{lim}, Window: time.Second}}, "Default (x).Limit must be > 0"},
		{"limiter without window", Options{Default: &Rule{Name: "x", Limiter: opaque{lim}, Limit: 1}}, "Default (x).Window must be in (0, "},
		{"limit other than the limiter's", Options{Default: &Rule{Name: "x", Limiter: lim, Limit: 2, Window: time.Minute}}, "Default (x).Limit is 2 but its Limiter's Limit is 1"},
		{"window other than the limiter's", Options{Default: &Rule{Name: "x", Limiter: lim, Window: time.Second}}, "Default (x).Window is 1s but its Limiter's Window is 1m0s"},
		{"limit other than a reflected Config", Options{Default: &Rule{Name: "x", Limiter: storeLike{opaque{lim}}, Limit: 3}}, "Default (x).Limit is 3 but its Limiter's Limit is 7"},
		{"limiter and engine", Options{Default: &Rule{Name: "x", Limiter: lim, Limit: 1, Window: time.Second, Engine: good}}, "sets both Limiter and Engine"},
		{"tier without func", Options{Rules: []Rule{{Name: "x", Tier: "pro", Engine: good}}}, `Rules[0] (x).Tier is "pro" but Options.Tier is nil`},
		{"default with matcher", Options{Default: &Rule{Name: "x", PathPrefix: "/a", Engine: good}}, "must not set Method, PathPrefix or Tier"},
		{"relative prefix", Options{Rules: []Rule{{Name: "x", PathPrefix: "api", Engine: good}}}, `PathPrefix "api" must start with /`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.opts)
			if err == nil {
				m.Close()
				t.Fatalf("New succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalidOptions) && !errors.Is(err, engine.ErrInvalidConfig) {
				t.Errorf("error %v wraps neither ErrInvalidOptions nor engine.ErrInvalidConfig", err)
			}
		})
	}
}

// TestNewRefusesOptionsThatLimitNothing: the zero Options (or a rule list
// left empty, with or without exemptions or a preflight rule) made a
// Middleware that passed every request on unlimited; New refuses it with
// ErrNoRules, naming the fields.
func TestNewRefusesOptionsThatLimitNothing(t *testing.T) {
	for _, opts := range []Options{
		{},
		{Rules: []Rule{}},
		{Exempt: Exemptions{Paths: []string{"/healthz"}}},
		{Preflight: &Rule{Name: "preflight", Engine: logConfig(10, time.Second, newClock())}},
	} {
		m, err := New(opts)
		if err == nil {
			m.Close()
			t.Errorf("New(%+v) succeeded: every request would pass unlimited", opts)
			continue
		}
		if !errors.Is(err, ErrNoRules) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v): %v, want ErrNoRules and ErrInvalidOptions", opts, err)
		}
		if !strings.Contains(err.Error(), "Options.Rules") || !strings.Contains(err.Error(), "Options.Default") {
			t.Errorf("error %q does not name Options.Rules and Options.Default", err)
		}
	}
	mustNew(t, Options{Rules: []Rule{{Name: "login", PathPrefix: "/login", Engine: logConfig(1, time.Minute, newClock())}}})
	mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, newClock())}})
}

func TestHeaderConstantsAreCanonical(t *testing.T) {
	for _, h := range []string{hdrPolicy, hdrRateLimit, hdrXLimit, hdrXRemaining, hdrXReset, hdrRetryAfter, HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP} {
		if c := textproto.CanonicalMIMEHeaderKey(h); c != h {
			t.Errorf("%q is not canonical (%q): direct map assignment would miss it", h, c)
		}
	}
}

func TestHeaderListsDoNotAlias(t *testing.T) {
	// A handler that adds to one rate-limit header must not clobber
	// another, though they share one backing array. UpstreamTheirs keeps
	// what the handler added (and drops ours from that header only).
	m, err := New(Options{Upstream: UpstreamTheirs, Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("RateLimit-Policy", `"upstream";q=9`)
	})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	h := rec.Result().Header
	if got := h.Values("RateLimit-Policy"); len(got) != 1 || got[0] != `"upstream";q=9` {
		t.Errorf("RateLimit-Policy = %q, want the handler's alone", got)
	}
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != `"d";r=4` {
		t.Errorf("RateLimit = %q after an Add to its neighbour", got)
	}
}

func TestSetHeadersAllocations(t *testing.T) {
	ru, err := New(Options{Default: &Rule{Name: "default", Engine: logConfig(100, time.Minute, newClock())}})
	if err != nil {
		t.Fatal(err)
	}
	defer ru.Close()
	w := &headerWriter{h: http.Header{}}
	as := []applied{{ru: ru.def, d: engine.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 30 * time.Second}, t: 30, pol: ru.def.live.pol.Load()}}
	allocs := testing.AllocsPerRun(100, func() { setHeaders(w.h, w, as, UpstreamOurs, false).restore() })
	if allocs > 2 {
		t.Errorf("setHeaders allocates %v times per call, want <= 2", allocs)
	}
}

// headerWriter is a ResponseWriter that keeps its header map between
// requests, so an allocation count sees the middleware's alone.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}

// TestAllowedPathAllocations pins the hot path's cost: on an allowed
// request keyed by an IPv4 socket address the middleware allocates only the
// two header buffers (see setHeaders), whatever the backend.
func TestAllowedPathAllocations(t *testing.T) {
	m, err := New(Options{Default: &Rule{Name: "default", Engine: logConfig(1000, time.Second, newClock())}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Swap in a backend that always admits, so the count covers the
	// middleware over any number of runs.
	m.def.rl = fixedLimiter{engine.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: time.Second}}
	m.def.eng = nil
	h := m.Handler(noopHandler)
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:4711"
	w := &headerWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if allocs > 2 {
		t.Errorf("allowed request allocates %v times in the middleware, want <= 2", allocs)
	}
}

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

// policyOf returns the RateLimit-Policy a request got ("" if none: exempt
// or unmatched).
func policyOf(h http.Handler, method, target string) string {
	return serveRec(h, method, target, "", nil).Header().Get("RateLimit-Policy")
}

// opaque hides a backend's Config method: a ready Limiter that does not say
// its numbers.
type opaque struct{ engine.RateLimiter }

// storeLike is a backend whose Config returns a struct of its own package
// (as redisstore.Store's does), read by reflection.
type storeLike struct{ opaque }

type storeLikeConfig struct {
	Algorithm engine.Algorithm
	Limit     int
	Window    time.Duration
}

func (storeLike) Config() storeLikeConfig {
	return storeLikeConfig{Limit: 7, Window: time.Minute}
}
