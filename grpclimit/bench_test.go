package grpclimit_test

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/grpclimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// The interceptor's overhead per call against go-grpc-middleware's
// ratelimit interceptor with golang.org/x/time/rate behind it, in the same
// rounds: each benchmark has one sub-benchmark per implementation, so
// benchstat groups them (go test -bench Interceptor -count N).
//
// What each does per call: ours keys the call by its peer's IP (a /64 for
// IPv6; here IPv4), decides on the engine (SlidingCounter) and sets the
// RateLimit metadata; the peer keeps no keys, so it decides on one global
// token bucket and sets no metadata. The denied path builds the refusal:
// ours a status with RetryInfo and QuotaFailure and the metadata, the
// peer's a status with a formatted message. "slidelimit/const-key" keys every call
// alike, the closest to the peer's one bucket.

// xrateLimiter is the ratelimit.Limiter that go-grpc-middleware's docs
// build on x/time/rate.
type xrateLimiter struct{ l *rate.Limiter }

func (x xrateLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return errRateLimited
	}
	return nil
}

var errRateLimited = &rateError{}

type rateError struct{}

func (*rateError) Error() string { return "rate limited" }

// benchStream is the server transport stream grpc-go puts in a call's
// context, reduced to what grpc.SetHeader needs.
type benchStream struct{ md metadata.MD }

func (s *benchStream) Method() string                  { return checkMethod }
func (s *benchStream) SetHeader(md metadata.MD) error  { s.md = md; return nil }
func (s *benchStream) SendHeader(md metadata.MD) error { s.md = md; return nil }
func (s *benchStream) SetTrailer(metadata.MD) error    { return nil }

func benchCtx() context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.7:4242"))})
	return grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
}

func noop(context.Context, any) (any, error) { return nil, nil }

func BenchmarkUnaryInterceptor(b *testing.B) {
	for _, path := range []struct {
		name  string
		limit int // per benchWindow
	}{{"allowed", benchRoomy}, {"denied", 1}} {
		b.Run("path="+path.name, func(b *testing.B) {
			impls := []struct {
				name string
				ic   func(b *testing.B) grpc.UnaryServerInterceptor
			}{
				{"slidelimit/peer-ip", func(b *testing.B) grpc.UnaryServerInterceptor {
					return ours(b, path.limit, nil).UnaryServerInterceptor()
				}},
				{"slidelimit/const-key", func(b *testing.B) grpc.UnaryServerInterceptor {
					return ours(b, path.limit, grpclimit.Constant("all")).UnaryServerInterceptor()
				}},
				{"go-grpc-middleware+x-time-rate", func(b *testing.B) grpc.UnaryServerInterceptor {
					lim := rate.NewLimiter(rate.Inf, 1) // allowed: never refuses
					if path.name == "denied" {
						lim = rate.NewLimiter(rate.Every(time.Hour), 1) // one token, then refusals
					}
					return ratelimit.UnaryServerInterceptor(xrateLimiter{lim})
				}},
			}
			for _, impl := range impls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					ic := impl.ic(b)
					ctx := benchCtx()
					info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
					if path.name == "denied" {
						_, _ = ic(ctx, nil, info, noop) // take the one unit
					}
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						_, err := ic(ctx, nil, info, noop)
						if (err == nil) != (path.name == "allowed") {
							b.Fatalf("%s: %v", path.name, err)
						}
					}
				})
			}
		})
	}
}

// The allowed path must never fill its window however many calls a
// benchmark makes: benchClock moves 1 µs per reading, so a 100 ms window
// holds at most 100k calls, a tenth of benchRoomy. (A real clock would let
// a fast run fill any window SlidingCounter's Limit allows.)
const (
	benchRoomy  = 1<<20 - 1 // SlidingCounter's largest Limit
	benchWindow = 100 * time.Millisecond
)

type benchClock struct{ ns atomic.Int64 }

func (c *benchClock) Now() int64 { return c.ns.Add(int64(time.Microsecond)) }

func ours(b *testing.B, limit int, key grpclimit.KeyFunc) *grpclimit.Limiter {
	e, err := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: limit, Window: benchWindow, Clock: &benchClock{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	l, err := grpclimit.New(grpclimit.Options{Key: key, Default: &grpclimit.Rule{Name: "api", Limiter: e, Limit: limit, Window: benchWindow}})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkUnaryLoopback is one admitted Health.Check over a real
// connection on 127.0.0.1 per op, so the interceptors' cost is seen next
// to grpc-go's own; "none" has no limiter.
func BenchmarkUnaryLoopback(b *testing.B) {
	const limit = benchRoomy
	for _, impl := range []struct {
		name string
		opts func(b *testing.B) []grpc.ServerOption
	}{
		{"none", func(*testing.B) []grpc.ServerOption { return nil }},
		{"slidelimit/peer-ip", func(b *testing.B) []grpc.ServerOption {
			return []grpc.ServerOption{grpc.UnaryInterceptor(ours(b, limit, nil).UnaryServerInterceptor())}
		}},
		{"go-grpc-middleware+x-time-rate", func(*testing.B) []grpc.ServerOption {
			return []grpc.ServerOption{grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(xrateLimiter{rate.NewLimiter(rate.Inf, 1)}))}
		}},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			_, conn := serve(b, impl.opts(b))
			c := healthpb.NewHealthClient(conn)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
