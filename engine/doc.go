// Package engine is slidelimit's public API: a per-key sliding-window rate
// limiter for API gateways, deciding without locks or allocations for
// millions of keys. A decision on a key in the CPU caches takes tens of
// nanoseconds (41-61 ns for one hot key in RESULTS.md); one whose key,
// index entry and record all miss the caches (100k keys or more, accessed
// at random) takes a few hundred, set by memory latency.
//
//	l, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 100, Window: time.Minute})
//	if err != nil { ... }
//	defer l.Close()
//	if !l.Allow(apiKey) { ... 429 ... }
//
// # Window semantics
//
// SlidingLog is exact: a request at time t is admitted iff fewer than Limit
// admitted requests have timestamps in the closed interval [t-Window, t]
// (with Limit 2 and Window 1 s, requests at 0, 999, 1000, 1001, 1002, 1999,
// 2000 ms are allowed, allowed, denied, allowed, denied, denied, allowed).
// Timestamps are kept as 32-bit ticks of Resolution (1 µs or coarser for
// very large Limit x Window), so decisions are exact at that granularity.
// Each key costs a ring of Limit ticks: 4 bytes per unit of Limit.
//
// SlidingCounter is approximate with O(1) memory per key: it counts requests
// in windows aligned to multiples of Window and admits n requests at elapsed
// time e into the current window iff prev x (Window-e)/Window + cur + n <=
// Limit. It may disagree with the exact answer on single decisions, never by
// more than that formula does; its worst case is about 2 x Limit - 1
// requests admitted in one trailing Window (Limit at the very end of one
// window, then up to Limit - 1 more early in the next, while the estimate
// still discounts the first burst). Cloudflare measured 0.003 % wrong
// decisions over 400 M requests of real traffic with this formula.
//
// AllowN admits n requests all or none. n <= 0 or n > Limit is denied and
// records nothing. Penalty mode records denied requests too, so a client
// that keeps hammering stays blocked until it backs off for a Window.
//
// # Concurrency
//
// Every method is safe for concurrent use. Decisions on existing keys take
// no lock: each key's state is one 64-bit word updated by compare-and-swap
// (SlidingCounter: package atomiccounter; SlidingLog: the ring's head word,
// package ring, which explains how no reader ever acts on a claimed but
// unwritten slot). Any number of goroutines hitting one key at a frozen
// clock admit exactly Limit, also when the key is new and they race to
// create it: creation happens under the shard's lock, so one key never has
// two states. A key's time never goes back: a request that read the clock
// before a concurrent one and loses the race counts at the later time.
//
// # Keys and their identity
//
// Any string is a key (empty, 1 MB long, invalid UTF-8). A key's identity is
// its 64-bit xxhash under a random per-Limiter seed; the key bytes are not
// stored. Two distinct keys share a state only if their hashes collide: the
// chance that any two of 10 million keys do is about 2.7 in a million
// (n^2/2^65), and nobody can aim a collision at a victim without the seed.
//
// # Memory bound and eviction
//
// Key state lives in pointer-free slabs (package shard), so the garbage
// collector scans almost nothing however many keys are tracked. The bytes
// of key state (index and slabs) stay below Config.MaxMemory (default
// 256 MiB): New converts it to a key capacity, Config().MaxKeys. Per key:
// 16 bytes of record, 4 x Limit bytes of ring (SlidingLog), and 5-10 bytes
// of index. With defaults that is about 10 M SlidingCounter keys, or 2.9 M
// SlidingLog keys at Limit 16.
//
// A key whose window holds nothing is idle. The sweep (every SweepInterval)
// reclaims idle keys, and a new key that finds its shard full reuses an idle
// one on the spot (lazy reuse). Active keys are never evicted: when the
// bound is reached and every tracked key is active, a new key is not
// tracked, and Config.Overflow decides it (OverflowAllow: as an empty key,
// i.e. allowed; OverflowDeny: denied); Stats counts these. So a flood of
// never-seen keys can neither grow memory past the bound nor reset the state
// of a key that is being limited; it can only leave further new keys
// untracked until tracked ones go idle. A key forgotten by Reset, or
// reclaimed while idle, restarts with an empty window. (Reset of a
// SlidingLog key frees its record, which counts against the bound until the
// old window would have emptied, at most one Window: see Reset.) The bound
// covers the index and the slabs; freed records are chained through their
// own hash words, so the free list costs nothing on top.
//
// The sweep also keeps time arithmetic exact: keys store 32-bit ticks
// (SlidingLog) and 24-bit window numbers (SlidingCounter). A key left
// unswept for 2^31 ticks or 2^23 windows (explicit times that jump, a
// closed Limiter) is recognised as expired and restarts empty.
//
// # Time source
//
// Time is monotonic only: Config.Clock (nanoseconds that never go back), or
// the engine's own clock, a cached monotonic reading refreshed every
// ClockRefresh (500 µs) by one shared goroutine: reading it costs an atomic
// load instead of the ~36 ns of a monotonic clock read, and it lags true
// time by at most ClockRefresh plus that goroutine's scheduling delay.
// AllowAt, AllowNAt and PeekAt take an explicit time from the same clock
// (Limiter.Now), so a gateway can read the clock once per request and tests
// need no sleeps.
package engine
