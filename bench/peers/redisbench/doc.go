// Package redisbench measures global (Redis-backed) rate limiting against
// one local redis-server started by the benchmark itself on 127.0.0.1
// (internal/redistest): decisions per second and the P99 latency of one
// decision for
//
//   - ours: redisstore.Store, SlidingLog and SlidingCounter (one Lua script,
//     one round trip per decision);
//   - redis_rate: github.com/go-redis/redis_rate/v10 (GCRA, one script);
//   - zset-multi: the plain MULTI pipeline ZSET log of seed 002
//     (ZREMRANGEBYSCORE, ZADD, ZCARD, EXPIRE), which records denied requests
//     too and has no atomic check-then-add;
//   - hybrid: redisstore.Hybrid, in-memory decisions against leases renewed
//     in pipelined batches.
//
// Each runs single-goroutine ("serial") and under b.RunParallel
// ("parallel"; vary cores with -cpu). The figures measure the client,
// the loopback and the server together, all on one machine; they compare
// designs, not production network latency. cmd/redismd turns the output into
// the RESULTS.md fragment (make bench-redis).
package redisbench
