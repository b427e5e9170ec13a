package engine

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestStatsAndLenDuringReadFromAreSafe: a metrics collector registered
// before the restore (promlimit's, the gateway's overload sampler) calls
// Stats and Len from its own goroutine while ReadFrom swaps the tables.
// Under -race this reported a data race on the Limiter's algorithm; each
// reading must be of the empty tables or the restored ones, never more
// keys than the snapshot holds.
func TestStatsAndLenDuringReadFromAreSafe(t *testing.T) {
	for i := range snapConfigs(nil) {
		cx := &fakeClock{}
		x := newLimiter(t, snapConfigs(cx)[i])
		for k := range 500 {
			x.Allow(fmt.Sprintf("client-%d", k))
		}
		var buf bytes.Buffer
		if _, err := x.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		x.Close()
		y := newLimiter(t, snapConfigs(&fakeClock{})[i])
		var stop atomic.Bool
		var wg sync.WaitGroup
		var bad atomic.Int64
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if n := y.Len(); n != 0 && n != 500 {
						bad.Store(int64(n))
					}
					if s := y.Stats(); s.Keys != 0 && s.Keys != 500 {
						bad.Store(int64(s.Keys))
					}
				}
			}()
		}
		if _, err := y.ReadFrom(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatal(err)
		}
		stop.Store(true)
		wg.Wait()
		if n := bad.Load(); n != 0 {
			t.Errorf("%v: a reading during ReadFrom saw %d keys, want 0 or 500", snapConfigs(nil)[i].Algorithm, n)
		}
		if n := y.Len(); n != 500 {
			t.Errorf("%v: %d keys restored, want 500", snapConfigs(nil)[i].Algorithm, n)
		}
		y.Close()
	}
}
