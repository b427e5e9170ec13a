package httplimit

// Regression tests for the adversarial review of issue 11, each named after
// its finding (B: bypass, W: wrong behaviour, D: documentation).

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// policyOf returns the RateLimit-Policy a request got ("" if none: exempt
// or unmatched).
func policyOf(h http.Handler, method, target string) string {
	return serveRec(h, method, target, "", nil).Header().Get("RateLimit-Policy")
}

// TestB1LowercaseMethodIsLimited: net/http accepts "post", and Flask or
// Rails route it as POST, so a POST rule must limit it (it escaped the
// example's login rule). A GET rule also takes HEAD.
func TestB1LowercaseMethodIsLimited(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", Method: "POST", PathPrefix: "/login", Engine: logConfig(3, time.Minute, clk)},
		{Name: "reads", Method: "get", PathPrefix: "/r", Engine: logConfig(1, time.Minute, clk)},
	}})
	h := m.Handler(okHandler)
	for i, method := range []string{"POST", "post", "Post"} {
		if rec := serveRec(h, method, "/login", "", nil); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") == "" {
			t.Fatalf("%s /login (%d of 3): %d, policy %q; want 200 under the login rule", method, i+1, rec.Code, rec.Header().Get("RateLimit-Policy"))
		}
	}
	if rec := serveRec(h, "pOsT", "/login", "", nil); rec.Code != 429 {
		t.Errorf("4th login spelled pOsT: %d, want 429", rec.Code)
	}
	if rec := serveRec(h, "HEAD", "/r", "", nil); rec.Code != 200 || rec.Header().Get("RateLimit-Policy") == "" {
		t.Errorf("HEAD under a GET rule: %d %q, want limited", rec.Code, rec.Header().Get("RateLimit-Policy"))
	}
	if rec := serveRec(h, "GET", "/r", "", nil); rec.Code != 429 {
		t.Errorf("GET after HEAD spent the GET rule's unit: %d, want 429", rec.Code)
	}
	if rec := serveRec(h, "PUT", "/login", "", nil); rec.Header().Get("RateLimit-Policy") != "" {
		t.Error("PUT matched a POST rule")
	}
	// A POST that an upstream takes for GET (method-override header) is a GET.
	if rec := serveRec(h, "POST", "/r", "", map[string]string{"X-HTTP-Method-Override": "get"}); rec.Code != 429 {
		t.Errorf("POST overridden to GET: %d, want 429 under the GET rule", rec.Code)
	}
	if _, err := New(Options{Rules: []Rule{{Name: "x", Method: "PO ST", Engine: logConfig(1, time.Minute, clk)}}}); err == nil {
		t.Error(`Method "PO ST" accepted`)
	}

	// route_ip keys: respelling the method is the same route.
	k := RouteIP(func(*http.Request) (string, error) { return "192.0.2.1", nil })
	a, _ := k(httptest.NewRequest("POST", "/login", nil))
	b, _ := k(httptest.NewRequest("post", "/LOGIN;jsessionid=7", nil))
	if a != b {
		t.Errorf("RouteIP keys differ by spelling: %q vs %q", a, b)
	}
}

// TestB2PathSpellingsAreLimited: every spelling some common upstream
// routes to /login (case, servlet ;params and "..;", backslashes, a Rails
// format suffix, dot segments) falls under the /login rule.
func TestB2PathSpellingsAreLimited(t *testing.T) {
	m := mustNew(t, Options{Rules: []Rule{
		{Name: "login", PathPrefix: "/login", Engine: logConfig(1000, time.Minute, newClock())},
		{Name: "api", PathPrefix: "/API/v1", Engine: logConfig(1000, time.Minute, newClock())},
	}})
	h := m.Handler(okHandler)
	for _, target := range []string{
		"/login", "/LOGIN", "/Login/", "/login;jsessionid=1", "/login.json", "/login/x.json",
		"/x/..;/login", "/x/%2e%2e;/login", `/x/..%5clogin`, "//login", "/./login", "/login;a=b/step2",
		"/api/v1/users", "/API/V1", "/api/v1.json",
		"/log%C4%B1n", "/LOG%C4%B0N", // dotless and dotted I: ASP.NET's invariant upper case makes them /login
	} {
		if policyOf(h, "POST", target) == "" {
			t.Errorf("POST %s escaped every rule", target)
		}
	}
	for _, target := range []string{"/loginx", "/logins.json", "/api.v1/users", "/api/v2", "/.login"} {
		if p := policyOf(h, "POST", target); p != "" {
			t.Errorf("POST %s matched %q, want no rule", target, p)
		}
	}
}

