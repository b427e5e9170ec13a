// Package redisbench measures global (Redis-backed) rate limiting against
// one local redis-server started by the benchmark itself on 127.0.0.1
// (internal/redistest): decisions per second and the P99 latency of one
// decision for
//
//   - ours: redisstore.Store, SlidingLog, SlidingCounter and GCRA (one Lua
//     script, one round trip per decision; GCRA with redis_rate's rate and
//     burst, the like-for-like comparison);
//   - redis_rate: github.com/go-redis/redis_rate/v10 (GCRA, one script);
//   - zset-multi: the plain MULTI pipeline ZSET log (ZREMRANGEBYSCORE, ZADD, ZCARD, EXPIRE in one MULTI), the textbook Redis sliding log
//     (ZREMRANGEBYSCORE, ZADD, ZCARD, EXPIRE), which records denied requests
//     too and has no atomic check-then-add;
//   - hybrid: redisstore.Hybrid, in-memory decisions against leases renewed
//     in pipelined batches.
//
// Each runs single-goroutine ("serial") and under b.RunParallel
// ("parallel"; vary cores with -cpu), on one client with the options
// redisstore requires (ContextTimeoutEnabled, MaxRetries -1), shared by
// all. One run of BenchmarkRedis warms the server up with every
// implementation, then measures every implementation in turn, starting
// with the one -redisbench.round=i picks (i modulo their number). go
// test's -count would repeat each sub-benchmark back to back, so make
// bench-redis runs rounds instead: the test binary once per round with
// -count=1 and the round number, which interleaves the implementations
// (ours, redis_rate, ..., ours, redis_rate, ...): a noisy neighbour hits
// all alike, and none is always measured first. Besides decisions/s, P99
// and allocs, each
// reports the server's own time per decision from INFO commandstats (reset
// after the warm-up): srv-µs/decision, and script-µs/call, the scripts'
// usec_per_call (EVALSHA and EVAL; commands a script calls are counted
// inside it), and client-µs/decision, the benchmark process's own CPU time
// (user and system, from getrusage) per decision, and srv-cpu-µs/decision,
// the redis-server process's (INFO cpu): client and server share the
// machine's cores, so either side's cost lowers decisions/s, and CPU time
// moves less with a noisy neighbour than wall time does. The figures measure the client, the loopback and the server
// together, all on one machine; they compare designs, not production
// network latency. cmd/redismd turns the output into the RESULTS.md
// fragment (make bench-redis).
package redisbench
