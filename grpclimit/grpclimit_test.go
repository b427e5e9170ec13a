package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
	listMethod  = "/grpc.health.v1.Health/List"
)

// manualClock is an engine clock the test moves by hand, so decisions and
// RetryAfter values do not depend on how busy the machine is.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(int64(time.Hour))
	return c
}
func (c *manualClock) Now() int64              { return c.ns.Load() }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newEngine(t testing.TB, limit int, window time.Duration, clock engine.Clock) *engine.Limiter {
	t.Helper()
	e, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: limit, Window: window, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// countingHealth is the health service, counting the calls that reached it.
type countingHealth struct {
	*health.Server
	calls atomic.Int64
}

func (h *countingHealth) Check(ctx context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	return h.Server.Check(ctx, in)
}

func (h *countingHealth) Watch(in *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	h.calls.Add(1)
	return h.Server.Watch(in, s)
}

// serve starts a real grpc-go server on 127.0.0.1:0 with the server
// options given, and returns a client connection to it.
func serve(t testing.TB, srvOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) (*countingHealth, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(srvOpts...)
	h := &countingHealth{Server: health.NewServer()}
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return h, conn
}

func newLimiter(t testing.TB, opts grpclimit.Options) *grpclimit.Limiter {
	t.Helper()
	l, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func serverOpts(l *grpclimit.Limiter) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.StreamInterceptor(l.StreamServerInterceptor()),
	}
}

// details returns the RetryInfo and QuotaFailure of a status error.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, _ := status.FromError(err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if ri == nil || qf == nil {
		t.Fatalf("status %v: RetryInfo %v, QuotaFailure %v; want both", st, ri, qf)
	}
	return ri, qf
}

