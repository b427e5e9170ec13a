package engine

import (
	"bytes"
	"testing"
	"time"
)

// A writer whose wall clock had not been set (a machine without a
// battery-backed clock, before NTP, reads a few seconds past 1970) makes
// the gap to a correct clock at the restore decades long: counted, it
// would forget every key, and a client at 4 of 5 would get 5 more. A wall
// reading before 2001-09-09 (the dates unset clocks read are 1970, 1980 and
// 2000) is no time at all: the gap counts as 0, as for a clock that went
// back.
func TestRestoreFromAWriterWhoseWallClockWasNotSetKeepsCounts(t *testing.T) {
	for i := range snapConfigs(nil) {
		cx := &fakeClock{}
		x := newLimiter(t, snapConfigs(cx)[i])
		for range 4 {
			x.Allow("client")
		}
		x.wall = func() int64 { return int64(42 * time.Second) } // 1970-01-01T00:00:42Z
		var buf bytes.Buffer
		if _, err := x.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		cy := &fakeClock{}
		y := newLimiter(t, snapConfigs(cy)[i])
		y.wall = func() int64 { return time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano() }
		if _, err := y.ReadFrom(&buf); err != nil {
			t.Fatal(err)
		}
		got := 0
		for range 10 {
			if y.Allow("client") {
				got++
			}
		}
		if got != 1 {
			t.Errorf("%v: a client at 4 of 5 admitted %d more after a restore from a writer at 1970 + 42 s, want 1", x.Config().Algorithm, got)
		}
	}
}
