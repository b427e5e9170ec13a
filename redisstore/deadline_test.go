package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestDeadlineCtx: the context of a Background call has the exact
// deadline, reports no error until its Done closes, closes Done no earlier
// than the deadline, and shares Done with calls of the same millisecond.
func TestDeadlineCtx(t *testing.T) {
	s := &Store{}
	d := time.Now().Add(30 * time.Millisecond) // about deadlines
	ctx, cancel := s.callContext(context.Background(), d)
	defer cancel()
	if got, ok := ctx.Deadline(); !ok || !got.Equal(d) {
		t.Fatalf("Deadline() = %v, %v; want %v", got, ok, d)
	}
	if ctx.Err() != nil {
		t.Fatalf("Err() before the deadline: %v", ctx.Err())
	}
	other, _ := s.callContext(context.Background(), d.Add(100*time.Microsecond))
	if ms := d.UnixMilli(); ms == d.Add(100*time.Microsecond).UnixMilli() && other.Done() != ctx.Done() {
		t.Fatal("two deadlines in one millisecond got two channels")
	}
	<-ctx.Done()
	if now := time.Now(); now.Before(d) {
		t.Fatalf("Done closed %v before the deadline", d.Sub(now))
	}
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("Err() after Done: %v", ctx.Err())
	}
	// A cancellable parent gets a real context.WithDeadline.
	parent, stop := context.WithCancel(context.Background())
	c2, cancel2 := s.callContext(parent, time.Now().Add(time.Hour))
	defer cancel2()
	stop()
	<-c2.Done()
	if c2.Err() != context.Canceled {
		t.Fatalf("child of a cancelled parent: %v", c2.Err())
	}
}

// TestPoolWaitBoundedByTimeout: when every pooled connection is busy (the
// application's own BLPOPs on the shared client), a call waiting for one
// gives up at Timeout (go-redis's pool waits on the context's Done), not
// at the pool's PoolTimeout (4 s by default).
func TestPoolWaitBoundedByTimeout(t *testing.T) {
	srv := redistest.Start(t)
	o := testClientOptions(srv.Addr())
	o.PoolSize = 2
	o.ReadTimeout = -1 // no socket timeout: the BLPOPs below block for 3 s
	client := redis.NewClient(o)
	defer client.Close()
	const timeout = 200 * time.Millisecond // about timeouts
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Second,
		OnFailure: FailOpen, Timeout: timeout})
	s.Allow("warm")
	var busy sync.WaitGroup
	for i := range o.PoolSize {
		busy.Add(1)
		go func() {
			defer busy.Done()
			_ = client.BLPop(context.Background(), 3*time.Second, "nothing:"+string(rune('a'+i))).Err()
		}()
	}
	defer busy.Wait()
	for client.PoolStats().TotalConns < uint32(o.PoolSize) || client.PoolStats().IdleConns > 0 {
		time.Sleep(time.Millisecond) // until both BLPOPs hold their connections
	}
	w := concurrently(4, func() {
		if _, err := s.AllowNContext(context.Background(), "k", 1); err == nil {
			t.Error("a call got a connection while both were busy")
		}
	})
	if w > 3*timeout {
		t.Fatalf("slowest call %v waiting for a pooled connection, Timeout %v", w, timeout)
	}
}
