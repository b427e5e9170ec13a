package redisstore

import "testing"

// TestServerClock drives the offset estimate with synthetic replies: the
// best (largest) lower bound of a period wins, a new period starts over
// (a clock that stepped back is forgotten), late replies of an old period
// are ignored, a cluster's tags fall back to any server's bound, and a
// server more than 35 minutes off is not recorded.
func TestServerClock(t *testing.T) {
	const sec = int64(1_700_000_000) * 1_000_000 // a period boundary (µs)
	c := newServerClock(true)
	if _, ok := c.offset(7); ok {
		t.Fatal("an estimate before any reply")
	}
	c.observe(7, sec+500, sec+100)  // server 400 µs ahead, read at once: bound 399
	c.observe(7, sec+1000, sec+900) // a slower reply: bound 99
	if off, ok := c.offset(7); !ok || off != 399 {
		t.Fatalf("offset = %d, %v; want the best bound 399", off, ok)
	}
	if off, _ := c.offset(8); off != 399 {
		t.Fatalf("another tag with no reply: %d, want any server's 399", off)
	}
	c.observe(7, sec+clockPeriod+50, sec+clockPeriod+100) // next period, the clock stepped back: bound -51
	if off, _ := c.offset(7); off != -51 {
		t.Fatalf("offset in a new period = %d, want -51 (the old bound forgotten)", off)
	}
	c.observe(7, sec+9000, sec+200) // a late reply of the old period
	if off, _ := c.offset(7); off != -51 {
		t.Fatalf("a reply of an old period changed the estimate to %d", off)
	}
	c.observe(9, sec+clockPeriod+3_000_000_000, sec+clockPeriod) // 50 minutes ahead
	if off, _ := c.offset(9); off != -51 {
		t.Fatalf("a server 50 minutes off was recorded: %d", off)
	}
	single := newServerClock(false)
	single.observe(3, sec+10, sec+5)
	if off, ok := single.offset(12345); !ok || off != 4 {
		t.Fatalf("single server: %d, %v; want 4 for every tag", off, ok)
	}
}