// TestB2ExemptOnlyPlainPaths: an exemption by path prefix holds only for
// a path every server reads the same; "..;" (servlet), "\" and
// percent-encoded spellings that path.Clean called clean were exempt and
// forwarded raw.
func TestB2ExemptOnlyPlainPaths(t *testing.T) {
	m := mustNew(t, Options{
		Default: &Rule{Name: "d", Engine: logConfig(1000, time.Minute, newClock())},
		Exempt:  Exemptions{Paths: []string{"/healthz"}},
	})
	h := m.Handler(okHandler)
	for _, target := range []string{"/healthz", "/healthz/", "/healthz/live", "/healthz/live.json"} {
		if p := policyOf(h, "GET", target); p != "" {
			t.Errorf("GET %s: limited (%q), want exempt", target, p)
		}
	}
	for _, target := range []string{
		"/healthz/..;/admin", "/healthz/%2e%2e;/admin", `/healthz/..%5cadmin`, "/healthz/../admin",
		"/healthz%2F..%2Fadmin", "/HEALTHZ", "//healthz", "/healthz;x=1", "/healthz/%61dmin", "/healthz/a%20b",
	} {
		if p := policyOf(h, "GET", target); p == "" {
			t.Errorf("GET %s: exempt, want limited", target)
		}
	}
	if _, err := New(Options{Exempt: Exemptions{Paths: []string{"/a/../b"}}}); err == nil {
		t.Error("exempt path /a/../b accepted")
	}
	mm := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(10, time.Minute, newClock())}, Exempt: Exemptions{Methods: []string{"HEAD"}}})
	if p := policyOf(mm.Handler(okHandler), "head", "/"); p == "" {
		t.Error(`method "head" exempt by "HEAD": an upstream reading methods case-sensitively routes it elsewhere`)
	}
}

// TestW3EffectiveWindowHoldsNoMoreThanR: draft-11 section 4.1.2 defines t
// as the number of seconds within which the client can use no more than
// r. A client is replayed against both algorithms at random times; after
// every response that gives t, it tries hard for t seconds and must get
// at most r through. A log rule said r=3;t=10 and then admitted 4.
func TestW3EffectiveWindowHoldsNoMoreThanR(t *testing.T) {
	for _, alg := range []engine.Algorithm{engine.SlidingLog, engine.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := newClock()
			m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: engine.Config{Algorithm: alg, Limit: 5, Window: 10 * time.Second, Clock: clk}}})
			h := m.Handler(okHandler)
			rng := rand.New(rand.NewPCG(1, uint64(alg)))
			checked := 0
			for range 300 {
				clk.Advance(time.Duration(rng.IntN(4000)) * time.Millisecond)
				rec := serveRec(h, "GET", "/", "", nil)
				r, tt, hasT := parseItem(t, rec.Header().Get("RateLimit"))
				if !hasT {
					if r == 0 {
						t.Fatalf("r=0 without t: %q", rec.Header().Get("RateLimit"))
					}
					continue
				}
				if r != 0 {
					t.Fatalf("t given with r=%d: %q (no backend says when a sliding window's quota next grows)", r, rec.Header().Get("RateLimit"))
				}
				if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); rec.Code == 429 && (ra < tt || ra > tt+1) {
					t.Fatalf("Retry-After %q, t=%d: want t rounded up", rec.Header().Get("Retry-After"), tt)
				}
				// Within t seconds (50 ms steps, up to just before now+t) no
				// request may pass.
				got := 0
				for step := 50 * time.Millisecond; step < time.Duration(tt)*time.Second; step += 50 * time.Millisecond {
					clk.Advance(50 * time.Millisecond)
					if serveRec(h, "GET", "/", "", nil).Code == 200 {
						got++
					}
				}
				if got > r {
					t.Fatalf("r=%d;t=%d, then %d admitted within t", r, tt, got)
				}
				checked++
			}
			if checked == 0 {
				t.Fatal("no response gave t: the trace checked nothing")
			}
		})
	}
}

// parseItem reads one RateLimit item `"name";r=R[;t=T]`.
func parseItem(t *testing.T, v string) (r, tt int, hasT bool) {
	t.Helper()
	_, params, ok := strings.Cut(v, ";")
	if !ok {
		t.Fatalf("RateLimit %q", v)
	}
	r = -1
	for _, p := range strings.Split(params, ";") {
		k, val, _ := strings.Cut(p, "=")
		n, err := strconv.Atoi(val)
		if err != nil {
			t.Fatalf("RateLimit %q: %v", v, err)
		}
		switch k {
		case "r":
			r = n
		case "t":
			tt, hasT = n, true
		}
	}
	if r < 0 {
		t.Fatalf("RateLimit %q without r", v)
	}
	return r, tt, hasT
}

