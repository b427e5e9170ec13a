package redisstore

import (
	"testing"
	"time"
)

// steady is the instant at wall µs us of a process whose wall clock keeps
// pace with its monotonic clock.
func steady(us int64) instant { return instant{wall: us, mono: us * 1000} }

// TestNodeClockEstimate drives one server's offset estimate with synthetic
// replies: the best (largest) lower bound of a period wins, a new period
// starts over from a reply that meets the old interval, late replies of an
// old period are ignored, offsets of days are kept exactly, and an estimate
// is trusted for less than a period after the latest reply that fed it.
func TestNodeClockEstimate(t *testing.T) {
	const sec = int64(1_700_000_000) * 1_000_000 // a period boundary (µs)
	c := &nodeClock{}
	if _, ok := c.offset(steady(sec)); ok {
		t.Fatal("an estimate before any reply")
	}
	c.observe(sec+500, steady(sec), steady(sec+100), true)       // server ~400 µs ahead: [399, 501]
	c.observe(sec+1000, steady(sec+800), steady(sec+900), false) // [99, 201], within tolerance: a slower reply
	if off, ok := c.offset(steady(sec + 1000)); !ok || off != 399 {
		t.Fatalf("offset = %d, %v; want the seed's bound 399", off, ok)
	}
	c.observe(sec+1300, steady(sec+800), steady(sec+900), false)   // [399, 501]
	c.observe(sec+1450, steady(sec+1000), steady(sec+1050), false) // [399, 451]
	if off, ok := c.offset(steady(sec + 1100)); !ok || off != 399 {
		t.Fatalf("offset = %d, %v; want 399", off, ok)
	}
	c.observe(sec+1550, steady(sec+1100), steady(sec+1120), false) // [429, 451]: the best bound
	if off, _ := c.offset(steady(sec + 1200)); off != 429 {
		t.Fatalf("offset = %d; want the best bound 429", off)
	}
	// The next period starts over from a reply that meets the old interval.
	c.observe(sec+clockPeriod+300, steady(sec+clockPeriod-200), steady(sec+clockPeriod+100), false) // [199, 501]
	if off, _ := c.offset(steady(sec + clockPeriod + 100)); off != 199 {
		t.Fatalf("offset in a new period = %d, want 199 (the old bound forgotten)", off)
	}
	c.observe(sec+700, steady(sec+200), steady(sec+200), false) // a late reply of the old period: [499, 501]
	if off, _ := c.offset(steady(sec + clockPeriod + 100)); off != 199 {
		t.Fatalf("a reply of an old period changed the estimate to %d", off)
	}
	days := int64(3*24*time.Hour/time.Microsecond) + 7
	for _, skew := range []int64{days, -days, int64(40*time.Minute/time.Microsecond) + 1, -int64(40*time.Minute/time.Microsecond) - 1} {
		d := &nodeClock{}
		d.observe(sec+skew+10, steady(sec+5), steady(sec+10), true)
		if off, ok := d.offset(steady(sec + 20)); !ok || off != skew-1 {
			t.Fatalf("server %d µs off: offset %d, %v; want %d", skew, off, ok, skew-1)
		}
	}
	if _, ok := c.offset(steady(sec + 2*clockPeriod + 99)); !ok {
		t.Fatal("an estimate fed less than a period ago is not trusted")
	}
	if off, ok := c.offset(steady(sec + 2*clockPeriod + 100)); ok {
		t.Fatalf("an estimate a period old is trusted: %d", off)
	}
	// A later, slower reply of the same period leaves the bound and keeps
	// the estimate fresh for a period after it was read.
	c.observe(sec+clockPeriod+899_800, steady(sec+clockPeriod+899_000), steady(sec+clockPeriod+900_000), false)
	if off, ok := c.offset(steady(sec + 2*clockPeriod + 899_999)); !ok || off != 199 {
		t.Fatalf("after a slower reply of the period: %d, %v; want 199, fresh", off, ok)
	}
	if _, ok := c.offset(steady(sec + 2*clockPeriod + 900_000)); ok {
		t.Fatal("an estimate is trusted a period after the latest reply")
	}
}

