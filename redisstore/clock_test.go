package redisstore

import (
	"testing"
	"time"
)

// TestNodeClockEstimate drives one server's offset estimate with synthetic
// replies: the best (largest) lower bound of a period wins, a new period
// starts over (a clock that stepped back is forgotten), late replies of an
// old period are ignored, offsets of days are kept exactly, and an estimate
// is trusted for less than a period after the latest reply of its period.
func TestNodeClockEstimate(t *testing.T) {
	const sec = int64(1_700_000_000) * 1_000_000 // a period boundary (µs)
	c := &nodeClock{}
	if _, ok := c.offset(sec); ok {
		t.Fatal("an estimate before any reply")
	}
	c.observe(sec+500, sec+100)  // server 400 µs ahead, read at once: bound 399
	c.observe(sec+1000, sec+900) // a slower reply: bound 99
	if off, ok := c.offset(sec + 1000); !ok || off != 399 {
		t.Fatalf("offset = %d, %v; want the best bound 399", off, ok)
	}
	c.observe(sec+clockPeriod+50, sec+clockPeriod+100) // next period, the clock stepped back: bound -51
	if off, _ := c.offset(sec + clockPeriod + 100); off != -51 {
		t.Fatalf("offset in a new period = %d, want -51 (the old bound forgotten)", off)
	}
	c.observe(sec+9000, sec+200) // a late reply of the old period
	if off, _ := c.offset(sec + clockPeriod + 100); off != -51 {
		t.Fatalf("a reply of an old period changed the estimate to %d", off)
	}
	days := int64(3*24*time.Hour/time.Microsecond) + 7
	for _, skew := range []int64{days, -days, int64(40*time.Minute/time.Microsecond) + 1, -int64(40*time.Minute/time.Microsecond) - 1} {
		d := &nodeClock{}
		d.observe(sec+skew+10, sec+10)
		if off, ok := d.offset(sec + 20); !ok || off != skew-1 {
			t.Fatalf("server %d µs off: offset %d, %v; want %d", skew, off, ok, skew-1)
		}
	}
	if _, ok := c.offset(sec + 2*clockPeriod + 99); !ok {
		t.Fatal("an estimate made less than a period ago is not trusted")
	}
	if off, ok := c.offset(sec + 2*clockPeriod + 100); ok {
		t.Fatalf("an estimate a period old is trusted: %d", off)
	}
	// A later, slower reply of the same period leaves the bound and keeps
	// the estimate fresh for a period after it was read.
	c.observe(sec+clockPeriod+899_800, sec+clockPeriod+900_000)
	if off, ok := c.offset(sec + 2*clockPeriod + 899_999); !ok || off != -51 {
		t.Fatalf("after a slower reply of the period: %d, %v; want -51, fresh", off, ok)
	}
	if _, ok := c.offset(sec + 2*clockPeriod + 900_000); ok {
		t.Fatal("an estimate is trusted a period after the latest reply")
	}
}

// TestSingleServerOneClock: a single server's estimate serves every key.
func TestSingleServerOneClock(t *testing.T) {
	single := newServerClock(newClient(t, "127.0.0.1:1"))
	if single.node(t.Context(), "a", 1) != single.node(t.Context(), "b", 2) {
		t.Fatal("a single server has two clocks")
	}
	single.node(t.Context(), "a", 1).observe(1_700_000_000_000_010, 1_700_000_000_000_005)
	if off, ok := single.node(t.Context(), "b", 9).offset(1_700_000_000_000_006); !ok || off != 4 {
		t.Fatalf("single server: %d, %v; want 4 for every key", off, ok)
	}
}
