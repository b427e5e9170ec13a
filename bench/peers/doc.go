// Package peers measures slidelimit against the keyed rate limiters Go
// users pick instead, on the same scenarios and the same key sets as the
// engine suite (package bench, key sets from bench/keyset). It is its own
// module so that the peers' dependencies never reach slidelimit's users.
//
// Each implementation is wrapped in a Limiter (Allow, and AllowN / Peek
// where the library offers them) and runs in the same benchmark invocation
// as ours, as sub-benchmarks named impl=<name>, so that a noisy machine
// slows all of them alike and the ratio survives. Every implementation
// reads the real clock on every decision, as a gateway would.
//
// The algorithms differ (token bucket, GCRA, fixed window, sliding counter,
// sliding log); Impls records which one each runs, so that nobody compares
// apples to oranges. Not every library bounds its key count: the unbounded
// ones grow without limit in the never-seen-keys benchmark.
package peers
