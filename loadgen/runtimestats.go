package loadgen

import (
	"math"
	"runtime/metrics"
	"time"
)

// The runtime/metrics the verdict is computed from.
const (
	mGCPauses    = "/sched/pauses/total/gc:seconds"    // histogram of GC stop-the-world pauses
	mGCStopping  = "/sched/pauses/stopping/gc:seconds" // the part of each spent stopping the world
	mSchedLat    = "/sched/latencies:seconds"          // time goroutines spent runnable before running
	mGCCPU       = "/cpu/classes/gc/total:cpu-seconds"
	mTotalCPU    = "/cpu/classes/total:cpu-seconds" // GOMAXPROCS x wall time
	mHeapLive    = "/gc/heap/live:bytes"            // live heap marked by the last GC
	mGCCycles    = "/gc/cycles/total:gc-cycles"
	mGoroutines  = "/sched/goroutines:goroutines"
	mMemTotal    = "/memory/classes/total:bytes" // all memory the runtime has mapped
	mHeapObjects = "/memory/classes/heap/objects:bytes"
)

// rtSnap is one reading of the runtime metrics.
type rtSnap struct {
	pauses      *metrics.Float64Histogram
	stopping    *metrics.Float64Histogram
	schedLat    *metrics.Float64Histogram
	gcCPU       float64
	totalCPU    float64
	heapLive    uint64
	gcCycles    uint64
	goroutines  uint64
	memTotal    uint64
	heapObjects uint64
}

func readRuntime() rtSnap {
	s := []metrics.Sample{
		{Name: mGCPauses}, {Name: mGCStopping}, {Name: mSchedLat}, {Name: mGCCPU}, {Name: mTotalCPU}, {Name: mHeapLive},
		{Name: mGCCycles}, {Name: mGoroutines}, {Name: mMemTotal}, {Name: mHeapObjects},
	}
	metrics.Read(s)
	var r rtSnap
	for _, x := range s {
		switch x.Value.Kind() {
		case metrics.KindFloat64Histogram:
			switch x.Name {
			case mGCPauses:
				r.pauses = x.Value.Float64Histogram()
			case mGCStopping:
				r.stopping = x.Value.Float64Histogram()
			case mSchedLat:
				r.schedLat = x.Value.Float64Histogram()
			}
		case metrics.KindFloat64:
			v := x.Value.Float64()
			switch x.Name {
			case mGCCPU:
				r.gcCPU = v
			case mTotalCPU:
				r.totalCPU = v
			}
		case metrics.KindUint64:
			v := x.Value.Uint64()
			switch x.Name {
			case mHeapLive:
				r.heapLive = v
			case mGCCycles:
				r.gcCycles = v
			case mGoroutines:
				r.goroutines = v
			case mMemTotal:
				r.memTotal = v
			case mHeapObjects:
				r.heapObjects = v
			}
		}
	}
	return r
}

// pauseStats summarises the durations (GC pauses, scheduling latencies)
// recorded between two readings of a cumulative runtime histogram. The runtime's histogram has exponential
// buckets; p99 and max are reported as the upper bound of the bucket they
// fall in (the conservative reading), or its lower bound for the last,
// unbounded bucket.
func pauseStats(before, after *metrics.Float64Histogram) (count uint64, p99, maxPause time.Duration) {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0, 0, 0
	}
	delta := make([]uint64, len(after.Counts))
	for i := range after.Counts {
		delta[i] = after.Counts[i] - before.Counts[i]
		count += delta[i]
	}
	if count == 0 {
		return 0, 0, 0
	}
	upper := func(i int) time.Duration {
		b := after.Buckets[i+1]
		if math.IsInf(b, 1) {
			b = after.Buckets[i]
		}
		return time.Duration(b * 1e9)
	}
	// The rank of the 99th percentile: the smallest bucket holding at least
	// 99 % of the pauses at or below it.
	rank := uint64(math.Ceil(0.99 * float64(count)))
	var cum uint64
	found := false
	for i, n := range delta {
		cum += n
		if !found && cum >= rank {
			p99 = upper(i)
			found = true
		}
		if n > 0 {
			maxPause = upper(i)
		}
	}
	return count, p99, maxPause
}
