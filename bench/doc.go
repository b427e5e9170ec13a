// Package bench is the engine's benchmark suite. It has no API: run it with
//
//	go test -run '^$' -bench . ./bench
//
// and compare runs with benchstat (make bench, make benchstat). Names group
// under benchstat as Benchmark<Op>/<algorithm>/<scenario>, for example
// BenchmarkAllow/counter/keys=100k/zipf:
//
//   - BenchmarkAllow: one hot key mostly allowed (hot=allowed) or over its
//     limit (hot=denied); 1k, 100k and 1M existing keys with uniform and
//     Zipf (s = 1.1) access; 10M keys only with -bench.big or
//     SLIDELIMIT_BENCH_BIG=1 (about 2 GB of memory and a minute per run);
//     1M not under -short (the CI smoke run).
//   - BenchmarkAllowParallel: RunParallel over 100k keys (distinct) and on
//     one shared key (hotkey, CAS contention). Vary cores with -cpu=1,2.
//   - BenchmarkAllowN, BenchmarkPeek: the other entry points.
//   - BenchmarkNewKeys: never-seen keys against a key bound (the insert,
//     reclaim and overflow paths).
//
// Every benchmark reports allocations and allowed/op, the fraction of
// decisions that admitted, so a reader can check that "allowed" scenarios
// allow and "denied" ones deny. The many-keys scenarios also report the
// limiter's heap bytes per key (heap-B/key), the GC-scannable bytes per key
// (gcscan-B/key, from runtime/metrics /gc/scan/heap:bytes) and how much longer
// one forced GC cycle takes with the keys live than without (gc-ns). The key sets and access
// sequences come from package keyset, shared with the peer comparison in
// the nested module bench/peers.
package bench
