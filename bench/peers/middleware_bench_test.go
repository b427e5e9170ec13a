package peers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/bench/keyset"
	"github.com/slidelimit/slidelimit/bench/measure"
)

// sinkWriter is the ResponseWriter every middleware writes into: it keeps
// the status and discards the body, and its header map is cleared, not
// replaced, between requests, so that neither a recorder's allocations
// nor its header snapshot is charged to the middleware under test. What
// a middleware allocates for its own header values still counts.
type sinkWriter struct {
	h    http.Header
	code int
}

func newSinkWriter() *sinkWriter { return &sinkWriter{h: make(http.Header, 16)} }

func (w *sinkWriter) Header() http.Header { return w.h }

func (w *sinkWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *sinkWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}

func (w *sinkWriter) reset() {
	clear(w.h)
	w.code = 0
}

// okHandler is the trivial handler behind every middleware: it sets a
// Content-Type and writes a short body, as any real handler does.
var (
	okBody    = []byte("ok\n")
	okCT      = []string{"text/plain; charset=utf-8"}
	okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = okCT
		_, _ = w.Write(okBody)
	})
)

// clientRequests returns n GET requests for one path from n client IPs
// (10.x.y.z), one per key, built before the measured loop.
func clientRequests(n int) []*http.Request {
	base := httptest.NewRequest(http.MethodGet, "/api/users", nil)
	out := make([]*http.Request, n)
	for i := range out {
		r := base.Clone(context.Background())
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4711", i>>16&255, i>>8&255, i&255)
		out[i] = r
	}
	return out
}

func middlewareImpls() []MiddlewareImpl {
	var out []MiddlewareImpl
	for _, im := range MiddlewareImpls() {
		if *implFilter == "" || strings.Contains(im.Name, *implFilter) {
			out = append(out, im)
		}
	}
	return out
}

func buildMiddleware(tb testing.TB, im MiddlewareImpl, p keyset.Profile) http.Handler {
	tb.Helper()
	runtime.GC()
	m, err := im.New(p)
	if err != nil {
		tb.Fatalf("%s: %v", im.Name, err)
	}
	tb.Cleanup(m.Close)
	return m.Wrap(okHandler)
}

// BenchmarkMiddleware compares httplimit with the rate-limiting
// middlewares of httprate, tollbooth, go-limiter and ulule/limiter: the
// same handler, the same key (the client IP of RemoteAddr), the same
// rounds. Scenarios: one client under its limit (key=one/allowed: the
// engine suite's HotAllowed, or the implementation's own HotAllowed where
// that profile would refuse) or over
// it (key=one/denied: every request refused), and 10k clients in uniform
// turn under their limits (keys=10k/allowed, the Keyed profile: at most
// one request per client per window on average) or all over them
// (keys=10k/denied). Names:
// BenchmarkMiddleware/<scenario>/impl=<name>, so that benchstat and
// cmd/resultsmd group each scenario's implementations.
func BenchmarkMiddleware(b *testing.B) {
	const n = 10_000
	for _, sc := range []struct {
		name   string
		p      keyset.Profile
		keys   int
		denied bool
	}{
		{"key=one/allowed", keyset.HotAllowed, 1, false},
		{"key=one/denied", keyset.HotDenied, 1, true},
		{"keys=10k/allowed", keyset.Keyed, n, false},
		{"keys=10k/denied", keyset.HotDenied, n, true},
	} {
		b.Run(sc.name, func(b *testing.B) {
			reqs := clientRequests(sc.keys)
			seq := keyset.Sequence(sc.keys, keyset.Uniform)
			mask := len(seq) - 1
			for _, im := range middlewareImpls() {
				b.Run("impl="+im.Name, func(b *testing.B) {
					p := sc.p
					if sc.name == "key=one/allowed" && im.HotAllowed != nil {
						p = *im.HotAllowed
					}
					h := buildMiddleware(b, im, p)
					w := newSinkWriter()
					// Every client has been seen: the denied scenarios start
					// with each client at its limit, the allowed ones with
					// each client's state in place.
					pre := 1
					if sc.denied {
						pre = p.Limit
					}
					for _, r := range reqs {
						for range pre {
							w.reset()
							h.ServeHTTP(w, r)
						}
					}
					b.ReportAllocs()
					allowed, other, i := 0, 0, 0
					for b.Loop() {
						w.reset()
						h.ServeHTTP(w, reqs[seq[i&mask]])
						switch w.code {
						case http.StatusOK:
							allowed++
						case http.StatusTooManyRequests:
						default:
							other++
						}
						i++
					}
					if other > 0 {
						b.Fatalf("%d responses neither 200 nor 429", other)
					}
					if sc.denied && allowed > 0 {
						b.Fatalf("%d requests admitted past a limit of %d per hour", allowed, p.Limit)
					}
					if sc.keys == 1 && !sc.denied && allowed < i {
						b.Fatalf("%d of %d requests refused under a limit no run reaches", i-allowed, i)
					}
					measure.ReportAllowed(b, allowed)
				})
			}
		})
	}
}
