package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkHotKeyContention is every goroutine deciding for one key, the
// case where a lock-free state word can collapse (each admission moves the
// key's lines between cores). Run it at several core counts, and compare
// the rows: go test -run=^$ -bench=HotKeyContention -cpu=1,2,4,8 ./engine
// (see "Contention" in package ring for the model the rows check).
//
// admit: every decision admits (Limit 65535 per 100 µs). The clock is
// the engine's kind, a cached reading (see ClockRefresh), but refreshed by
// the deciding goroutines themselves every 1024 decisions (a store to one
// shared line per 1024 decisions): the engine's own refresher is a timer,
// and with every P busy deciding (no goroutine blocks, as a server's do on
// I/O) it can wait for preemption, 10 ms and more; the key then runs out
// of its limit at one frozen time and the row measures denials, as package
// bench's hotkey rows partly do (their allowed/op says how much). deny:
// every decision after the first ten is a denial (reads only). allowed/op
// says which path ran.
func BenchmarkHotKeyContention(b *testing.B) {
	for _, a := range algorithms {
		for _, mode := range []struct {
			name  string
			limit int
			win   time.Duration
		}{
			{"admit", 65535, 100 * time.Microsecond},
			{"deny", 10, time.Hour},
		} {
			b.Run(a.String()+"/"+mode.name, func(b *testing.B) {
				clk := &refreshedClock{base: time.Now()}
				clk.refresh()
				cfg := Config{Algorithm: a, Limit: mode.limit, Window: mode.win, Clock: clk}
				if a == GCRA && mode.name == "admit" {
					// GCRA's fastest rate is one request per 200 ns: a
					// bucket it never empties in a run keeps it admitting.
					cfg.Limit, cfg.Burst = 500, MaxGCRALimit
				}
				l, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				var allowed atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					n, i := int64(0), 0
					for pb.Next() {
						if l.Allow("hot") {
							n++
						}
						if i++; i&1023 == 0 {
							clk.refresh()
						}
					}
					allowed.Add(n)
				})
				b.StopTimer()
				b.ReportMetric(float64(allowed.Load())/float64(max(b.N, 1)), "allowed/op")
			})
		}
	}
}

// refreshedClock is a cached monotonic reading that its users refresh.
type refreshedClock struct {
	now  atomic.Int64
	base time.Time
}

func (c *refreshedClock) Now() int64 { return c.now.Load() }

// refresh raises the reading to the time now (two goroutines may read the
// time in one order and store in the other: the reading never goes back).
func (c *refreshedClock) refresh() {
	n := int64(time.Since(c.base))
	for {
		o := c.now.Load()
		if n <= o || c.now.CompareAndSwap(o, n) {
			return
		}
	}
}
