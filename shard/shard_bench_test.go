package shard

import (
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"

	"github.com/puzpuzpuz/xsync/v3"
)

// BenchmarkIndex compares this package's pointer-free table with
// github.com/puzpuzpuz/xsync/v3 MapOf as the key index, on lookups of
// existing keys (hash computed outside the loop, so it measures the index
// only), on bytes per key, and on the heap the GC must scan.
//
//	go test -run=^$ -bench=Index -benchtime=2s ./shard
func BenchmarkIndex(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		name := "keys=" + strconv.Itoa(n/1000) + "k"
		if n >= 1_000_000 {
			name = "keys=" + strconv.Itoa(n/1_000_000) + "M"
		}
		b.Run(name+"/impl=table", func(b *testing.B) {
			before := heapStats()
			t := New(Config{Shards: 64, MaxKeys: n * 2, Free: 0})
			hs := make([]uint64, n)
			for i := range hs {
				hs[i] = t.Hash("key-" + strconv.Itoa(i))
				s := t.Shard(hs[i])
				s.Lock()
				ref, _, _ := t.Alloc(s, 0)
				rec, _ := t.Record(s, ref)
				rec.Hash.Store(hs[i])
				rec.State.Store(1)
				t.Insert(s, hs[i], ref)
				s.Unlock()
			}
			after := heapStats()
			b.ResetTimer()
			var sum uint64
			for i := 0; i < b.N; i++ {
				_, rec, _ := t.Lookup(hs[i%n])
				sum += rec.State.Load()
			}
			report(b, before, after, hs, n) // after the loop: ResetTimer drops reported metrics
			runtime.KeepAlive(t)
		})
		b.Run(name+"/impl=xsync-mapof", func(b *testing.B) {
			before := heapStats()
			m := xsync.NewMapOf[uint64, *Record](xsync.WithPresize(n))
			t := New(Config{Shards: 1, MaxKeys: 1}) // for the seeded hash only
			hs := make([]uint64, n)
			for i := range hs {
				hs[i] = t.Hash("key-" + strconv.Itoa(i))
				r := &Record{}
				r.State.Store(1)
				m.Store(hs[i], r)
			}
			after := heapStats()
			b.ResetTimer()
			var sum uint64
			for i := 0; i < b.N; i++ {
				r, _ := m.Load(hs[i%n])
				sum += r.State.Load()
			}
			report(b, before, after, hs, n)
			runtime.KeepAlive(m)
		})
	}
}

type heap struct{ live, scan uint64 }

func heapStats() heap {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return heap{live: s[0].Value.Uint64(), scan: s[1].Value.Uint64()}
}

func report(b *testing.B, before, after heap, hs []uint64, n int) {
	b.ReportAllocs()
	hsBytes := uint64(len(hs) * 8) // the benchmark's own slice of hashes
	b.ReportMetric(float64(after.live-before.live-hsBytes)/float64(n), "bytes/key")
	b.ReportMetric(float64(after.scan), "gc-scan-bytes")
}
