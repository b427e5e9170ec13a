package measure

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

const (
	heapObjects = "/memory/classes/heap/objects:bytes"
	heapScan    = "/gc/scan/heap:bytes"
)

// Snapshot is the live heap right after a forced GC cycle.
type Snapshot struct {
	Heap uint64        // bytes of live heap objects
	Scan uint64        // bytes of heap the GC had to scan (pointer-bearing part)
	GC   time.Duration // wall time of the forced GC cycle
}

// Take forces a GC cycle and reads the heap figures it left behind.
func Take() Snapshot {
	t0 := time.Now()
	runtime.GC()
	gc := time.Since(t0)
	s := []metrics.Sample{{Name: heapObjects}, {Name: heapScan}}
	metrics.Read(s)
	return Snapshot{Heap: value(s[0]), Scan: value(s[1]), GC: gc}
}

func value(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0 // metric unsupported by this runtime: report 0, never garbage
	}
	return s.Value.Uint64()
}

// PerKey is what a limiter holding n keys costs the heap and the GC.
type PerKey struct {
	Bytes     float64 // live heap bytes per key
	ScanBytes float64 // GC-scannable heap bytes per key
	ScanTotal uint64  // GC-scannable heap bytes in all
	// GCCycle is how much longer a forced GC cycle took with the keys
	// live than before they existed (the harness's own key strings are in
	// both). Wall time: noisy on a busy machine.
	GCCycle time.Duration
}

// Since reports the per-key cost of what was allocated after before and is
// still live, for n keys. Differences below zero (a collection freed more
// than the limiter added) read as zero.
func Since(before Snapshot, n int) PerKey {
	after := Take()
	heap := sub(after.Heap, before.Heap)
	scan := sub(after.Scan, before.Scan)
	if n <= 0 {
		n = 1
	}
	return PerKey{
		Bytes:     float64(heap) / float64(n),
		ScanBytes: float64(scan) / float64(n),
		ScanTotal: scan,
		GCCycle:   max(after.GC-before.GC, 0),
	}
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// The helpers below report the figures under the metric names that
// cmd/resultsmd reads, for the engine suite and the peers alike.

// ReportAllowed reports the fraction of b.N decisions that admitted, so
// that "allowed" and "denied" scenarios can be checked.
func ReportAllowed(b *testing.B, allowed int) {
	b.ReportMetric(float64(allowed)/float64(max(b.N, 1)), "allowed/op")
}

// ReportPerKey reports heap and GC-scan bytes per key and the extra GC
// cycle time measured by Since.
func ReportPerKey(b *testing.B, pk PerKey) {
	b.ReportMetric(pk.Bytes, "heap-B/key")
	b.ReportMetric(pk.ScanBytes, "gcscan-B/key")
	b.ReportMetric(float64(pk.GCCycle.Nanoseconds()), "gc-ns")
}

// RunParallel runs allow on GOMAXPROCS goroutines (g is the goroutine's
// number from 1, i its iteration) and reports allowed/op and decisions/s.
func RunParallel(b *testing.B, allow func(g, i int) bool) {
	var gids, allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(gids.Add(1))
		ok, i := 0, 0
		for pb.Next() {
			if allow(g, i) {
				ok++
			}
			i++
		}
		allowed.Add(int64(ok))
	})
	b.StopTimer()
	ReportAllowed(b, int(allowed.Load()))
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "decisions/s")
	}
}
