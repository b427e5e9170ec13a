package redisbench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/redisstore"
)

// The scenario: 100 keys in turn, 1000 requests per second each. The
// round-trip implementations stay below the limit here, so they admit
// (their full write path); the hybrid decides faster than the limit allows
// and denies the excess in memory, which allowed-% shows. The hybrid's
// default MaxLease is then ceil(2 x 1000 x 5 ms / 1 s) = 10 per key per sync.
const (
	numKeys = 100
	limit   = 1000
	window  = time.Second
)

var keys = func() []string {
	k := make([]string, numKeys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// decider is one implementation under test.
type decider func(ctx context.Context, key string) bool

// impl is one implementation: make builds it on a client and returns its
// decider and what releases it (nil: nothing to release).
type impl struct {
	name string
	make func(b *testing.B, c *redis.Client) (decider, func() error)
}

var impls = []impl{
	{"ours-log", func(b *testing.B, c *redis.Client) (decider, func() error) { return store(b, c, engine.SlidingLog) }},
	{"ours-counter", func(b *testing.B, c *redis.Client) (decider, func() error) { return store(b, c, engine.SlidingCounter) }},
	// GCRA with redis_rate's rate and burst (Burst 0 = Limit): the
	// like-for-like comparison.
	{"ours-gcra", func(b *testing.B, c *redis.Client) (decider, func() error) { return store(b, c, engine.GCRA) }},
	{"redis_rate", func(b *testing.B, c *redis.Client) (decider, func() error) {
		l := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: limit, Burst: limit, Period: window}
		return func(ctx context.Context, key string) bool {
			r, err := l.Allow(ctx, key, lim)
			return err == nil && r.Allowed > 0
		}, nil
	}},
	{"zset-multi", func(b *testing.B, c *redis.Client) (decider, func() error) {
		var seq atomic.Uint64
		return func(ctx context.Context, key string) bool {
			now := time.Now().UnixMicro()
			var card *redis.IntCmd
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				k := "zset:" + key
				p.ZRemRangeByScore(ctx, k, "-inf", "("+strconv.FormatInt(now-window.Microseconds(), 10))
				p.ZAdd(ctx, k, redis.Z{Score: float64(now), Member: strconv.FormatInt(now, 10) + ":" + strconv.FormatUint(seq.Add(1), 10)})
				card = p.ZCard(ctx, k)
				p.Expire(ctx, k, window)
				return nil
			})
			return err == nil && card.Val() <= limit
		}, nil
	}},
	{"hybrid-log", func(b *testing.B, c *redis.Client) (decider, func() error) { return hybrid(b, c, engine.SlidingLog) }},
	{"hybrid-counter", func(b *testing.B, c *redis.Client) (decider, func() error) {
		return hybrid(b, c, engine.SlidingCounter)
	}},
}

func store(b *testing.B, c *redis.Client, alg engine.Algorithm) (decider, func() error) {
	s, err := redisstore.New(redisstore.Config{Client: c, Algorithm: alg, Limit: limit, Window: window, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return func(_ context.Context, key string) bool { return s.AllowN(key, 1).Allowed }, s.Close
}

func hybrid(b *testing.B, c *redis.Client, alg engine.Algorithm) (decider, func() error) {
	h, err := redisstore.NewHybrid(redisstore.HybridConfig{
		Config: redisstore.Config{Client: c, Algorithm: alg, Limit: limit, Window: window, Timeout: time.Second},
	})
	if err != nil {
		b.Fatal(err)
	}
	return func(_ context.Context, key string) bool { return h.AllowN(key, 1).Allowed }, h.Close
}

// BenchmarkRedis runs every implementation serial and parallel against one
// redis-server, flushed between runs. Metrics: decisions/s, p99-µs (one
// decision's latency), allowed-% and admitted/s (what was admitted).
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	warmUp(b, srv.Addr())
	// Each round starts one implementation later, so that none is always
	// the first measured on a fresh server.
	first := *round % len(impls)
	for i := range impls {
		im := impls[(first+i)%len(impls)]
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel"
			}
			b.Run(fmt.Sprintf("%s/%s", im.name, mode), func(b *testing.B) {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
				// Cleanups run last-in first-out: the limiters (a Hybrid's
				// final sync) finish before the client closes.
				b.Cleanup(func() { _ = c.Close() })
				if err := c.FlushAll(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				decide, release := im.make(b, c)
				if release != nil {
					b.Cleanup(func() { _ = release() })
				}
				run(b, c, decide, par)
			})
		}
	}
}

