package pprof_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/pprof"
)

// Start a debug server next to a limiter and read its statistics.
func Example() {
	l, err := engine.New(engine.Config{Algorithm: engine.SlidingCounter, Limit: 10, Window: time.Second})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	srv, err := pprof.Start(pprof.Options{Addr: "127.0.0.1:0", Limiter: l})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	l.Allow("alice")
	resp, err := http.Get("http://" + srv.Addr() + "/debug/limiter")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var v struct {
		Limiter struct {
			Keys    int    `json:"keys"`
			Allowed uint64 `json:"allowed"`
		} `json:"limiter"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		panic(err)
	}
	fmt.Printf("keys %d, allowed %d\n", v.Limiter.Keys, v.Limiter.Allowed)
	// Output: keys 1, allowed 1
}
