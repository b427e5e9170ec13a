// Package redisstore keeps rate-limit state (sliding window or GCRA) in
// Redis or Valkey, so that every process sharing the server (or cluster) enforces one
// global limit per key. A Store satisfies engine.RateLimiter, so middleware
// takes it or an in-memory *engine.Limiter interchangeably.
//
// # Semantics
//
// Decisions are the engine's (same Allowed, Remaining, RetryAfter and
// ResetAfter; the differential test pins this on random traces), at the
// server clock's resolution of one microsecond. SlidingLog keeps the last
// Limit timestamps of a key in a sorted set and is exact: a request of n at
// t is admitted iff at most Limit-n recorded requests lie in [t-Window, t].
// SlidingCounter keeps the two aligned window counts in one string and admits
// iff prev*(Window-elapsed)/Window + cur + n <= Limit. GCRA keeps the key's
// theoretical arrival time (TAT) and admits n at t iff max(TAT, t) + n x T -
// t <= Burst x T, with T = Window/Limit rounded up to a ns (Config.Burst,
// default Limit), as engine.GCRA: exact to the nanosecond (RetryAfter and
// ResetAfter too), with the same Penalty (a denial pushes the TAT on, to at
// most two buckets ahead). A GCRA Reset deletes the key: it then decides as
// a key never seen, as the engine's. A request of n > Burst is denied with
// RetryAfter engine.Never and counted in Stats.Invalid, as in the engine.
//
// # Atomicity and time
//
// Each decision is one Lua script on one Redis key (EVALSHA, EVAL on
// NOSCRIPT): one round trip (two when the server's clock must be read
// first, see Deadlines), atomic on the server, so concurrent callers on
// any number of nodes admit exactly Limit (GCRA: Burst at one instant). The scripts read the server's
// TIME, never the caller's clock, so nodes with skewed clocks agree.
// Requires Redis >= 5 or Valkey (scripts replicated by their effects). Every
// key has a TTL of about the window (two for the counter; for GCRA the time
// until its bucket is full again), so idle keys vanish by themselves.
//
// # Keys
//
// A limiter key's state is the Redis key
//
//	<Prefix>{<tag>}<alg>/<Window>/<Limit>:<key>
//
// for example slidelimit:{1f3a}log/1m0s/100:api-key-42. tag is four hex
// digits of the key's FNV-1a hash (14 bits): Redis Cluster (and go-redis's Ring)
// hash only the part between the first '{' and the next '}', and neither the
// prefix (which may not contain braces) nor the tag holds one, so the slot is
// a function of the digest for every key, whatever its bytes (empty, '{',
// '}', binary): a caller cannot pick a slot, and a Hybrid's second key for a
// counter (the same name with '!' for ':', see Hybrid) lands in the same one.
// alg is "log", "ctr" or "gcra" (GCRA's also names its Burst:
// gcra/<Window>/<Limit>/<Burst>), Window is time.Duration.String: limiters whose
// state means different things (another algorithm, window or limit) never
// share it, even under one prefix; limiters with the same configuration (a
// Store and a Hybrid, or gateways in a fleet) do. A SlidingLog key is a
// sorted set of entries scored by their µs, named by the script run that
// wrote them (at most about 2 x Limit of them: entries that left the window
// are dropped about once a Window); a SlidingCounter key is a 16-byte
// string, the window number
// (big-endian float64) and the previous and current window's counts
// (big-endian uint32); a GCRA key is a 12-byte string, the TAT in whole µs
// (big-endian float64) and the ns beyond them (big-endian uint32). Keys
// longer than MaxKeyLen are refused
// (ErrKeyTooLong) before any round trip.
//
// # Deadlines
//
// Each call runs under Config.Timeout (or the caller's earlier deadline).
// (A call whose context cannot end, as AllowN's, shares its waits with
// other calls: a free pooled connection's turn, dialing, a ClusterClient's
// backoff before a resend. Those may end up to Timeout/16 before the
// deadline, never after; the socket's deadlines are exact.)
// A call that times out may still sit in the socket of a stalled server, or
// in a proxy, and run when the server wakes up: the caller was told the
// fail policy's decision, so a write then would consume quota twice (or for
// nothing). So every script is given a deadline in the server's own clock
// and refuses to write after it: Redis judges the call late and changes
// nothing. The deadline is seven eighths of the time left when the call is
// sent (after any clock read, so the read's round trip comes out of the
// whole budget), converted with a lower bound of the offset between that
// server's clock and this process's. A reply sent at s and read at r with
// server time S says the offset lies in [S-r, S-s]: the estimate is the
// intersection of the current second's replies, and its lower end is used.
// That end is low by the one-way delay of the reply that made it, so the
// server runs a call only if it does so at least that delay plus an eighth
// of the time left before the client gives up: the eighth is the margin for
// a reply slower on the way back. A call refused as late whose refusal
// still came back before the deadline is counted in Stats.Late but not held
// against the server (the breaker counts only stalls). With a 50 ms Timeout
// and 10 ms each way, a call that first reads the clock reaches the server
// 6 ms before the last moment it would be run.
//
// The offset is kept per server: one for a single server (or a Sentinel
// failover client), one per master of a cluster (found from the key's slot
// in go-redis's slot map, its clock read from its own node client), one per
// hash tag of a Ring (whose shard for a key go-redis does not expose, so a
// Ring reads the clock again for each hash tag unused for a second). Only a
// clock read, sent to that server, makes an estimate; a reply feeds it only
// if its interval meets the estimate's (within 1 ms, a second's drift). A
// reply that does not (another server answered: a cluster's ASK redirection
// while a slot migrates, a Ring that moved the tag to another shard; or a
// clock stepped) drops the estimate, so the next call reads the clock
// first: a server never lends its offset to another. Any offset is learned,
// however large (hours, days). An estimate is used for less than a second
// after the latest reply that fed it, and while this process's wall clock
// keeps pace with its monotonic clock (within 1 ms) since it was made: a
// step of the local wall clock, either way, drops it. A call to a server
// with no estimate that fresh first reads that server's TIME (one more
// round trip, counted in Stats.ClockReads; a client that hears from a
// server at least once a second does not pay it). A SlidingLog write of
// many entries checks the deadline after each thousand and takes itself
// back when it passes.
//
// The bound this gives: a timed-out call writes nothing, unless its reply
// took longer on the way back than the reply that made the estimate plus
// an eighth of the time left (it ran in time and the reply was lost or
// delayed: its request stays counted, as for any RPC), or the server's
// clock stepped back (or a failover moved the key to a server whose clock
// is behind) by more than 1 ms and the call was sent before the first reply
// after the step was read (within a second of the step: then it may write
// up to the step late), or, on a cluster, it is the call on a key whose
// slot is moving to another master that go-redis's slot map does not show
// yet (that call alone is judged with the old master's offset: off by the
// skew between the two; its reply does not feed the old master's
// estimate). go-redis's ClusterClient re-sends a command once after a
// broken connection (MaxRedirects): a script that ran before the break
// then runs again and counts its requests twice; the other clients must
// not retry (see Config.Client).
//
// A server clock that steps back (an NTP step, a failover to a replica
// whose clock is behind) leaves state dated after the server's now. The
// scripts move it back to now (a SlidingLog key's entries so that the
// newest is at now, the others keeping their spacing; a SlidingCounter's
// two counts both into now's window, at full weight, so its estimate never
// drops below what it was before the step; a GCRA key's TAT to at most
// now + Burst x T, an empty bucket, or now + 2 x Burst x T with Penalty):
// those requests were made no later than now in real time, so each still
// counts for at least its full Window and nothing extra is admitted, and a
// key frees at most one Window (SlidingCounter: two, its memory; GCRA: one
// bucket, Burst x T, two with Penalty) after its first call after the
// step, with a RetryAfter that is true, not the size of the step. A clock
// that steps forward ages entries out early by the step: up to Limit more
// in the window of the step, as for a server that loses its data.
//
// # Eviction
//
// An evicted key grants its whole limit again, with no error anywhere.
// Redis evicts only when it has a maxmemory limit, and with any
// maxmemory-policy but noeviction the limiter's keys can go: under
// volatile-* first (they are the keys with a TTL), under allkeys-* like any
// other. New reads each server's maxmemory and maxmemory-policy (CONFIG
// GET) and refuses such a server with an error wrapping ErrEvictionPolicy,
// unless Config.AllowEviction accepts it. The servers are a single server
// (or a Sentinel failover client's master) and the replicas it reports in
// INFO replication (a failover would promote one), at the addresses they
// report; every node of a cluster, replicas included; every shard of a
// Ring. Where CONFIG is renamed or denied (managed services, ACL users
// without +config), a replica's reported address does not answer, a Ring
// shard is down at New (go-redis skips it), or no server answers at New,
// it cannot check: the Store works and says so (Stats.EvictionUnchecked,
// EvictionCheck); the requirement is then the operator's: a dedicated
// server or database with noeviction, or enough memory. A policy changed
// after New, or a server added later, is not seen. Stats.EvictedKeys counts
// the evictions the servers report (INFO stats evicted_keys, from a
// baseline New takes, sampled at most once a second while calls are made),
// of any key: Redis does not say whose. Stats.EvictedKeysUnknown says the
// latest sample could not read some server (INFO denied, a server down).
//
// # Faults
//
// The engine.RateLimiter methods have no error: a call Redis does not
// answer in time, or refuses, is decided by Config.OnFailure. A circuit
// breaker counts failing intervals (one Timeout long: the calls in flight
// during one stall count once), opens after BreakerThreshold of them, stops
// sending while open (a dead server costs a few atomic loads per request),
// and probes once per cool-down to recover by itself. Only the server's
// faults count: a caller's cancelled or expired context is its own, gets
// the policy's decision without consuming anything and an error wrapping
// only the context's error, and never opens the breaker (when the server
// stalled past Timeout meanwhile, the stall counts for the breaker, and the
// caller still gets its context's error and consumes nothing). A call
// whose reply comes back is Redis's decision, and Redis recorded it: it is
// returned with no error even if the caller cancelled while it was out
// (go-redis does not interrupt a read in progress). Every fault is
// counted in Stats; nothing panics. The ...Context variants return the
// policy's decision together with an error wrapping ErrUnavailable. A call
// whose caller cancels returns when its round trip ends, at most Timeout
// later (go-redis does not interrupt a read in progress).
//
// What the policies admit at fault boundaries, per window:
//
//   - FailLocal: each node admits Limit/Nodes on its own (GCRA: at
//     Limit/Nodes per Window with a bucket of Burst/Nodes, at least 1) while Redis is
//     away, counting from an empty local window, and Redis does not see
//     those requests when it comes back. So the window in which a fault
//     starts can admit up to 2 x Limit in all (Limit through Redis before
//     the fault, Limit from the local shares after it), and the window in
//     which it ends as much again.
//   - FailOpen: everything, while Redis is away.
//   - FailClosed: nothing beyond what Redis admitted before the fault.
//   - A server that loses its data (a restart without persistence,
//     FLUSHALL, a failover to a replica that had not received the latest
//     writes) grants a fresh window: up to Limit more in the window where
//     it happens.
//
// # Hybrid
//
// Hybrid decides in memory against leases of the global limit that a
// background loop renews in batches; see its documentation for the error
// bound it guarantees. It has no penalty mode: NewHybrid rejects
// Config.Penalty (its denials never reach Redis). It runs SlidingLog and
// SlidingCounter, not GCRA: a lease's unspent tokens go back to the global
// state, which a count allows and a GCRA bucket does not (once the bucket
// has refilled past the lease, taking its tokens off the TAT would give
// back capacity the key never had: more than the rate; keeping them would
// waste every unspent lease, each sync, and still count a lease's tokens
// at the time it was taken rather than spent). NewHybrid rejects GCRA with an
// error naming Algorithm; use a Store. After Close it takes no
// lease: each decision is one exact round trip, as a Store's.
package redisstore
