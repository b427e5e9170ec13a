package engine_test

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// stepClock is a Clock the example sets by hand.
type stepClock struct{ t int64 }

func (c *stepClock) Now() int64 { return c.t }

// The exact algorithm on the design documents' conformance vector: Limit 2
// per second.
func Example() {
	clk := &stepClock{}
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 2, Window: time.Second, Clock: clk})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for _, ms := range []int64{0, 999, 1000, 1001, 1002, 1999, 2000} {
		clk.t = ms * int64(time.Millisecond)
		d := l.AllowAt("bob", l.Now())
		fmt.Printf("%4d ms: allowed=%-5v remaining=%d retry=%v\n", ms, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	//    0 ms: allowed=true  remaining=1 retry=0s
	//  999 ms: allowed=true  remaining=0 retry=0s
	// 1000 ms: allowed=false remaining=0 retry=1µs
	// 1001 ms: allowed=true  remaining=0 retry=0s
	// 1002 ms: allowed=false remaining=0 retry=997.001ms
	// 1999 ms: allowed=false remaining=0 retry=1µs
	// 2000 ms: allowed=true  remaining=0 retry=0s
}

// The approximate algorithm weights the previous window by how much of it
// the sliding window still covers.
func ExampleLimiter_AllowNAt() {
	clk := &stepClock{}
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 100, Window: time.Minute, Clock: clk})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	sec := int64(time.Second)
	fmt.Println(l.AllowNAt("tenant-7", 100, l.Now()).Allowed) // fills the first window
	clk.t = 30 * sec
	fmt.Println(l.AllowNAt("tenant-7", 1, l.Now()).Allowed) // same window: over the limit
	clk.t = 75 * sec
	d := l.AllowNAt("tenant-7", 10, l.Now()) // 25% into the next: 100*0.75 + 10 <= 100
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true
	// false
	// true 15
}

// Invalid configuration is rejected at construction, naming the field.
func ExampleNew_invalid() {
	_, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 0, Window: time.Second})
	fmt.Println(err)
	// Output: engine: Config.Limit must be > 0, got 0: invalid config
}

// Per-call limits: one Limiter, Config.Limit sized for the largest tier,
// each call deciding with the key's own quota (read from a database, say).
func ExampleLimiter_AllowNWithLimit() {
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 5, Window: time.Minute, Clock: &stepClock{}})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	quota := map[string]int{"free-user": 2, "premium-user": 5}
	for _, user := range []string{"free-user", "premium-user"} {
		admitted := 0
		for i := 0; i < 6; i++ {
			if l.AllowNWithLimit(user, 1, quota[user]).Allowed {
				admitted++
			}
		}
		fmt.Printf("%s: %d of 6 admitted\n", user, admitted)
	}
	// A quota above the ring size (Config.Limit) is refused, not capped.
	d := l.AllowNWithLimit("gold-user", 1, 10)
	fmt.Println("limit 10 on a Limit 5 SlidingLog:", d.Allowed)
	// Output:
	// free-user: 2 of 6 admitted
	// premium-user: 5 of 6 admitted
	// limit 10 on a Limit 5 SlidingLog: false
}

// A gateway that decides a batch of requests at once: AllowMany appends one
// answer per key to the caller's slice (no allocation when it has room).
func ExampleLimiter_AllowMany() {
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	answers := make([]bool, 0, 64)
	answers = l.AllowMany(answers, []string{"alice", "bob", "alice", "alice"})
	fmt.Println(answers)
	// Output: [true true true false]
}

// A gateway reads the Limiter's clock once per request (a Time, not a
// wall-clock int64) and decides every rule of the request at that time.
func ExampleLimiter_AllowAt() {
	l, err := engine.New(engine.Config{Limit: 2, Window: time.Second}) // SlidingCounter, the default
	if err != nil {
		panic(err)
	}
	defer l.Close()
	now := l.Now()
	for i := 0; i < 3; i++ {
		fmt.Println(l.AllowAt("client-1", now).Allowed)
	}
	// Output:
	// true
	// true
	// false
}

// GCRA, the token bucket: 10 per second with a burst of 3. A fresh key
// gets 3 at once, then one every 100 ms.
func Example_gcra() {
	clk := &stepClock{}
	l, err := engine.New(engine.Config{Algorithm: engine.GCRA, Limit: 10, Burst: 3, Window: time.Second, Clock: clk})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for _, ms := range []int64{0, 0, 0, 0, 50, 100, 100, 400} {
		clk.t = ms * int64(time.Millisecond)
		d := l.AllowAt("bob", l.Now())
		fmt.Printf("%3d ms: allowed=%-5v remaining=%d retry=%v\n", ms, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	//   0 ms: allowed=true  remaining=2 retry=0s
	//   0 ms: allowed=true  remaining=1 retry=0s
	//   0 ms: allowed=true  remaining=0 retry=0s
	//   0 ms: allowed=false remaining=0 retry=100ms
	//  50 ms: allowed=false remaining=0 retry=50ms
	// 100 ms: allowed=true  remaining=0 retry=0s
	// 100 ms: allowed=false remaining=0 retry=100ms
	// 400 ms: allowed=true  remaining=2 retry=0s
}

// Raising a limit while serving keeps what each key has used: a client at
// 4 of 5 gets 6 more under a limit of 10, not 10.
func ExampleLimiter_SetLimit() {
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 5, MaxLimit: 10, Window: time.Minute, Clock: &stepClock{}})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for i := 0; i < 4; i++ {
		l.Allow("alice")
	}
	if err := l.SetLimit(10); err != nil {
		panic(err)
	}
	more := 0
	for l.Allow("alice") {
		more++
	}
	fmt.Println("more after SetLimit(10):", more)
	fmt.Println(l.SetLimit(11))
	// Output:
	// more after SetLimit(10): 6
	// engine: SetLimit(11): limit must be in [1, 10] (Config.MaxLimit, fixed at New): engine: invalid limit
}
