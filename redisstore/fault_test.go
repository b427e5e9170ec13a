package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// recoveryGuard bounds the wait for the breaker to close after a restart. It
// guards against a hang; nothing asserts how fast recovery is.
const recoveryGuard = 20 * time.Second

// TestServerKilled kills redis-server mid-run under each fail policy and
// checks the policy's decisions, the breaker, the fault counters and the
// recovery once the server is back.
func TestServerKilled(t *testing.T) {
	quietClientLog(t)
	for _, pol := range []FailPolicy{FailOpen, FailClosed, FailLocal} {
		t.Run(pol.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			defer client.Close()
			const limit, nodes = 4, 2
			s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: limit, Window: time.Hour,
				OnFailure: pol, Nodes: nodes, Timeout: time.Second, BreakerThreshold: 3, BreakerCooldown: 20 * time.Millisecond})
			ctx := context.Background()
			for range limit {
				if d, err := s.AllowNContext(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("healthy: %+v, %v", d, err)
				}
			}
			if d, err := s.AllowNContext(ctx, "k", 1); err != nil || d.Allowed {
				t.Fatalf("healthy, over the limit: %+v, %v; want denied", d, err)
			}

			srv.Kill()
			// limit/nodes+1 calls: FailLocal's share is limit/nodes = 2.
			var got []bool
			for i := range limit/nodes + 1 {
				d, err := s.AllowNContext(ctx, "k", 1)
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("down, call %d: err = %v, want ErrUnavailable", i, err)
				}
				got = append(got, d.Allowed)
			}
			want := map[FailPolicy][]bool{
				FailOpen:   {true, true, true},
				FailClosed: {false, false, false},
				FailLocal:  {true, true, false}, // the per-node share, 4/2
			}[pol]
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("down: decisions %v, want %v", got, want)
				}
			}
			// The third failure opened the breaker: calls are no longer sent.
			if _, err := s.AllowNContext(ctx, "k", 1); !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("after %d failures: err = %v, want ErrCircuitOpen", limit/nodes+1, err)
			}
			_ = s.Peek("k")
			s.Reset("other") // faults in Reset are counted, never raised
			st := s.Stats()
			if st.BreakerOpens == 0 || !st.BreakerOpen || st.ShortCircuits < 2 || st.Errors+st.Timeouts < 3 {
				t.Fatalf("stats while down: %+v", st)
			}
			switch pol {
			case FailOpen:
				if st.FailOpen == 0 {
					t.Fatalf("FailOpen not counted: %+v", st)
				}
			case FailClosed:
				if st.FailClosed == 0 {
					t.Fatalf("FailClosed not counted: %+v", st)
				}
			case FailLocal:
				if st.FailLocal == 0 {
					t.Fatalf("FailLocal not counted: %+v", st)
				}
			}

			srv.Restart() // a fresh, empty server on the same port
			deadline := time.Now().Add(recoveryGuard)
			for {
				d, err := s.AllowNContext(ctx, "fresh", 1)
				if err == nil {
					if !d.Allowed || d.Remaining != limit-1 {
						t.Fatalf("after recovery: %+v, want allowed with Remaining %d", d, limit-1)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no recovery within %v: %v (%+v)", recoveryGuard, err, s.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if st := s.Stats(); st.BreakerOpen {
				t.Fatalf("breaker still open after a successful call: %+v", st)
			}
		})
	}
}

// TestSlowServerTimesOut pauses the server (CLIENT PAUSE) so a call runs past
// Config.Timeout; the timeout is counted and the policy decides.
func TestSlowServerTimesOut(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	admin := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 10, Window: time.Second,
		OnFailure: FailClosed, Timeout: 20 * time.Millisecond})
	if d := s.AllowN("k", 1); !d.Allowed {
		t.Fatalf("healthy: %+v", d)
	}
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	defer admin.Do(context.Background(), "CLIENT", "UNPAUSE")
	d, err := s.AllowNContext(context.Background(), "k", 1)
	if d.Allowed || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused server: %+v, %v; want FailClosed's denial and a deadline error", d, err)
	}
	if st := s.Stats(); st.Timeouts != 1 || st.FailClosed != 1 {
		t.Fatalf("stats: %+v, want 1 timeout decided by FailClosed", st)
	}
}

// TestErrorReplyDoesNotTrip: a per-key error reply (WRONGTYPE) is counted
// but does not open the breaker for every other key.
func TestErrorReplyDoesNotTrip(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Second,
		OnFailure: FailOpen, BreakerThreshold: 1})
	if err := client.Set(context.Background(), s.keys("bad")[0], "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.AllowNContext(context.Background(), "bad", 1); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("WRONGTYPE key: err = %v", err)
		}
	}
	if d, err := s.AllowNContext(context.Background(), "good", 1); err != nil || !d.Allowed {
		t.Fatalf("other key after error replies: %+v, %v", d, err)
	}
	if st := s.Stats(); st.Errors != 3 || st.BreakerOpens != 0 {
		t.Fatalf("stats: %+v, want 3 errors and a closed breaker", st)
	}
}

// quietClientLog drops go-redis's internal log lines ("failed to dial ..."),
// which the fault tests provoke on purpose. The logger is process-wide; no
// test here depends on it.
// voidLogger drops go-redis's internal log lines (reconnect noise while a
// server is stopped on purpose).
type voidLogger struct{}

func (voidLogger) Printf(context.Context, string, ...interface{}) {}

func quietClientLog(*testing.T) { redis.SetLogger(voidLogger{}) }