// TestW3StackedRetryAfterNotBeforeAnyT: when stacked rules refuse, the
// Retry-After is never earlier than any t in the response (draft-11
// section 6), even when a rule taken before the refusing one (a
// concurrent request filled it between peek and take) has a longer t.
func TestW3StackedRetryAfterNotBeforeAnyT(t *testing.T) {
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

// TestW4NoRateLimitTrailers: an upstream announcing X-RateLimit-Limit and
// RateLimit as trailers put a second, conflicting value into the trailer
// section; draft-11 says RateLimit MUST NOT appear in a trailer.
func TestW4NoRateLimitTrailers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", "X-RateLimit-Limit, RateLimit, X-Checksum")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("RateLimit", `"up";r=1`)
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-RateLimit-Used", "7") // unannounced
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	for _, mode := range []UpstreamHeaders{UpstreamOurs, UpstreamTheirs} {
		srv, _ := serveHandler(t, Options{Upstream: mode, Default: &Rule{Name: "d", Engine: logConfig(100, time.Minute, newClock())}},
			httputil.NewSingleHostReverseProxy(u))
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != "body" {
			t.Fatalf("body %q", body)
		}
		for k := range res.Trailer {
			if isRateLimitName(k) {
				t.Errorf("mode %d: trailer %s: %q", mode, k, res.Trailer[k])
			}
		}
		if res.Trailer.Get("X-Checksum") != "abc" {
			t.Errorf("mode %d: other trailers lost: %v", mode, res.Trailer)
		}
		if got := res.Header.Values("X-RateLimit-Limit"); mode == UpstreamOurs && (len(got) != 1 || got[0] != "100") {
			t.Errorf("X-RateLimit-Limit %q, want ours alone", got)
		}
	}
}

// TestW5EarlyHintsKeepOurHeaders: httputil.ReverseProxy clears the header
// map after relaying a 1xx; the final response lost
// Access-Control-Expose-Headers (ours) or every rate-limit header
// (theirs).
func TestW5EarlyHintsKeepOurHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "final")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	for _, mode := range []UpstreamHeaders{UpstreamOurs, UpstreamTheirs} {
		srv, _ := serveHandler(t, Options{Upstream: mode, Default: &Rule{Name: "d", Engine: logConfig(100, time.Minute, newClock())}},
			httputil.NewSingleHostReverseProxy(u))
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Origin", "https://app.example")
		var early []int
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { early = append(early, code); return nil },
		}))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if len(early) != 1 || early[0] != 103 {
			t.Fatalf("1xx seen %v: the test did not exercise Early Hints", early)
		}
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if len(res.Header.Values(k)) != 1 {
				t.Errorf("mode %d: final response %s = %q, want ours", mode, k, res.Header.Values(k))
			}
		}
		if got := res.Header.Get("Access-Control-Expose-Headers"); got != exposeValue {
			t.Errorf("mode %d: Access-Control-Expose-Headers %q", mode, got)
		}
	}
}

