package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fixedClock keeps the example's output stable; production code leaves
// engine.Config.Clock nil.
type fixedClock struct{}

func (fixedClock) Now() int64 { return int64(time.Hour) }

// A server limiting Check to 1 call a minute per API key, and everything
// else to 100 a minute per peer IP; the client reads a refusal's details.
func Example() {
	checks, _ := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: time.Minute, Clock: fixedClock{}})
	defer checks.Close()
	others, _ := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute})
	defer others.Close()
	l, err := grpclimit.New(grpclimit.Options{
		Rules: []grpclimit.Rule{{
			Name: "check", Methods: []string{"/grpc.health.v1.Health/Check"},
			Limiter: checks, Limit: 1, Window: time.Minute,
			Key: grpclimit.Metadata("x-api-key"),
		}},
		Default: &grpclimit.Rule{Name: "default", Limiter: others, Limit: 100, Window: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.StreamInterceptor(l.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "alice")
	for range 2 {
		var md metadata.MD
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		fmt.Println(status.Code(err), md.Get("ratelimit-policy"), md.Get("ratelimit"), md.Get("retry-after"))
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in", ri.GetRetryDelay().AsDuration().Round(time.Second))
			}
		}
	}
	// Output:
	// OK ["check";q=1;w=60] ["check";r=0;t=60] []
	// ResourceExhausted ["check";q=1;w=60] ["check";r=0;t=60] [61]
	// retry in 1m0s
}

// A client that limits its own calls: 10 a second per method, refused
// locally (codes.ResourceExhausted with RetryInfo) without being sent.
func ExampleLimiter_UnaryClientInterceptor() {
	e, _ := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 10, Window: time.Second})
	defer e.Close()
	l, err := grpclimit.New(grpclimit.Options{
		Key:     grpclimit.Method,
		Default: &grpclimit.Rule{Name: "self", Limiter: e, Limit: 10, Window: time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(l.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(l.StreamClientInterceptor()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// Calls on conn past 10 a second per method fail with
	// codes.ResourceExhausted and never reach the server.
}

// Teams whose interceptor chain already uses go-grpc-middleware keep it:
// the adapter applies the rules and sets the rate-limit metadata, though
// that package's interceptor replaces the refusal's details with its own
// message (use UnaryServerInterceptor where clients read RetryInfo).
func ExampleLimiter_MiddlewareLimiter() {
	e, _ := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute})
	defer e.Close()
	l, err := grpclimit.New(grpclimit.Options{
		Default: &grpclimit.Rule{Name: "default", Limiter: e, Limit: 100, Window: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(l.MiddlewareLimiter())))
	defer srv.Stop()
}