func TestDeniedCallCarriesRetryInfoQuotaFailureAndMetadata(t *testing.T) {
	clock := newManualClock()
	l := newLimiter(t, grpclimit.Options{Default: &grpclimit.Rule{
		Name: "api", Limiter: newEngine(t, 2, time.Minute, clock), Limit: 2, Window: time.Minute,
	}})
	h, conn := serve(t, serverOpts(l))
	c := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	wantRL := []string{`"api";r=1`, `"api";r=0;t=60`}
	for i, want := range wantRL {
		var hdr metadata.MD
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := hdr.Get(grpclimit.MDPolicy); len(got) != 1 || got[0] != `"api";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy %q, want \"api\";q=2;w=60", i, got)
		}
		if got := hdr.Get(grpclimit.MDRateLimit); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: ratelimit %q, want %s", i, got, want)
		}
	}

	clock.Advance(1500 * time.Millisecond) // the first call leaves the window 58.5 s from now
	var hdr, trl metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	ri, qf := details(t, err)
	// The window is closed ([t-Window, t]): the first call leaves it one
	// tick (1 µs) after Window has passed, 58.500001 s from now; plus the
	// engine clock's refresh interval, rounded up to the millisecond.
	if got := ri.GetRetryDelay().AsDuration(); got != 58501*time.Millisecond {
		t.Errorf("RetryInfo.retry_delay %s, want 58.501s", got)
	}
	if v := qf.GetViolations(); len(v) != 1 || v[0].GetQuotaId() != "api" || v[0].GetQuotaValue() != 2 || v[0].GetSubject() != "rule:api" {
		t.Errorf("QuotaFailure %v, want one violation of quota api, value 2", qf)
	}
	if got := hdr.Get(grpclimit.MDRateLimit); len(got) != 1 || got[0] != `"api";r=0;t=58` {
		t.Errorf("denied call: ratelimit %q, want \"api\";r=0;t=58", got)
	}
	if got := hdr.Get(grpclimit.MDRetryAfter); len(got) != 1 || got[0] != "59" {
		t.Errorf("denied call: retry-after %q, want 59 (58.5 s rounded up)", got)
	}
	if n := h.calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2 (the refusal comes before it)", n)
	}
}

// A client that honours RetryInfo succeeds on its retry: the delay is the
// wait until the window has room again, on a real clock. retry_delay's
// margin covers the lag of the engine's default (cached) clock except
// under a saturated scheduler (a few ms more), so this test's engine reads
// the clock directly: the guarantee it checks must hold on a busy machine.
func TestClientRetryAfterRetryInfoDelaySucceeds(t *testing.T) {
	const window = 300 * time.Millisecond
	l := newLimiter(t, grpclimit.Options{Default: &grpclimit.Rule{
		Name: "api", Limiter: newEngine(t, 1, window, engine.MonotonicClock()), Limit: 1, Window: window,
	}})
	_, conn := serve(t, serverOpts(l))
	c := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	ri, _ := details(t, err)
	delay := ri.GetRetryDelay().AsDuration()
	// At most about one window (the engine's own clock readings may add
	// a tick or two beyond it): never the 1 s floor of a policy refusal.
	if delay <= 0 || delay > 2*window {
		t.Fatalf("retry_delay %s, want in (0, about %s]", delay, window)
	}
	time.Sleep(delay)
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("retry after retry_delay %s: %v, want success", delay, err)
	}
}

func TestStreamInterceptorLimitsStreamOpensNotMessages(t *testing.T) {
	clock := newManualClock()
	l := newLimiter(t, grpclimit.Options{Default: &grpclimit.Rule{
		Name: "streams", Limiter: newEngine(t, 1, time.Minute, clock), Limit: 1, Window: time.Minute,
	}})
	hs, conn := serve(t, serverOpts(l))
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s1, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	hdr, err := s1.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get(grpclimit.MDRateLimit); len(got) != 1 || got[0] != `"streams";r=0;t=60` {
		t.Errorf("first stream: ratelimit %q, want \"streams\";r=0;t=60", got)
	}
	// Messages on the open stream take nothing.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := s1.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second message on the open stream: %v %v", m, err)
	}

	s2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	details(t, err)
	if got := s2.Trailer().Get(grpclimit.MDRetryAfter); len(got) == 0 {
		if hdr, _ := s2.Header(); len(hdr.Get(grpclimit.MDRetryAfter)) == 0 {
			t.Errorf("refused stream: no retry-after metadata")
		}
	}
}

func TestRulesByMethodFirstMatchWinsAndDefaultTakesTheRest(t *testing.T) {
	clock := newManualClock()
	shared := newEngine(t, 1, time.Minute, clock) // one backend shared by both rules
	l := newLimiter(t, grpclimit.Options{
		Rules: []grpclimit.Rule{
			{Name: "check", Methods: []string{checkMethod}, Limiter: shared, Limit: 1, Window: time.Minute, Key: grpclimit.Constant("k")},
			{Name: "never", Methods: []string{"/grpc.health.v1.Health/*"}, Limiter: shared, Limit: 1, Window: time.Minute, Key: grpclimit.Constant("k")},
		},
		Default: &grpclimit.Rule{Name: "default", Limiter: shared, Limit: 1, Window: time.Minute, Key: grpclimit.Constant("k")},
	})
	interceptor := l.UnaryServerInterceptor()
	call := func(method string) error {
		_, err := interceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	// Check: the first rule; List: the service-wide second; another
	// service: the default. Each rule has its own budget although they
	// share a backend and a key.
	for _, m := range []string{checkMethod, listMethod, "/other.Service/Call"} {
		if err := call(m); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	for _, c := range []struct{ method, rule string }{{checkMethod, "check"}, {listMethod, "never"}, {"/other.Service/Call", "default"}} {
		err := call(c.method)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), `"`+c.rule+`"`) {
			t.Errorf("%s again: %v, want ResourceExhausted by rule %s", c.method, err, c.rule)
		}
	}
}

func TestMetadataKeyGivesEachAPIKeyItsOwnBudget(t *testing.T) {
	clock := newManualClock()
	l := newLimiter(t, grpclimit.Options{
		Key:     grpclimit.Metadata("X-API-Key"),
		Default: &grpclimit.Rule{Name: "api", Limiter: newEngine(t, 1, time.Minute, clock), Limit: 1, Window: time.Minute},
	})
	_, conn := serve(t, serverOpts(l))
	c := healthpb.NewHealthClient(conn)
	withKey := func(k string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", k)
	}
	if _, err := c.Check(withKey("alice"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(withKey("bob"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("bob's first call: %v (alice's budget must not be his)", err)
	}
	if _, err := c.Check(withKey("alice"), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice's second call: %v, want ResourceExhausted", err)
	}
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "x-api-key missing") {
		t.Fatalf("call without a key: %v, want InvalidArgument naming x-api-key", err)
	}
}

func TestFailOpenKeysCallsWithoutAPIKeyByPeer(t *testing.T) {
	clock := newManualClock()
	var events []grpclimit.Event
	l := newLimiter(t, grpclimit.Options{
		Key:      grpclimit.Metadata("x-api-key"),
		FailOpen: true,
		Default:  &grpclimit.Rule{Name: "api", Limiter: newEngine(t, 1, time.Minute, clock), Limit: 1, Window: time.Minute},
		Observe:  func(_ context.Context, e grpclimit.Event) { events = append(events, e) },
	})
	_, conn := serve(t, serverOpts(l))
	c := healthpb.NewHealthClient(conn)
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("first keyless call: %v, want it admitted on the peer's budget", err)
	}
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second keyless call from the same peer: %v, want ResourceExhausted", err)
	}
	// An API key equal to the peer's address text is another budget: the
	// fallback keys are namespaced apart.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "127.0.0.1")
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("API key spelled like the peer: %v, want its own budget", err)
	}
	if len(events) != 3 || events[0].Outcome != grpclimit.OutcomeAllowed || events[1].Outcome != grpclimit.OutcomeDenied {
		t.Errorf("events %+v, want allowed, denied, allowed", events)
	}
}

// peerCtx is a server call's context from a peer at addr, as grpc-go
// builds it, without a network that has IPv6 addresses to offer.
func peerCtx(addr string) context.Context {
	ap := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))
	return peer.NewContext(context.Background(), &peer.Peer{Addr: ap})
}

func TestPeerIPGroupsIPv6ByPrefix64(t *testing.T) {
	key, err := grpclimit.PeerIP(grpclimit.IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ addr, want string }{
		{"[2001:db8:1:2:aaaa::1]:5000", "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", "2001:db8:1:2::"},
		{"[2001:db8:1:3::1]:5000", "2001:db8:1:3::"},
		{"[::ffff:192.0.2.7]:80", "192.0.2.7"},
		{"192.0.2.7:80", "192.0.2.7"},
	} {
		got, err := key(peerCtx(c.addr), checkMethod)
		if err != nil || got != c.want {
			t.Errorf("peer %s: key %q, %v; want %q", c.addr, got, err, c.want)
		}
	}
	key56, err := grpclimit.PeerIP(grpclimit.IPConfig{IPv6Prefix: 56, IPv4Prefix: 24})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := key56(peerCtx("[2001:db8:1:2ff::1]:1"), ""); got != "2001:db8:1:200::" {
		t.Errorf("/56: %q, want 2001:db8:1:200::", got)
	}
	if got, _ := key56(peerCtx("192.0.2.7:1"), ""); got != "192.0.2.0" {
		t.Errorf("/24: %q, want 192.0.2.0", got)
	}
	if _, err := key(context.Background(), checkMethod); !errors.Is(err, grpclimit.ErrNoKey) {
		t.Errorf("no peer: %v, want ErrNoKey", err)
	}
	unix := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/tmp/s", Net: "unix"}})
	if _, err := key(unix, checkMethod); !errors.Is(err, grpclimit.ErrBadPeer) {
		t.Errorf("unix peer: %v, want ErrBadPeer", err)
	}
	// A typed nil *net.TCPAddr (a custom transport's) is an error, never a panic.
	nilTCP := peer.NewContext(context.Background(), &peer.Peer{Addr: (*net.TCPAddr)(nil)})
	if _, err := key(nilTCP, checkMethod); !errors.Is(err, grpclimit.ErrBadPeer) {
		t.Errorf("nil *net.TCPAddr peer: %v, want ErrBadPeer", err)
	}
	if _, err := grpclimit.PeerIP(grpclimit.IPConfig{IPv6Prefix: 129}); !errors.Is(err, grpclimit.ErrInvalidOptions) || !strings.Contains(err.Error(), "IPv6Prefix") {
		t.Errorf("IPv6Prefix 129: %v, want an error naming the field", err)
	}
}

func TestHostsOfOneIPv6Prefix64ShareABudget(t *testing.T) {
	clock := newManualClock()
	l := newLimiter(t, grpclimit.Options{Default: &grpclimit.Rule{
		Name: "api", Limiter: newEngine(t, 1, time.Minute, clock), Limit: 1, Window: time.Minute,
	}})
	interceptor := l.UnaryServerInterceptor()
	call := func(addr string) error {
		_, err := interceptor(peerCtx(addr), nil, &grpc.UnaryServerInfo{FullMethod: checkMethod}, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	if err := call("[2001:db8:0:1::a]:1000"); err != nil {
		t.Fatal(err)
	}
	if err := call("[2001:db8:0:1:dead:beef:0:1]:2000"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("another address of the same /64: %v, want ResourceExhausted", err)
	}
	if err := call("[2001:db8:0:2::a]:1000"); err != nil {
		t.Fatalf("another /64: %v, want its own budget", err)
	}
}

func TestPerMethodAndMethodKeys(t *testing.T) {
	k := grpclimit.PerMethod(grpclimit.Constant("alice"))
	if got, err := k(context.Background(), checkMethod); err != nil || got != checkMethod+" alice" {
		t.Errorf("PerMethod: %q %v", got, err)
	}
	if got, _ := grpclimit.Method(context.Background(), listMethod); got != listMethod {
		t.Errorf("Method: %q", got)
	}
	long := grpclimit.PerMethod(grpclimit.Constant(strings.Repeat("x", grpclimit.MaxKeyLen)))
	if _, err := long(context.Background(), checkMethod); !errors.Is(err, grpclimit.ErrKeyTooLong) {
		t.Errorf("PerMethod over MaxKeyLen: %v, want ErrKeyTooLong", err)
	}
	md := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", strings.Repeat("k", grpclimit.MaxKeyLen+1)))
	if _, err := grpclimit.Metadata("x-api-key")(md, checkMethod); !errors.Is(err, grpclimit.ErrKeyTooLong) {
		t.Errorf("Metadata over MaxKeyLen: %v, want ErrKeyTooLong", err)
	}
}

func TestClientInterceptorRefusesLocallyWithDetails(t *testing.T) {
	clock := newManualClock()
	l := newLimiter(t, grpclimit.Options{
		Key:     grpclimit.Method,
		Default: &grpclimit.Rule{Name: "self", Limiter: newEngine(t, 1, time.Minute, clock), Limit: 1, Window: time.Minute},
	})
	h, conn := serve(t, nil,
		grpc.WithUnaryInterceptor(l.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(l.StreamClientInterceptor()))
	c := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	ri, _ := details(t, err)
	if ri.GetRetryDelay().AsDuration() != time.Minute+time.Millisecond {
		t.Errorf("retry_delay %s, want 1m0.001s", ri.GetRetryDelay().AsDuration())
	}
	if _, err := c.Watch(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("first stream (its own method, its own budget): %v", err)
	}
	if _, err := c.Watch(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted before it is opened", err)
	}
	if n := h.calls.Load(); n > 2 {
		t.Errorf("the server saw %d calls, want at most 2 (refusals never leave the client)", n)
	}
}

// fakeBackend fails every call with err, answering d.
type fakeBackend struct {
	d   engine.Decision
	err error
	// block makes AllowNContext wait for its context to end.
	block bool
}

func (f *fakeBackend) AllowN(string, int) engine.Decision { return f.d }
func (f *fakeBackend) Peek(string) engine.Decision        { return f.d }
func (f *fakeBackend) Reset(string)                       {}
func (f *fakeBackend) AllowNContext(ctx context.Context, _ string, _ int) (engine.Decision, error) {
	if f.block {
		<-ctx.Done()
		return f.d, ctx.Err()
	}
	return f.d, f.err
}
func (f *fakeBackend) PeekContext(context.Context, string) (engine.Decision, error) {
	return f.d, f.err
}
func (f *fakeBackend) ResetContext(context.Context, string) error { return f.err }

func TestBackendFailurePolicies(t *testing.T) {
	down := errors.New("redis: connection refused")
	for _, c := range []struct {
		name    string
		policy  grpclimit.BackendPolicy
		answer  engine.Decision
		want    codes.Code
		headers bool
	}{
		{"decides/open", grpclimit.BackendDecides, engine.Decision{Allowed: true, Limit: 5, Remaining: 4}, codes.OK, true},
		{"decides/closed", grpclimit.BackendDecides, engine.Decision{Limit: 5, RetryAfter: 2 * time.Second}, codes.ResourceExhausted, true},
		{"fail-open", grpclimit.BackendFailOpen, engine.Decision{Limit: 5}, codes.OK, false},
		{"fail-closed", grpclimit.BackendFailClosed, engine.Decision{Allowed: true, Limit: 5, Remaining: 4}, codes.Unavailable, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, grpclimit.Options{
				Backend: c.policy,
				Key:     grpclimit.Constant("k"),
				Default: &grpclimit.Rule{Name: "redis", Limiter: &fakeBackend{d: c.answer, err: down}, Limit: 5, Window: time.Minute},
			})
			_, conn := serve(t, serverOpts(l))
			var hdr metadata.MD
			_, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
			if status.Code(err) != c.want {
				t.Fatalf("%v, want %s", err, c.want)
			}
			if got := len(hdr.Get(grpclimit.MDPolicy)) > 0; got != c.headers {
				t.Errorf("rate-limit metadata sent: %v, want %v", got, c.headers)
			}
		})
	}
}

func TestCallWhoseContextEndsGetsItsContextsCode(t *testing.T) {
	l := newLimiter(t, grpclimit.Options{
		Backend: grpclimit.BackendFailOpen, // even so: the caller left, nothing to pass on
		Key:     grpclimit.Constant("k"),
		Default: &grpclimit.Rule{Name: "redis", Limiter: &fakeBackend{block: true, d: engine.Decision{Allowed: true, Limit: 5}}, Limit: 5, Window: time.Minute},
	})
	interceptor := l.UnaryServerInterceptor()
	ran := false
	handler := func(context.Context, any) (any, error) { ran = true; return nil, nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := interceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod}, handler); status.Code(err) != codes.Canceled {
		t.Errorf("canceled: %v, want Canceled", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	if _, err := interceptor(dctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod}, handler); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline: %v, want DeadlineExceeded", err)
	}
	if ran {
		t.Error("the handler ran for a call whose context had ended")
	}
}

func TestGoGRPCMiddlewareAdapterLimitsAndSetsMetadata(t *testing.T) {
	clock := newManualClock()
	l := newLimiter(t, grpclimit.Options{
		Rules: []grpclimit.Rule{{Name: "check", Methods: []string{checkMethod}, Limiter: newEngine(t, 1, time.Minute, clock), Limit: 1, Window: time.Minute}},
	})
	var _ ratelimit.Limiter = l.MiddlewareLimiter()
	_, conn := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(l.MiddlewareLimiter()))})
	c := healthpb.NewHealthClient(conn)
	var hdr metadata.MD
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get(grpclimit.MDPolicy); len(got) != 1 || got[0] != `"check";q=1;w=60` {
		t.Errorf("ratelimit-policy %q through the adapter", got)
	}
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "retry in 1m0.001s") {
		t.Errorf("second call: %v, want ResourceExhausted saying when to retry", err)
	}
}

func TestNewRejectsInvalidOptionsNamingTheField(t *testing.T) {
	e := newEngine(t, 1, time.Minute, nil)
	ok := grpclimit.Rule{Name: "r", Limiter: e, Limit: 1, Window: time.Minute}
	with := func(f func(r *grpclimit.Rule)) []grpclimit.Rule { r := ok; f(&r); return []grpclimit.Rule{r} }
	for _, c := range []struct {
		opts  grpclimit.Options
		field string
	}{
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Name = "" })}, "Rules[0].Name"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Name = "a b" })}, "Rules[0].Name"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Limiter = nil })}, "Rules[0].Limiter"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Limit = 0 })}, "Rules[0].Limit"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Window = 0 })}, "Rules[0].Window"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Cost = 2 })}, "Rules[0].Cost"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Methods = []string{"Check"} })}, "Rules[0].Methods[0]"},
		{grpclimit.Options{Rules: with(func(r *grpclimit.Rule) { r.Methods = []string{"/svc/a*"} })}, "Rules[0].Methods[0]"},
		{grpclimit.Options{Rules: []grpclimit.Rule{ok, ok}}, "Rules[1].Name"},
		{grpclimit.Options{Rules: []grpclimit.Rule{ok}, Default: &ok}, "Default.Name"},
		{grpclimit.Options{Backend: 9}, "Options.Backend"},
	} {
		_, err := grpclimit.New(c.opts)
		if !errors.Is(err, grpclimit.ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want ErrInvalidOptions naming it", c.field, err)
		}
	}
}

// Many clients at once on one key: exactly Limit admitted, under -race.
func TestConcurrentCallsAdmitExactlyLimit(t *testing.T) {
	clock := newManualClock()
	const limit = 20
	l := newLimiter(t, grpclimit.Options{Default: &grpclimit.Rule{
		Name: "api", Limiter: newEngine(t, limit, time.Minute, clock), Limit: limit, Window: time.Minute,
	}})
	_, conn := serve(t, serverOpts(l))
	c := healthpb.NewHealthClient(conn)
	var ok, denied atomic.Int64
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 10 {
				_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					denied.Add(1)
				default:
					t.Error(err)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	if ok.Load() != limit || denied.Load() != 80-limit {
		t.Errorf("admitted %d, denied %d; want %d and %d", ok.Load(), denied.Load(), limit, 80-limit)
	}
}

// TestNeverAdmissibleCallInvitesNoRetry: a backend that can never admit a
// call's cost (RetryAfter engine.Never: its limit is below the cost) must
// not tell the client to retry: FailedPrecondition with the rule's
// QuotaFailure, no RetryInfo, no retry-after, no huge t. It used to send
// ResourceExhausted with a negative retry_delay and "retry-after: 1".
func TestNeverAdmissibleCallInvitesNoRetry(t *testing.T) {
	fb := &fakeBackend{d: engine.Decision{Limit: 1, RetryAfter: engine.Never}}
	l := newLimiter(t, grpclimit.Options{Key: grpclimit.Method, Default: &grpclimit.Rule{Name: "n", Limiter: fb, Limit: 1, Window: time.Minute}})
	err := l.UnaryClientInterceptor()(context.Background(), "/a.B/C", nil, nil, nil,
		func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			t.Fatal("a refused call was sent")
			return nil
		})
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("code %v (%q), want FailedPrecondition", st.Code(), st.Message())
	}
	var quota bool
	for _, d := range st.Details() {
		switch d.(type) {
		case *errdetails.RetryInfo:
			t.Errorf("RetryInfo %v on a call no wait admits", d)
		case *errdetails.QuotaFailure:
			quota = true
		}
	}
	if !quota {
		t.Errorf("no QuotaFailure in %v", st.Details())
	}
	if strings.Contains(st.Message(), "-") {
		t.Errorf("message %q carries a negative duration", st.Message())
	}
}
