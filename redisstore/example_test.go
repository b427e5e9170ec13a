package redisstore_test

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/redisstore"
)

// A global limit of 100 requests per minute per API key, shared by every
// gateway node using the same Redis. The example needs a server on
// localhost:6379, so it is compiled but not run by go test (the tests start
// their own server instead).
func ExampleNew() {
	// The options redisstore requires: the per-call timeout bounds socket
	// reads and writes, and go-redis never resends a script.
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	limiter, err := redisstore.New(redisstore.Config{
		Client:    client,
		Algorithm: engine.SlidingLog,
		Limit:     100,
		Window:    time.Minute,
		OnFailure: redisstore.FailLocal, // Redis away: each of 4 nodes admits 25
		Nodes:     4,
	})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	var rl engine.RateLimiter = limiter // middleware takes either backend
	if d := rl.AllowN("api-key-42", 1); !d.Allowed {
		fmt.Println("429, retry after", d.RetryAfter)
	}
}

// The hybrid mode: decisions in memory, the global limit reconciled every
// 5 ms. Compiled, not run (needs a server).
func ExampleNewHybrid() {
	// The options redisstore requires: the per-call timeout bounds socket
	// reads and writes, and go-redis never resends a script.
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	h, err := redisstore.NewHybrid(redisstore.HybridConfig{
		Config: redisstore.Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 10000, Window: time.Second},
	})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	fmt.Println(h.Allow("tenant-7"), "bound for 3 nodes:", h.Bound(3))
}

// GCRA on Redis, the token bucket of redis_rate: 10 requests per second
// per key with a burst of 20 (a quiet key may send 20 at once, then one
// every 100 ms). Compiled, not run (needs a server).
func ExampleNew_gcra() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	limiter, err := redisstore.New(redisstore.Config{
		Client:    client,
		Algorithm: engine.GCRA,
		Limit:     10,
		Window:    time.Second,
		Burst:     20,
	})
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	if d := limiter.AllowN("api-key-42", 1); !d.Allowed {
		fmt.Println("429, retry after", d.RetryAfter) // exact to the ns
	}
}