// TestW6RemainingUnknownHidesTheLease: a hybrid backend's Remaining is its
// node's lease (0 while the global quota has room); an admitted response
// must not say r=0.
func TestW6RemainingUnknownHidesTheLease(t *testing.T) {
	lease := fixedLimiter{engine.Decision{Allowed: true, Limit: 20, Remaining: 0, ResetAfter: 10 * time.Second}}
	m := mustNew(t, Options{Default: &Rule{Name: "hy", Limiter: lease, Limit: 20, Window: 10 * time.Second, RemainingUnknown: true}})
	rec := serveRec(m.Handler(okHandler), "GET", "/", "", nil)
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	for _, k := range []string{"RateLimit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if v := rec.Header().Values(k); len(v) != 0 {
			t.Errorf("%s = %q on a hybrid admission, want none", k, v)
		}
	}
	if rec.Header().Get("RateLimit-Policy") != `"hy";q=20;w=10` || rec.Header().Get("X-RateLimit-Limit") != "20" {
		t.Errorf("policy %q limit %q", rec.Header().Get("RateLimit-Policy"), rec.Header().Get("X-RateLimit-Limit"))
	}
	// Stacked with a rule whose remaining is known, X-RateLimit-* are that rule's.
	m2 := mustNew(t, Options{MatchAll: true, Rules: []Rule{
		{Name: "hy", Limiter: lease, Limit: 20, Window: 10 * time.Second, RemainingUnknown: true},
		{Name: "mem", Engine: logConfig(50, time.Minute, newClock())},
	}})
	rec = serveRec(m2.Handler(okHandler), "GET", "/", "", nil)
	if rec.Header().Get("RateLimit") != `"mem";r=49` || rec.Header().Get("X-RateLimit-Remaining") != "49" || rec.Header().Get("X-RateLimit-Limit") != "50" {
		t.Errorf("stacked: RateLimit %q X-RateLimit %q/%q", rec.Header().Get("RateLimit"), rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	// A refusal still says what the Decision says.
	deny := fixedLimiter{engine.Decision{Limit: 20, RetryAfter: 1500 * time.Millisecond}}
	m3 := mustNew(t, Options{Default: &Rule{Name: "hy", Limiter: deny, Limit: 20, Window: 10 * time.Second, RemainingUnknown: true}})
	rec = serveRec(m3.Handler(okHandler), "GET", "/", "", nil)
	if rec.Code != 429 || rec.Header().Get("RateLimit") != `"hy";r=0;t=1` || rec.Header().Get("Retry-After") != "2" {
		t.Errorf("refusal: %d %q Retry-After %q", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
}

// TestD2ForeignRateLimitHeadersDropped: under UpstreamOurs no rate-limit
// header of the upstream's passes beside ours, not only the three legacy
// names (X-RateLimit-Used, -Reset-After and the older drafts'
// RateLimit-Limit did).
func TestD2ForeignRateLimitHeadersDropped(t *testing.T) {
	foreign := []string{"X-RateLimit-Used", "X-RateLimit-Reset-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "X-Rate-Limit-Limit"}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, k := range foreign {
			w.Header().Add(k, "7")
		}
		w.Header().Set("X-Other", "kept")
	})
	for _, mode := range []UpstreamHeaders{UpstreamOurs, UpstreamTheirs} {
		m := mustNew(t, Options{Upstream: mode, Default: &Rule{Name: "d", Engine: logConfig(5, time.Minute, newClock())}})
		rec := serveRec(m.Handler(h), "GET", "/", "", nil)
		for _, k := range foreign {
			n := len(rec.Header().Values(k))
			if mode == UpstreamOurs && n != 0 || mode == UpstreamTheirs && n != 1 {
				t.Errorf("mode %d: %s has %d values", mode, k, n)
			}
		}
		if rec.Header().Get("X-Other") != "kept" || rec.Header().Get("RateLimit") != `"d";r=4` {
			t.Errorf("mode %d: X-Other %q RateLimit %q", mode, rec.Header().Get("X-Other"), rec.Header().Get("RateLimit"))
		}
	}
	hh := http.Header{}
	for _, k := range append(foreign, "Ratelimit", "Ratelimit-Policy", "Retry-After", "X-Other") {
		hh.Set(k, "1")
	}
	StripRateLimitHeaders(hh)
	if len(hh) != 2 || hh.Get("Retry-After") == "" || hh.Get("X-Other") == "" {
		t.Errorf("StripRateLimitHeaders left %v", hh)
	}
}

// TestPreflightHasItsOwnQuota: CORS preflights never spend a rule's quota,
// but with Options.Preflight they are not an unlimited free channel to
// the upstream either.
func TestPreflightHasItsOwnQuota(t *testing.T) {
	clk := newClock()
	m := mustNew(t, Options{
		Default:   &Rule{Name: "d", Engine: logConfig(1, time.Minute, clk)},
		Preflight: &Rule{Name: "preflight", Engine: logConfig(2, time.Minute, clk)},
	})
	h := m.Handler(okHandler)
	pre := map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
	for i, want := range []int{200, 200, 429} {
		rec := serveRec(h, "OPTIONS", "/x", "", pre)
		if rec.Code != want || !strings.Contains(rec.Header().Get("RateLimit-Policy"), `"preflight"`) {
			t.Errorf("preflight %d: %d %q, want %d under the preflight policy", i, rec.Code, rec.Header().Get("RateLimit-Policy"), want)
		}
	}
	if rec := serveRec(h, "POST", "/x", "", nil); rec.Code != 200 {
		t.Errorf("the real request after the preflights: %d, want 200 (its quota untouched)", rec.Code)
	}
	rs := m.RuleStats()
	if len(rs) != 2 || rs[1] != (RuleStats{Rule: "preflight", Allowed: 2, Denied: 1}) {
		t.Errorf("RuleStats %+v", rs)
	}
	// Without Preflight they are exempt.
	m2 := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(1, time.Minute, clk)}})
	for range 3 {
		if rec := serveRec(m2.Handler(okHandler), "OPTIONS", "/x", "", pre); rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("preflight without a Preflight rule: %d %q", rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	if _, err := New(Options{Preflight: &Rule{Name: "p", Method: "OPTIONS", Engine: logConfig(1, time.Minute, clk)}}); err == nil {
		t.Error("Preflight with a Method accepted")
	}
}
