package engine

import (
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Measurements behind the clock choice (see doc.go): a direct monotonic read
// against a cached one. Run: go test -run=^$ -bench=Clock ./engine
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	b.Run("direct=time.Since", func(b *testing.B) {
		b.ReportAllocs()
		var s int64
		for i := 0; i < b.N; i++ {
			s += int64(time.Since(start))
		}
		_ = s
	})
	b.Run("direct=time.Now", func(b *testing.B) {
		b.ReportAllocs()
		var s int64
		for i := 0; i < b.N; i++ {
			s += time.Now().UnixNano()
		}
		_ = s
	})
	b.Run("cached=atomic.Load", func(b *testing.B) {
		var c atomic.Int64
		c.Store(1)
		b.ReportAllocs()
		var s int64
		for i := 0; i < b.N; i++ {
			s += c.Load()
		}
		_ = s
	})
}

func BenchmarkHash(b *testing.B) {
	key := "client-123"
	b.Run("xxhash=seeded-digest", func(b *testing.B) {
		b.ReportAllocs()
		var s uint64
		for i := 0; i < b.N; i++ {
			var d xxhash.Digest
			d.ResetWithSeed(12345)
			d.WriteString(key)
			s += d.Sum64()
		}
		_ = s
	})
	b.Run("xxhash=unseeded", func(b *testing.B) {
		b.ReportAllocs()
		var s uint64
		for i := 0; i < b.N; i++ {
			s += xxhash.Sum64String(key)
		}
		_ = s
	})
}

// The engine's own hot path in isolation; the full suite is in package bench.
func BenchmarkEngineAllow(b *testing.B) {
	for _, a := range algorithms {
		b.Run(a.String()+"/keys=100k", func(b *testing.B) {
			l, err := New(Config{Algorithm: a, Limit: 16, Window: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			keys := make([]string, 100_000)
			for i := range keys {
				keys[i] = "client-" + strconv.Itoa(i)
				l.Allow(keys[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l.Allow(keys[i%len(keys)])
			}
		})
	}
}

func BenchmarkHashMaphash(b *testing.B) {
	seed := maphash.MakeSeed()
	b.ReportAllocs()
	var s uint64
	for i := 0; i < b.N; i++ {
		s += maphash.String(seed, "client-123")
	}
	_ = s
}

// BenchmarkEngineAllowParallel: distinct keys per goroutine; compare -cpu=1,2.
func BenchmarkEngineAllowParallel(b *testing.B) {
	for _, a := range algorithms {
		b.Run(a.String()+"/keys=100k", func(b *testing.B) {
			l, err := New(Config{Algorithm: a, Limit: 16, Window: time.Millisecond}) // keys recur every ~10 ms: always allowed
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			keys := make([]string, 100_000)
			for i := range keys {
				keys[i] = "client-" + strconv.Itoa(i)
				l.Allow(keys[i])
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					l.Allow(keys[i%len(keys)])
					i += 13
				}
			})
		})
	}
}

// BenchmarkStats is the cost of counting one decision in the striped stats
// alone, with -cpu 1,2 (RunParallel: the 2-core row shows whether two
// cores deciding share a stats line; the stripe depends on the goroutine,
// not the key, so one benchmark covers hot and distinct keys). Set against BenchmarkAllow's ns/op it is the stats'
// share of a decision. Run: go test -run=^$ -bench=Stats -cpu=1,2 ./engine
func BenchmarkStats(b *testing.B) {
	s := new(stats)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.count(true)
		}
	})
}

// A new key at the bound after every key of its shard was Reset (their
// records deferred until their windows empty): the insert must cost what it
// costs without the Resets, not a walk over the deferred records (it took
// 515 times as long with 7.7k of them in one shard). Run:
// go test -run=^$ -bench=NewKeyAfterResets ./engine
func BenchmarkNewKeyAfterResets(b *testing.B) {
	for _, resets := range []bool{false, true} {
		b.Run("resets="+strconv.FormatBool(resets), func(b *testing.B) {
			clk := &fakeClock{}
			l, err := New(Config{Algorithm: SlidingLog, Limit: 1, Window: time.Hour, Clock: clk, Shards: 1,
				MaxKeys: 7700, SweepInterval: time.Hour, Overflow: OverflowDeny})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for i := 0; i < 7700; i++ {
				l.AllowAt("k"+strconv.Itoa(i), 0)
			}
			if resets {
				for i := 0; i < 7700; i++ {
					l.Reset("k" + strconv.Itoa(i))
				}
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "new-" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l.AllowAt(keys[i%len(keys)], 0) // overflows: the bound is held by active or deferred records
			}
		})
	}
}
