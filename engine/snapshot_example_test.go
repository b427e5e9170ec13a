package engine_test

import (
	"bytes"
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// A client that took 4 of its 5 requests a minute before a restart gets 1
// more after it, not 5. A real server writes the snapshot to a file of mode
// 0600 (it holds the key hash's secret) after it stopped taking requests,
// and restores it at start, before it serves.
func ExampleLimiter_WriteTo() {
	cfg := engine.Config{Limit: 5, Window: time.Minute}
	before, _ := engine.New(cfg)
	for range 4 {
		before.Allow("client")
	}
	var snap bytes.Buffer
	if _, err := before.WriteTo(&snap); err != nil {
		fmt.Println(err)
	}
	before.Close()

	after, _ := engine.New(cfg) // the restarted process: same Config
	defer after.Close()
	if _, err := after.ReadFrom(&snap); err != nil {
		fmt.Println("starting empty:", err)
	}
	fmt.Println(after.Allow("client"), after.Allow("client"))
	// Output: true false
}
