package httplimit

import (
	"fmt"
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

// TestEffectiveWindowHoldsNoMoreThanRemaining: draft-11 section 4.1.2 defines t
// as the number of seconds within which the client can use no more than
// r. A client is replayed against both algorithms at random times; after
// every response that gives t, it tries hard for t seconds and must get
// at most r through. A log rule said r=3;t=10 and then admitted 4.
func TestEffectiveWindowHoldsNoMoreThanRemaining(t *testing.T) {
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

// TestRateLimitHeadersNeverSentAsTrailers: an upstream announcing X-RateLimit-Limit and
// RateLimit as trailers put a second, conflicting value into the trailer
// section; draft-11 says RateLimit MUST NOT appear in a trailer.
func TestRateLimitHeadersNeverSentAsTrailers(t *testing.T) {
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

// TestEarlyHintsKeepOurHeaders: httputil.ReverseProxy clears the header
// map after relaying a 1xx; the final response lost
// Access-Control-Expose-Headers (ours) or every rate-limit header
// (theirs).
func TestEarlyHintsKeepOurHeaders(t *testing.T) {
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

// TestRemainingUnknownHidesTheLease: a hybrid backend's Remaining is its
// node's lease (0 while the global quota has room); an admitted response
// must not say r=0.
func TestRemainingUnknownHidesTheLease(t *testing.T) {
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

// TestForeignRateLimitHeadersDropped: under UpstreamOurs no rate-limit
// header of the upstream's passes beside ours, not only the three legacy
// names (X-RateLimit-Used, -Reset-After and the older drafts'
// RateLimit-Limit did).
func TestForeignRateLimitHeadersDropped(t *testing.T) {
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

func TestPolicyWindowRoundedUpNeverOmitted(t *testing.T) {
	m := mustNew(t, Options{Default: &Rule{Name: "d", Engine: logConfig(5, 2500*time.Millisecond, newClock())}})
	rec := serveRec(m.Handler(okHandler), "GET", "/", "", nil)
	if got := rec.Header().Get("RateLimit-Policy"); got != `"d";q=5;w=3` {
		t.Errorf("RateLimit-Policy %q, want w=3", got)
	}
}

// TestResetNeverExceedsWindowWithRoomLeft: a 60 s
// counter window said 70 s on an allowed response (until the key is
// empty, up to two windows). With room left, X-RateLimit-Reset is at most
// w for both algorithms, and RateLimit carries no t (see
// TestEffectiveWindowHoldsNoMoreThanRemaining).
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
