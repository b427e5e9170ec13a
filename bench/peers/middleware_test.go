package peers

import (
	"net/http"
	"testing"

	"github.com/slidelimit/slidelimit/bench/keyset"
)

// Every middleware must limit by the client IP of RemoteAddr and enforce
// the profile it is given, or BenchmarkMiddleware compares nothing: one
// client gets Limit requests through and then 429s, while another client
// (another IP, same port) and the same IP on another port are judged as
// what they are: a fresh client, and the same client.
func TestEveryMiddlewareLimitsPerClientIP(t *testing.T) {
	p := keyset.HotDenied
	reqs := clientRequests(2)
	samePeerOtherPort := reqs[0].Clone(reqs[0].Context())
	samePeerOtherPort.RemoteAddr = "10.0.0.0:9999"
	for _, im := range MiddlewareImpls() {
		t.Run(im.Name, func(t *testing.T) {
			h := buildMiddleware(t, im, p)
			w := newSinkWriter()
			status := func(r *http.Request) int {
				w.reset()
				h.ServeHTTP(w, r)
				return w.code
			}
			allowed := 0
			for range 2 * p.Limit {
				switch c := status(reqs[0]); c {
				case http.StatusOK:
					allowed++
				case http.StatusTooManyRequests:
				default:
					t.Fatalf("status %d, want 200 or 429", c)
				}
			}
			if allowed != p.Limit {
				t.Fatalf("allowed %d of %d requests from one client, want exactly Limit=%d", allowed, 2*p.Limit, p.Limit)
			}
			if c := status(samePeerOtherPort); c != http.StatusTooManyRequests {
				t.Errorf("same client IP from another port: status %d, want 429 (the key must be the IP, not the address)", c)
			}
			if c := status(reqs[1]); c != http.StatusOK {
				t.Errorf("another client IP: status %d, want 200", c)
			}
		})
	}
}
