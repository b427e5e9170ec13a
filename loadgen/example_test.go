package loadgen_test

import (
	"context"
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/loadgen"
)

// A short open-loop run against one hot key: the admitted count is checked
// against what Limit per Window allows.
func ExampleRun() {
	c := loadgen.DefaultConfig()
	c.Rate = 1000
	c.Warmup, c.Duration, c.Interval = 0, 300*time.Millisecond, 100*time.Millisecond
	c.Dist = loadgen.HotKey
	c.Engine = engine.Config{Algorithm: engine.SlidingLog, Limit: 10, Window: time.Second}
	res, err := loadgen.Run(context.Background(), c)
	if err != nil {
		panic(err)
	}
	s := res.Steady
	fmt.Println("answered:", s.Sent == s.Allowed+s.Denied)
	fmt.Println("admitted:", s.Allowed)
	fmt.Println("within bound:", res.Admission.OK)
	// Output:
	// answered: true
	// admitted: 10
	// within bound: true
}