// TestNodeClockReplyThatChangesNothingDoesNotAllocate: every call's reply
// feeds the estimate, and most bring no better bound; such a reply (and
// one of an old period read late) must cost the decision no allocation.
func TestNodeClockReplyThatChangesNothingDoesNotAllocate(t *testing.T) {
	const sec = int64(1_700_000_000) * 1_000_000
	c := &nodeClock{}
	c.observe(sec+1550, steady(sec+1100), steady(sec+1120), true) // [429, 451]
	allocs := testing.AllocsPerRun(100, func() {
		c.observe(sec+1600, steady(sec+1000), steady(sec+1200), false) // [399, 601]: no better
	})
	if allocs != 0 {
		t.Fatalf("a reply that leaves the estimate allocated %v times", allocs)
	}
	if off, ok := c.offset(steady(sec + 1300)); !ok || off != 429 {
		t.Fatalf("offset = %d, %v; want 429 (unchanged)", off, ok)
	}
}

// TestNodeClockIgnoresAnotherServersReplies: a reply whose interval does
// not meet the estimate (another server answered it: a cluster's ASK
// redirection, a Ring that moved the tag; or the server's clock stepped)
// does not feed the estimate but drops it, and does not seed one; a clock
// read (a seed) learns it again.
func TestNodeClockIgnoresAnotherServersReplies(t *testing.T) {
	const sec = int64(1_700_000_000) * 1_000_000
	hour := int64(time.Hour / time.Microsecond)
	c := &nodeClock{}
	c.observe(sec+500, steady(sec), steady(sec+100), true) // [399, 501]
	for i := int64(1); i <= 5; i++ {                       // a server an hour ahead answers, again and again
		c.observe(sec+hour+i*100_000, steady(sec+i*100_000-50), steady(sec+i*100_000), false)
	}
	if off, ok := c.offset(steady(sec + 600_000)); ok {
		t.Fatalf("after another server's replies: %d trusted; want a clock read first", off)
	}
	c.observe(sec+hour+600_000, steady(sec+599_950), steady(sec+600_000), false)
	if off, ok := c.offset(steady(sec + 600_100)); ok {
		t.Fatalf("another server's reply seeded the estimate: %d", off)
	}
	c.observe(sec+hour+clockPeriod+300, steady(sec+clockPeriod+100), steady(sec+clockPeriod+200), true)
	if off, ok := c.offset(steady(sec + clockPeriod + 300)); !ok || off != hour+99 {
		t.Fatalf("after a clock read: %d, %v; want %d", off, ok, hour+99)
	}
}

// TestNodeClockLocalClockStepInvalidates: a step of this process's wall
// clock (either way), seen as the wall clock leaving the monotonic one's
// pace, makes the estimate stale at once, and replies across the step do
// not feed or refresh it; a clock read re-learns it.
func TestNodeClockLocalClockStepInvalidates(t *testing.T) {
	const sec = int64(1_700_000_000) * 1_000_000
	hour := int64(time.Hour / time.Microsecond)
	for _, step := range []int64{-hour, -120_000, 120_000, hour} {
		c := &nodeClock{}
		c.observe(sec+100, steady(sec), steady(sec+100), true) // server == client: [-1, 101]
		// 10 ms later (monotonic) the wall clock has moved by step too.
		after := func(us int64) instant { return instant{wall: sec + us + step, mono: (sec + us) * 1000} }
		if off, ok := c.offset(after(10_000)); ok {
			t.Fatalf("step %d µs: estimate %d trusted after the local wall clock stepped", step, off)
		}
		// A reply after the step: the server is unchanged, so the true
		// offset is now -step.
		c.observe(sec+10_100, after(10_000), after(10_100), false)
		if off, ok := c.offset(after(10_200)); ok {
			t.Fatalf("step %d µs: a reply after the step made the old estimate fresh: %d", step, off)
		}
		c.observe(sec+20_100, after(20_000), after(20_100), true)
		if off, ok := c.offset(after(20_200)); !ok || off != -step-1 {
			t.Fatalf("step %d µs: after a clock read: %d, %v; want %d", step, off, ok, -step-1)
		}
	}
}

// TestSingleServerOneClock: a single server's estimate serves every key.
func TestSingleServerOneClock(t *testing.T) {
	single := newServerClock(newClient(t, "127.0.0.1:1"))
	if single.node(t.Context(), "a", 1) != single.node(t.Context(), "b", 2) {
		t.Fatal("a single server has two clocks")
	}
	single.node(t.Context(), "a", 1).observe(1_700_000_000_000_010, steady(1_700_000_000_000_001), steady(1_700_000_000_000_005), true)
	if off, ok := single.node(t.Context(), "b", 9).offset(steady(1_700_000_000_000_006)); !ok || off != 4 {
		t.Fatalf("single server: %d, %v; want 4 for every key", off, ok)
	}
}
