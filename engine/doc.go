// Package engine is slidelimit's public API: a per-key rate limiter for
// API gateways (sliding window, exact or approximate, or GCRA), deciding
// without locks or allocations for millions of keys. A decision on a key
// in the CPU caches takes tens of nanoseconds; one whose key, index entry
// and record all miss the caches (100k keys or more, accessed at random)
// takes a few hundred, set by memory latency; the exact log on one hot key
// contended by two goroutines takes a few hundred too (the key's head word
// bounces between the cores).
// RESULTS.md at the repository's root has the measured figures, beside
// other Go limiters, all from one generated run.
//
//	l, err := engine.New(engine.Config{Limit: 100, Window: time.Minute}) // SlidingCounter, the default
//	if err != nil { ... }
//	defer l.Close()
//	if !l.Allow(apiKey) { ... 429 ... }
//
// # Choosing an algorithm
//
// Three algorithms (Config.Algorithm; Algorithms lists them, String and
// ParseAlgorithm name them "log", "counter" and "gcra"):
//
//	algorithm       decides                     bytes per key        burst          limit up to
//	SlidingLog      exact sliding window        4 x MaxLimit + ~24   Limit          65535
//	SlidingCounter  weighted two-window count   18-26                Limit          2^20 - 1
//	GCRA            token bucket (rate + burst) 18-26                Config.Burst   2^30 - 1
//
// SlidingCounter (the default) for a window limit at constant memory and
// the fastest hot key; SlidingLog where every decision must be exact;
// GCRA where a client may burst above (or must stay below) its rate: the
// algorithm of x/time/rate, redis_rate and throttled, as one 8-byte time
// per key (package gcra).
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
// GCRA keeps each key's theoretical arrival time (TAT): with rate Limit per
// Window (emission interval T = Window/Limit) and Burst b, n requests at t
// are admitted iff max(TAT, t) + n x T - t <= b x T, and then TAT becomes
// max(TAT, t) + n x T. A fresh key admits b at once, then one every T; in
// any interval of length D at most b + D/T are admitted. RetryAfter and
// ResetAfter (until the bucket is full) are exact to the nanosecond, and
// Decision.Limit is the bucket b (the most one call can be admitted). T
// is Window/MaxLimit rounded up to a nanosecond of a virtual clock that
// runs at Limit/MaxLimit of real time (see SetLimit), slowed below
// MaxLimit by 1/min(T, 2^20) so that reading it rounded down never admits
// early: the rate is never exceeded and is short of it by under 1 % (New
// rejects a MaxLimit above Window/200 ns). Per-call limits run on the real
// clock at Window/limit rounded up, so SetLimit does not change their
// counts.
//
// AllowN admits n requests all or none. n <= 0 or n > Limit (GCRA: n >
// Burst) can never be admitted: it is denied with RetryAfter Never,
// records nothing and counts in Stats.Invalid, not as a rate-limit
// denial. Penalty mode records denied requests too, so a client that
// keeps hammering stays blocked until it backs off for a Window (GCRA:
// for the bucket's time b x T plus T; a denied request pushes the TAT on
// as if admitted, to at most two buckets ahead of its time).
//
// # Limits that change while serving
//
// SetLimit (and SetBurst for GCRA) change a running Limiter's numbers
// without forgetting anything: each decision is made wholly under the old
// or the new value, and every key keeps its state. Under the new limit a
// key that had used 4 of 5 has 6 more of 10, not 10. SlidingLog's rings
// hold Config.MaxLimit entries (fixed at New, default Limit), so the exact
// log judges any limit up to MaxLimit against the same history; a key
// above a lowered limit is denied until fewer than the new limit lie in
// its window, and its RetryAfter says exactly when. SlidingCounter weighs
// its counts against the new limit. GCRA keeps every key's debt in
// requests: it runs on a virtual clock that advances at Limit/MaxLimit of
// real time (MaxLimit, default Limit, fixed at New), so a change of rate
// changes the clock's speed from that moment on and no key's TAT has to
// be rewritten. Above MaxLimit, SetLimit returns an error wrapping
// ErrInvalidLimit and the limit in force stays.
//
// # Concurrency
//
// Every method is safe for concurrent use. Decisions on existing keys take
// no lock: each key's state is one 64-bit word updated by compare-and-swap
// (SlidingCounter: package atomiccounter; SlidingLog: the ring's head word,
// package ring, which explains how no reader ever acts on a claimed but
// unwritten slot; GCRA: the key's TAT, package gcra). Any number of goroutines hitting one key at a frozen
// clock admit exactly Limit, also when the key is new and they race to
// create it: creation happens under the shard's lock, so one key never has
// two states. A key's time never goes back: a request that read the clock
// before a concurrent one and loses the race counts at the later time. (Two
// short waits: a SlidingLog request that finds its key's ring being reset
// in place by another yields until those Limit stores are done, and a
// SlidingCounter or GCRA request that finds its key being moved by a table
// rebuild waits for the shard's lock.)
//
// # Keys and their identity
//
// Any string is a key (empty, 1 MB long, invalid UTF-8). A key's identity is
// its 64-bit hash (SipHash-2-4, a keyed pseudorandom function, under a
// random 128-bit key per Limiter); the key bytes are not stored. Two
// distinct keys share a state only if their hashes collide: the chance
// that any two of 10 million keys do is about 2.7 in a million
// (n^2/2^65), and nobody can aim a collision at a victim without the hash
// key (package internal/keyhash says why a seeded xxhash, which has
// seed-independent collisions, would not do). The hash key is in every
// snapshot (see below): a snapshot file is a secret.
//
// # Snapshots: state that survives a restart
//
// WriteTo writes every key's state, the hash key, the Config's
// fingerprint and a CRC-32C; ReadFrom restores it into a new Limiter with
// the same Config (Algorithm, Window, MaxLimit, Penalty, and the Limit
// and Burst in force), in this process or another, before it serves. The
// key bound may differ (it follows the shard count, so GOMAXPROCS): a
// Limiter bounded below the snapshot's keys keeps the records it can hold
// and the rest start afresh, as keys its table could not have held.
// Guarantees:
//
//   - Exact when no decision runs during WriteTo (write at shutdown, after
//     the listener stopped): the restored Limiter decides every later
//     request as the writer would have had it kept running through the
//     wall-clock gap between the write and the restore.
//   - While serving, WriteTo misses only what each key admitted after its
//     batch (up to 64 KiB of records, read under its shard's lock) was
//     read, and keys created after that; no key is half-written.
//   - Time: keys are aged by the wall-clock gap (wall clock at the write
//     against the restore's). A wall clock that went back counts as a gap
//     of 0 (keys keep all their counts), as does a reading before
//     2001-09-09 on either side (a clock that was never set): a restore
//     never admits more than the limit would have. Restored keys are
//     dated on the restoring Limiter's clock; a caller's explicit times
//     (AllowAt) are that clock's readings (Now), as always.
//   - Refusals: ErrSnapshotConfig (naming the field), ErrSnapshotCorrupt
//     (truncated, bad checksum, garbage), ErrSnapshotVersion (a newer
//     format), ErrSnapshotNotEmpty (the Limiter already tracks keys). On
//     any error the Limiter is left as it was: usable, tracking no key.
//     Memory a restore takes is bounded by the Config, never by the file.
//   - Cost: 10 M SlidingCounter keys (160 MB) write in 0.06-0.13 s and
//     restore in 0.65-1.03 s on the shared 2-core machine (package bench,
//     BenchmarkSnapshot -bench.big), through a 64 KiB buffer, nothing
//     allocated per key (a restore allocates only the new tables).
//
// The snapshot holds the hash key: whoever reads it can craft keys that
// collide with a victim's. Write it with mode 0600.
//
// # Memory bound and eviction
//
// Key state lives in pointer-free arrays (package shard), so the garbage
// collector scans almost nothing however many keys are tracked. The bytes
// of key state stay below Config.MaxMemory (default 256 MiB): New converts
// it to a key capacity, Config().MaxKeys, such that the most the tables can
// ever hold (shard.TableBytes for SlidingLog) fits. Per key: SlidingCounter
// and GCRA 18 to 26 bytes (a 16-byte slot in a one-level table grown at 7/8 full to
// 5/8 full, and shrunk back to 5/8 by the sweep when it finds the table
// under 5/8), SlidingLog 16 bytes of record, 4 x Limit bytes of ring
// (rounded up to 8; MaxLimit where it is above Limit) and 5-10 bytes of index. With defaults that is about
// 10 M SlidingCounter keys, or 2.9 M SlidingLog keys at Limit 16.
// Stats.Bytes counts what the heap holds: the allocator's size classes
// (a one-level table under 32 KiB, a shard of under about 1,300 keys, may
// take up to 1/8 more than its slots, so a small MaxMemory may overflow
// a little before MaxKeys), the tables' alignment, headers and
// directories, and the Limiter's own parts (about 6 KiB: its stats
// stripes, structs, sweep goroutine and ticker); it stays within a few
// hundred bytes of the heap's growth, and within MaxMemory. New
// allocates only the shards and their first, smallest tables (Stats.Bytes
// counts them); key state is allocated as keys arrive, so a MaxMemory of
// math.MaxInt64 is a safe "no bound". Deciding on an existing key never
// allocates; creating one may grow its shard's table (an allocation per
// growth, geometric, so rare).
//
// A key whose window holds nothing (GCRA: whose bucket is full, TAT <= now)
// is idle. The sweep (every SweepInterval)
// reclaims idle keys, and a new key that finds the bound reached reuses an
// idle key of its shard on the spot (lazy reuse: it examines up to 64
// records of the shard from a cursor, and after a fruitless look its shard
// does not look there again before the soonest idle time it saw, or
// Window/8; a Reset makes it look at once. SlidingCounter and GCRA look
// first, on every new key, at the shard's last three Reset keys and at up
// to 8 slots of the new key's own probe path, which keeps the table's
// probes short under key churn). Lazy reuse is a sample, bounded so that
// a flood of new keys at the bound costs bounded work: a new key can
// overflow while an idle key sits elsewhere in its shard; the next sweep
// frees it. Active
// keys are never evicted: when the bound is reached and lazy reuse finds
// no idle key, a new key is not tracked, and Config.Overflow decides it
// (OverflowAllow: as an empty key, i.e. allowed; OverflowDeny: denied);
// Stats counts these. So a flood of never-seen keys can neither grow
// memory past the bound nor reset the state of a key that is being
// limited; it can only leave further new keys untracked until tracked ones
// go idle. A key forgotten by Reset, or reclaimed while idle, restarts with
// an empty window. (Reset of a SlidingLog key frees its record, which
// counts against the bound until the old window would have emptied: one
// Window after the key's newest time, rounded up to a seventh of two
// Windows; a SlidingCounter key emptied by Reset is reusable from the
// window after its newest on: see Reset. A key's newest time is at most
// one Window ahead of the clock, see Time, so either is reusable at most
// about two Windows after the Reset.) The bound covers the tables and the
// slabs; freed records, those waiting after a Reset included, are chained
// through their own hash words (or left as tombstones in the one-level
// table), so they cost nothing on top, and a new key finds a reusable one
// in constant time however many wait.
//
// The bound is on the whole table, not split over shards: a new key can
// overflow only once Config().MaxKeys keys are tracked (idle ones count
// until the sweep or lazy reuse frees them). SlidingLog is the exception:
// its bound is on records handed out, and a record freed by the sweep, by
// lazy reuse or by Reset stays with its shard (it is reused by that
// shard's new keys only; its memory is not given back). So once MaxKeys
// records have been handed out, a new key whose shard holds no free
// record overflows however low Len is: after a sweep or many Resets,
// with many shards and a small MaxKeys, Len can be far below MaxKeys (we
// measured 242 of 1,000 new keys denied with OverflowDeny at Len 0, 64
// shards, MaxKeys 100). Give such a Limiter fewer shards or a MaxKeys
// well above the keys it must track at once. With every tracked key
// active, overflow starts exactly at Len == MaxKeys.
//
// # Time
//
// Every decision has a time: the clock's reading (Allow, AllowN, Peek,
// AllowMany) or the caller's (AllowAt, AllowNAt, PeekAt,
// AllowNWithLimitAt), a Time, which must come from the Limiter's clock
// (Now; Time.Add moves it). Time is a type of its own, so that a wall-clock
// reading, an int64, does not compile there. A key's time never goes back.
//
// A caller's time is bounded to at most one Window ahead of the clock and
// a lead behind it: 2^28 ticks of Resolution for SlidingLog (4.5 min at 1
// µs), 2^20 windows for SlidingCounter and GCRA (17.5 min at a 1 ms
// Window). A time
// further ahead counts at clock+Window, one further behind at clock-lead.
// The bound is what keeps every time the engine packs (32-bit ticks, 24-bit
// window numbers) readable, it keeps one caller's bad time from touching
// anyone else's key, and it bounds what a bad time does to its own key: a
// time far in the future (a wall-clock reading, say) dates the key at most
// one Window ahead, so the key recovers at most two Windows later, and a
// Reset frees it as soon (a time read from the clock is never ahead of it).
//
// A late time (behind the key's newest recorded time: a goroutine that read
// the clock before a concurrent one and lost the race, a preempted
// goroutine, a stale AllowAt or Peek, a Clock that steps back) counts at the
// key's newest time, as if the request arrived then. It is never read as
// "the key is old", never empties or wipes the key, and never writes the
// key's state back to an older time. This holds for lateness up to 2^30
// ticks (SlidingLog) or 2^22 windows (SlidingCounter), four times the lead,
// which only a goroutine descheduled for that long between reading the
// clock and deciding can exceed. GCRA keeps no newest time, only the TAT:
// a late time counts at its own time, where the bucket is no emptier (TAT
// - t is larger), so it never admits more than an in-order arrival would,
// and the TAT never goes back either.
//
// An early time (ahead of the clock, within one Window) counts at that time:
// the key's newest time moves there, and later requests at the clock's
// time are late and count at it. It affects its own key only: every time
// the engine reclaims by (sweeps, lazy reuse) is a clock reading.
//
// A new key's first request counts at the later of its time and a clock
// reading taken when its state is created (and, for a reused record, the
// time its previous owner went empty), so that a request that read the
// clock long ago cannot recreate a key, freed as idle meanwhile, back in
// the window that made it active. A SlidingLog key whose window holds
// nothing records its next request at that request's time, like any key
// (its ring is rewritten first only if its oldest entry is 2^30 ticks old).
//
// What the sweep may reclaim: a key whose state holds nothing that counts
// at or after the sweep's time, judged key by key with a clock reading
// taken after the key's state was read, and freed by a compare-and-swap
// that fails if any request wrote the state meanwhile (package shard states
// the protocol). So a sweep slower than a Window, or one that read the
// clock long ago, never frees a key that a request made active while it
// ran, and a key whose newest time is ahead of the sweep's is never idle.
//
// The bound on wrap: times are packed as 32-bit ticks (SlidingLog) and
// 24-bit window numbers (SlidingCounter), so they wrap (GCRA's are 60-bit
// nanoseconds and never wrap: they stop 2^59 ns, about 18 years, after the
// epoch, where a drained key is denied with RetryAfter Never; nothing
// below applies to it) (2^32 ticks is 71.6
// min at 1 µs). The Limiter handles it rather than forbidding it: besides
// the timed sweep, the first decision after the clock passes 2^30 ticks
// (SlidingLog) or 2^22 windows (SlidingCounter) beyond the last sweep
// sweeps first, inline, at the clock's time (only when the timed sweep did
// not run: after Close, with a SweepInterval that long, or when the clock
// jumps). No live key is then ever older than 2^31 + Window ticks or 2^23
// + 2 windows at a decision, which the packed fields read exactly. When the
// clock has jumped more than twice that span since the last sweep, every
// key is idle and that sweep frees them all without reading their times;
// new keys wait for it. Two things are beyond the bound and not protected:
// a key dated ahead of the clock is forgotten by such a sweep, and a
// goroutine descheduled for more than 2^30 ticks in the middle of
// recording may write a stale tick into a ring that is reused meanwhile. A
// live ring spans less than 2^30 + (Limit+1) x (Window+1) ticks, because a
// request that finds nothing counting and an entry older than 2^30 ticks
// rewrites the ring before writing into it (package ring); the tick
// (Resolution) is 1 µs unless 2 x (Limit+1) x Window reaches 2^31 µs, then
// the power of ten that keeps it below.
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
