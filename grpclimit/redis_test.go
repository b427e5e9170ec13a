package grpclimit_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/grpclimit"
	"github.com/slidelimit/slidelimit/redisstore"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// startRedis runs a redis-server on a free loopback port for the test, or
// skips it, saying why, when redis-server is not installed.
func startRedis(t *testing.T) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("SKIPPED: redis-server is not installed (apt-get install redis-server): the Redis-backed interceptor test did not run")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	// A guard against a server that never comes up, not a speed assertion.
	for deadline := time.Now().Add(30 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer PING within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// The interceptors take any engine.RateLimiter: here a redisstore.Store
// shared by two servers, as two gateway nodes would share it.
func TestRedisStoreBacksTheInterceptorAcrossServers(t *testing.T) {
	store, err := redisstore.New(redisstore.Config{
		Client: startRedis(t), Algorithm: engine.SlidingLog, Limit: 2, Window: time.Minute, Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var clients []healthpb.HealthClient
	for range 2 {
		l := newLimiter(t, grpclimit.Options{Default: &grpclimit.Rule{Name: "global", Limiter: store, Limit: 2, Window: time.Minute}})
		_, conn := serve(t, serverOpts(l))
		clients = append(clients, healthpb.NewHealthClient(conn))
	}
	ctx := context.Background()
	for i, c := range []healthpb.HealthClient{clients[0], clients[1]} {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err = clients[0].Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call across both servers: %v, want ResourceExhausted", err)
	}
	ri, _ := details(t, err)
	if d := ri.GetRetryDelay().AsDuration(); d <= 0 || d > time.Minute+time.Second {
		t.Errorf("retry_delay %s, want about a minute", d)
	}
}
