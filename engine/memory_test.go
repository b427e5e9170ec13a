package engine

import (
	"fmt"
	"math"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// Resetting SlidingLog keys defers their records until their old windows
// would have emptied. The deferred records used to sit in a list beside the
// table, 16 bytes each and not in the bound: filling to MaxKeys and
// resetting every key took Stats.Bytes 42 % past MaxMemory at Limit 1. They
// now wait in the records themselves, and the bound holds through Resets
// and the keys that come after them.
func TestResetsKeepMemoryWithinBound(t *testing.T) {
	for _, c := range []struct{ limit, shards int }{{1, 1}, {16, 1}, {1, 64}, {16, 64}} {
		t.Run(fmt.Sprintf("limit=%d/shards=%d", c.limit, c.shards), func(t *testing.T) {
			const bound = 1 << 20
			clk := &fakeClock{}
			l := newLimiter(t, Config{Algorithm: SlidingLog, Limit: c.limit, Window: time.Second, Clock: clk,
				MaxMemory: bound, Shards: c.shards, SweepInterval: time.Hour, Overflow: OverflowDeny})
			keys := l.Config().MaxKeys
			for i := 0; i < keys; i++ {
				l.AllowAt("k"+strconv.Itoa(i), Time(clk.Now()))
			}
			for i := 0; i < keys; i++ {
				l.Reset("k" + strconv.Itoa(i))
			}
			if st := l.Stats(); st.Bytes > bound {
				t.Fatalf("after resetting %d keys: %d bytes, past MaxMemory %d (%+v)", keys, st.Bytes, bound, st)
			}
			clk.t.Add(int64(3 * time.Second)) // every deferred record is reusable
			for i := 0; i < keys; i++ {
				// With one shard every freed record is this shard's; with
				// more, a shard reuses only its own (see the package doc),
				// so a new key may overflow before Len reaches MaxKeys.
				if d := l.AllowAt("n"+strconv.Itoa(i), Time(clk.Now())); !d.Allowed && c.shards == 1 {
					t.Fatalf("new key %d of %d refused after the old ones' windows emptied: %+v", i, keys, l.Stats())
				}
			}
			if st := l.Stats(); st.Bytes > bound || c.shards == 1 && st.Keys != keys {
				t.Fatalf("after new keys: %+v, bound %d bytes", st, bound)
			}
		})
	}
}

// heapGrowth returns the bytes of live heap that f's result holds on to.
func heapGrowth(f func() any) (int64, any) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // the second settles what the first left to finalise
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), v
}

// New used to allocate each shard's chunk table for its largest possible
// share of the keys: with MaxMemory math.MaxInt64 (a natural "no bound")
// that was 4 GiB of heap at Limit 1 and 65,536 shards, with zero keys and
// Stats.Bytes saying 4 MiB, and out of memory at Limit 65535. Now nothing
// is allocated per key until keys arrive, and what New allocates is in
// Stats.Bytes.
func TestNewAllocatesOnlyWhatItCounts(t *testing.T) {
	for _, c := range []struct {
		a             Algorithm
		limit, shards int
	}{{SlidingLog, 1, 256}, {SlidingLog, MaxLogLimit, 1}, {SlidingLog, 16, 64}, {SlidingCounter, 1, 256}} {
		t.Run(fmt.Sprintf("%v/limit=%d/shards=%d", c.a, c.limit, c.shards), func(t *testing.T) {
			grew, v := heapGrowth(func() any {
				l, err := New(Config{Algorithm: c.a, Limit: c.limit, Window: time.Second, MaxMemory: math.MaxInt64, Shards: c.shards, Clock: &fakeClock{}})
				if err != nil {
					t.Fatal(err)
				}
				return l
			})
			l := v.(*Limiter)
			defer l.Close()
			st := l.Stats()
			// Stats.Bytes counts the Limiter's own parts too (see
			// TestHeapWithinStatsBytesAndMaxMemory for how closely).
			if grew > st.Bytes+4<<10 {
				t.Fatalf("New took %d bytes of heap, Stats.Bytes says %d", grew, st.Bytes)
			}
			if perShard := (st.Bytes - limiterBytes) / int64(c.shards); perShard > 2048 {
				t.Fatalf("%d bytes per shard with no keys", perShard)
			}
			for i := 0; i < 100; i++ {
				if !l.AllowAt("k"+strconv.Itoa(i), l.Now()).Allowed {
					t.Fatalf("key %d refused", i)
				}
			}
			if st2 := l.Stats(); st2.Keys != 100 || st2.Bytes < st.Bytes || c.a == SlidingLog && st2.Bytes == st.Bytes {
				t.Fatalf("after 100 keys: %+v (before: %d bytes)", st2, st.Bytes)
			}
		})
	}
}

// minMaxMemory returns the smallest MaxMemory New accepts for cfg (from
// its error, which names what it needs).
func minMaxMemory(t *testing.T, cfg Config) int64 {
	t.Helper()
	cfg.MaxMemory = 1
	_, err := New(cfg)
	m := regexp.MustCompile(`need at least (\d+)`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		t.Fatalf("New with MaxMemory 1: %v", err)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// Stats.Bytes counts what the Limiter holds on the heap, and the heap
// never passes MaxMemory. It used to leave out the allocator's size-class
// rounding and the tables' alignment slack, their headers and directory
// structs, each chunk's header and the Limiter's own fixed cost: a
// SlidingCounter with 65,536 shards at the smallest MaxMemory New accepts
// held 138 % of MaxMemory on the heap.
func TestHeapWithinStatsBytesAndMaxMemory(t *testing.T) {
	for _, a := range algorithms {
		for _, shards := range []int{1, 64, 16384, 65536} {
			for _, spare := range []int64{0, 1 << 20} {
				t.Run(fmt.Sprintf("%v/shards=%d/spare=%d", a, shards, spare), func(t *testing.T) {
					clk := &fakeClock{}
					cfg := Config{Algorithm: a, Limit: 1, Window: time.Second, Shards: shards, Clock: clk, SweepInterval: time.Hour}
					cfg.MaxMemory = minMaxMemory(t, cfg) + spare
					grew, v := heapGrowth(func() any {
						l, err := New(cfg)
						if err != nil {
							t.Fatal(err)
						}
						var key [16]byte
						for i := 0; i < 2*l.Config().MaxKeys; i++ {
							l.AllowAt(string(strconv.AppendInt(key[:0], int64(i), 10)), Time(clk.Now()))
						}
						return l
					})
					l := v.(*Limiter)
					defer l.Close()
					st := l.Stats()
					t.Logf("MaxMemory %d, Stats.Bytes %d, heap grew %d (%d keys)", cfg.MaxMemory, st.Bytes, grew, st.Keys)
					// Stats.Bytes is the bound's own measure; the heap's
					// growth carries up to about 1 KB of the test binary's
					// own traffic besides.
					if st.Bytes > cfg.MaxMemory || grew > cfg.MaxMemory+1024 {
						t.Fatalf("heap grew %d bytes, Stats.Bytes %d: past MaxMemory %d", grew, st.Bytes, cfg.MaxMemory)
					}
					if d := grew - st.Bytes; d > st.Bytes/50+1024 || -d > st.Bytes/50+1536 {
						t.Fatalf("heap grew %d bytes, Stats.Bytes says %d", grew, st.Bytes)
					}
				})
			}
		}
	}
}
