package peers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"
	golimiterhttp "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/slidelimit/slidelimit/bench/keyset"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/httplimit"
)

// Middleware is one net/http rate-limiting middleware under test: Wrap
// puts it in front of a handler, keyed by the client IP of the request's
// RemoteAddr (each library's own way of reading it), and Close stops its
// background work.
type Middleware struct {
	Wrap  func(http.Handler) http.Handler
	Close func()
}

// MiddlewareImpl is one middleware under test, named like Impl so that the
// results generator reads its algorithm and module from the same
// peer-<name> configuration lines.
type MiddlewareImpl struct {
	Name      string
	Algorithm string
	Module    string
	// New builds the middleware for profile p: Limit requests per Window
	// per client IP (token buckets: rate Limit/Window, burst Limit).
	New func(p keyset.Profile) (Middleware, error)
	// HotAllowed, if set, replaces keyset.HotAllowed in the one-client
	// allowed scenario, for an implementation whose arithmetic refuses
	// under that profile: the scenario measures every middleware's
	// admitting path.
	HotAllowed *keyset.Profile
}

// MiddlewareImpls lists every middleware, ours first. Ours is httplimit
// with each engine algorithm; the peers are the middlewares their
// libraries ship, each with its defaults except the key (the socket IP,
// no forwarding header believed, no path in the key), so that every one
// limits the same clients the same way.
func MiddlewareImpls() []MiddlewareImpl {
	return []MiddlewareImpl{
		{"httplimit-counter", "httplimit over the engine's sliding window counter", "github.com/slidelimit/slidelimit", newHTTPLimit(engine.SlidingCounter), nil},
		{"httplimit-log", "httplimit over the engine's sliding window log", "github.com/slidelimit/slidelimit", newHTTPLimit(engine.SlidingLog), nil},
		{"httplimit-gcra", "httplimit over the engine's GCRA", "github.com/slidelimit/slidelimit", newHTTPLimit(engine.GCRA), nil},
		{"httprate-mw", "httprate.LimitBy (sliding window counter), key: RemoteAddr's IP via CanonicalizeIP", "github.com/go-chi/httprate", newHTTPRateMiddleware, nil},
		{"tollbooth-mw", "tollbooth.LimitHandler (x/time/rate token bucket per key in an expirable cache), IP lookup RemoteAddr only, URL ignored", "github.com/didip/tollbooth/v7", newTollbooth, nil},
		{"golimiter-mw", "go-limiter httplimit.Middleware over memorystore (token bucket), IPKeyFunc(); one-client allowed row at 200 per 40 µs (its refill cannot hold the shared profile)", "github.com/sethvargo/go-limiter", newGoLimiterMiddleware, &goLimiterHotAllowed},
		{"ulule-mw", "ulule/limiter stdlib.Middleware over the memory store (fixed window), default key getter (RemoteAddr)", "github.com/ulule/limiter/v3", newUluleMiddleware, nil},
	}
}

// goLimiterHotAllowed is go-limiter's one-client allowed profile, 200 per
// 40 µs (5M/s, far above any run's rate). keyset.HotAllowed (65535 per
// 100 µs) does not fit its memorystore, which adds Window/Limit tokens
// per elapsed Window (its fill rate is in tokens per tick): that refills
// a whole bucket only while Window/Limit >= Limit; at 65535 per 100 µs
// it added 1 token per 100 µs and refused nearly every request. The
// engine cannot take this profile in turn: its clock is read coarsely,
// and 200 per tick is fewer than a run issues.
var goLimiterHotAllowed = keyset.Profile{Limit: 200, Window: 40 * time.Microsecond}

func newHTTPLimit(algo engine.Algorithm) func(keyset.Profile) (Middleware, error) {
	return func(p keyset.Profile) (Middleware, error) {
		m, err := httplimit.New(httplimit.Options{Default: &httplimit.Rule{Name: "default", Engine: p.EngineConfig(algo)}})
		if err != nil {
			return Middleware{}, fmt.Errorf("httplimit: %w", err)
		}
		return Middleware{Wrap: m.Handler, Close: func() { _ = m.Close() }}, nil
	}
}

// remoteIP is the key every peer that takes a key function gets: the
// socket peer's IP, as httprate's deprecated KeyByIP computed it.
func remoteIP(r *http.Request) (string, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(ip), nil
}

func newHTTPRateMiddleware(p keyset.Profile) (Middleware, error) {
	return Middleware{Wrap: httprate.LimitBy(p.Limit, p.Window, remoteIP), Close: func() {}}, nil
}

func newTollbooth(p keyset.Profile) (Middleware, error) {
	lmt := tollbooth.NewLimiter(perSecond(p), nil)
	lmt.SetBurst(p.Limit)
	lmt.SetIPLookups([]string{"RemoteAddr"})
	lmt.SetIgnoreURL(true)
	return Middleware{Wrap: func(h http.Handler) http.Handler { return tollbooth.LimitHandler(lmt, h) }, Close: func() {}}, nil
}

func newGoLimiterMiddleware(p keyset.Profile) (Middleware, error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.Limit), Interval: p.Window})
	if err != nil {
		return Middleware{}, fmt.Errorf("go-limiter memorystore: %w", err)
	}
	m, err := golimiterhttp.NewMiddleware(s, golimiterhttp.IPKeyFunc())
	if err != nil {
		return Middleware{}, fmt.Errorf("go-limiter httplimit: %w", err)
	}
	return Middleware{Wrap: m.Handle, Close: func() { _ = s.Close(context.Background()) }}, nil
}

func newUluleMiddleware(p keyset.Profile) (Middleware, error) {
	l := ulule.New(ululemem.NewStore(), ulule.Rate{Period: p.Window, Limit: int64(p.Limit)})
	return Middleware{Wrap: ululestdlib.NewMiddleware(l).Handler, Close: func() {}}, nil
}
