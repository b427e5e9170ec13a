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

// TestRestoreOfNothingKeepsAFreshHashKey: a snapshot too old to restore a
// key (a gap past the wrap guard) used to hand its hash key to the new
// Limiter anyway, so a key from one leaked file lived on in every later
// snapshot. A restore that restores nothing keeps the Limiter's own key.
func TestRestoreOfNothingKeepsAFreshHashKey(t *testing.T) {
	for i := range snapConfigs(nil) {
		x := newLimiter(t, snapConfigs(&fakeClock{})[i])
		x.Allow("client")
		x.wall = func() int64 { return 1e18 }
		var old bytes.Buffer
		if _, err := x.WriteTo(&old); err != nil {
			t.Fatal(err)
		}
		x.Close()
		y := newLimiter(t, snapConfigs(&fakeClock{})[i])
		y.wall = func() int64 { return 1e18 + 200*365*24*3600*1e9 } // 200 years on
		if _, err := y.ReadFrom(bytes.NewReader(old.Bytes())); err != nil {
			t.Fatal(err)
		}
		if n := y.Len(); n != 0 {
			t.Fatalf("%v: %d keys restored after 200 years, want 0", snapConfigs(nil)[i].Algorithm, n)
		}
		var next bytes.Buffer
		if _, err := y.WriteTo(&next); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(old.Bytes()[64:80], next.Bytes()[64:80]) {
			t.Errorf("%v: the Limiter that restored nothing writes the old snapshot's hash key", snapConfigs(nil)[i].Algorithm)
		}
		y.Close()
	}
}
