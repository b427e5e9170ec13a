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
