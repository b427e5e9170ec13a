// Package keyset builds the key sets, access sequences and limit profiles
// shared by the engine benchmarks (package bench) and the peer comparison
// (module bench/peers), so that every implementation is measured on exactly
// the same keys in exactly the same order.
//
// Guarantees:
//   - Keys(n) returns n distinct keys "k0" ... "k<n-1>", built once per n
//     and shared (callers must not modify the slice). All key bytes live in
//     one string, so a key set of 10 M keys is two allocations, not 10 M:
//     the heap the key set adds is measured separately from the limiter's.
//   - Sequence returns a precomputed, deterministic (fixed seed) slice of
//     key indexes whose length is a power of two, so the timed loop reads
//     seq[i&mask] and measures the limiter, not the random number generator.
//   - Zipf sequences use math/rand/v2's NewZipf with s = ZipfS and v = 1:
//     index 0 is the hottest key.
//
// Sets and sequences are cached for the life of the process; Drop releases
// them. All functions are safe for concurrent use.
package keyset
