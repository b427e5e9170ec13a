package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
)

// fixedClock keeps the example's output stable; production code leaves
// engine.Config.Clock nil.
type fixedClock struct{}

func (fixedClock) Now() int64 { return int64(time.Hour) }

func Example() {
	m, err := httplimit.New(httplimit.Options{
		Rules: []httplimit.Rule{{
			Name: "login", Method: "POST", PathPrefix: "/login",
			Engine: engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: time.Minute, Clock: fixedClock{}},
		}},
		Default: &httplimit.Rule{
			Name:   "default",
			Engine: engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute, Clock: fixedClock{}},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	}))

	for range 2 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/login", nil) // RemoteAddr 192.0.2.1:1234
		h.ServeHTTP(rec, req)
		fmt.Printf("%d %s %s Retry-After=%q\n", rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	fmt.Printf("%+v\n", m.Stats())
	// Output:
	// 200 "login";q=1;w=60 "login";r=0;t=60 Retry-After=""
	// 429 "login";q=1;w=60 "login";r=0;t=60 Retry-After="61"
	// {Allowed:1 Denied:1 DryRunDenied:0 KeyErrors:0 FailedOpen:0 FailedClosed:0 Unmatched:0 Exempt:0 Fallbacks:0}
}

// A gateway behind a load balancer at 10.0.0.0/8 keys clients by the
// address that balancer appends to X-Forwarded-For, and IPv6 clients by /64.
func ExampleClientIP() {
	key, err := httplimit.ClientIP(httplimit.IPConfig{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:         httplimit.HeaderXForwardedFor,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range []struct{ peer, xff string }{
		{"10.0.0.7:5555", "198.51.100.1, 203.0.113.9"}, // spoofed first entry ignored
		{"10.0.0.7:5555", "2001:db8:1:2:3:4:5:6"},
		{"198.51.100.20:5555", "203.0.113.9"}, // not from the balancer: header ignored
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		r.Header.Set("X-Forwarded-For", c.xff)
		k, _ := key(r)
		fmt.Println(k)
	}
	// Output:
	// 203.0.113.9
	// 2001:db8:1:2::
	// 198.51.100.20
}

// Stacked limits: a login rule and a per-client overall rule both apply to
// POST /login; the headers list both policies, and a refusal by one takes
// nothing from the other.
func ExampleOptions_matchAll() {
	log := func(limit int) engine.Config {
		return engine.Config{Algorithm: engine.SlidingLog, Limit: limit, Window: time.Minute, Clock: fixedClock{}}
	}
	m, err := httplimit.New(httplimit.Options{
		MatchAll: true,
		Rules: []httplimit.Rule{
			{Name: "login", Method: "POST", PathPrefix: "/login", Engine: log(1)},
			{Name: "all", Engine: log(100)},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, req := range []*http.Request{
		httptest.NewRequest("POST", "/login", nil),
		httptest.NewRequest("POST", "/login", nil),
		httptest.NewRequest("GET", "/", nil),
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "login";r=0;t=60, "all";r=99
	// 429 "login";r=0;t=60, "all";r=99
	// 200 "all";r=98
}

// An API key when the request has one, else the client IP; and at most
// two new unverified keys per IP per minute, so inventing keys does not
// multiply a client's allowance.
func ExampleNewKeyBudget() {
	kb, err := httplimit.NewKeyBudget(httplimit.KeyBudgetConfig{
		Key: httplimit.Header("X-Api-Key"), NewKeys: 2, Window: time.Minute, Clock: fixedClock{},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer kb.Close()
	for _, k := range []string{"k1", "k2", "k3", "k1", ""} {
		r := httptest.NewRequest("GET", "/", nil) // RemoteAddr 192.0.2.1:1234
		if k != "" {
			r.Header.Set("X-Api-Key", k)
		}
		key, _ := kb.Key(r)
		fmt.Printf("%q\n", key)
	}
	// Output:
	// "k1"
	// "k2"
	// "\x00ip\x00192.0.2.1"
	// "k1"
	// "\x00ip\x00192.0.2.1"
}