// round is the number of this run in an interleaved series. go test's
// -count repeats each sub-benchmark back to back (ours N times, then
// redis_rate N times), which is not interleaving: make bench-redis runs
// the test binary once per round with -count=1 and -redisbench.round=i,
// so every round measures every implementation, in a rotated order.
var round = flag.Int("redisbench.round", 0, "the round of an interleaved series: which implementation goes first")

// warmUp runs every implementation a little against the fresh server, so
// that the first one measured does not pay for its allocator, its script
// cache and its connections warming up.
func warmUp(b *testing.B, addr string) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	for _, im := range impls {
		decide, release := im.make(b, c)
		for i := range 2000 {
			decide(ctx, keys[i%numKeys])
		}
		if release != nil {
			if err := release(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
}

// run measures b.N decisions, recording each one's latency, and the
// server's time for them from INFO commandstats (reset after the warm-up).
func run(b *testing.B, c *redis.Client, decide decider, parallel bool) {
	ctx := context.Background()
	var mu sync.Mutex
	var all []time.Duration
	var allowed atomic.Int64
	var next atomic.Uint64
	// Warm-up, untimed: every key once, so the hybrid measures warm keys
	// (a key's first decision on a node is a round trip) and the scripts
	// are loaded for everyone.
	for _, k := range keys {
		decide(ctx, k)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0, srvCPU0 := processCPU(b), serverCPU(b, c)
	b.ResetTimer()
	start := time.Now()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			lat := make([]time.Duration, 0, 1024)
			ok := int64(0)
			for pb.Next() {
				k := keys[next.Add(1)%numKeys]
				t0 := time.Now()
				if decide(ctx, k) {
					ok++
				}
				lat = append(lat, time.Since(t0))
			}
			allowed.Add(ok)
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	} else {
		all = make([]time.Duration, 0, b.N)
		for i := range b.N {
			t0 := time.Now()
			if decide(ctx, keys[i%numKeys]) {
				allowed.Add(1)
			}
			all = append(all, time.Since(t0))
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	client := processCPU(b) - cpu0
	srvCPU := serverCPU(b, c) - srvCPU0
	slices.Sort(all)
	p99 := all[min(len(all)-1, len(all)*99/100)]
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(p99)/float64(time.Microsecond), "p99-µs")
	b.ReportMetric(100*float64(allowed.Load())/float64(b.N), "allowed-%")
	b.ReportMetric(float64(allowed.Load())/elapsed.Seconds(), "admitted/s")
	// The client's own CPU per decision (this process: the limiter,
	// go-redis, the runtime), against the server's below: the two share
	// this machine's cores, so either one's cost lowers decisions/s.
	b.ReportMetric(float64(client)/float64(time.Microsecond)/float64(b.N), "client-µs/decision")
	// The server process's CPU (INFO cpu: user and system, every thread)
	// per decision: unlike srv-µs/decision (the commands' wall time, which
	// grows when a busy machine preempts the server mid-script), it counts
	// only cycles spent, including the server's own reads and writes of
	// the sockets; client plus server CPU is what a decision costs the
	// machine.
	b.ReportMetric(float64(srvCPU)/float64(time.Microsecond)/float64(b.N), "srv-cpu-µs/decision")
	srv := serverTime(b, c)
	// Commands a script calls are counted too (inside the script's own
	// time), so where scripts run, their time alone is the server's.
	if srv.scriptCalls > 0 {
		b.ReportMetric(srv.scriptUsec/float64(b.N), "srv-µs/decision")
		b.ReportMetric(srv.scriptUsec/float64(srv.scriptCalls), "script-µs/call")
	} else {
		b.ReportMetric(srv.total/float64(b.N), "srv-µs/decision")
	}
}

// processCPU is this process's CPU time so far, user and system (the
// redis-server is another process: not counted).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the redis-server process's CPU time so far (INFO cpu:
// used_cpu_user plus used_cpu_sys, in seconds with µs digits).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// commandStats is the server's time since CONFIG RESETSTAT: all commands,
// and the scripts (EVALSHA and EVAL).
type commandStats struct {
	total, scriptUsec float64
	scriptCalls       int64
}

// serverTime reads INFO commandstats: lines like
// cmdstat_evalsha:calls=10,usec=123,usec_per_call=12.30,...
func serverTime(b *testing.B, c *redis.Client) commandStats {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var st commandStats
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config" {
			continue
		}
		var calls int64
		var usec float64
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		st.total += usec
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			st.scriptUsec += usec
			st.scriptCalls += calls
		}
	}
	return st
}
