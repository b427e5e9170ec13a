// Package measure takes the heap and GC figures the benchmarks report:
// bytes of live heap per tracked key, bytes of heap the garbage collector
// must scan per key (runtime/metrics /gc/scan/heap:bytes), and how much longer
// (wall time) one forced GC cycle takes with the keys live than before.
//
// Every figure is a difference between two snapshots taken after a forced
// runtime.GC(), so that the key strings and access sequences, which exist
// before the limiter is built, are not charged to the limiter. Snapshots
// stop the world; take them outside the timed loop only.
package measure
