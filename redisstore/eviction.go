package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrEvictionPolicy is wrapped by New's error when a server has a
// maxmemory limit and a maxmemory-policy other than noeviction: Redis may
// then evict the limiter's keys (under volatile-* first, since they are the
// ones with a TTL), and an evicted key grants its whole limit again
// (phantom quota, with no error anywhere). Config.AllowEviction accepts
// such a server.
var ErrEvictionPolicy = errors.New("server's maxmemory-policy can evict the limiter's keys")

// evictionSampleEvery is how often, at most, a Store reads its servers'
// evicted_keys (INFO stats) for Stats.EvictedKeys: on a call that finds
// the last sample this old, in a goroutine of its own.
const evictionSampleEvery = time.Second

// setupTimeout bounds the calls of New's checks and of the eviction
// samples: no decision waits for them, and a Timeout of a few milliseconds
// would skip the check against a distant server.
func setupTimeout(timeout time.Duration) time.Duration { return max(timeout, time.Second) }

// evictionWatch is a Store's knowledge of its servers' eviction: what New
// found (checked) and the evicted_keys counters sampled since.
type evictionWatch struct {
	unchecked atomic.Pointer[string] // why the policy could not be checked; nil if it was

	next     atomic.Int64 // monotonic ns of the next sample due
	sampling atomic.Bool
	evicted  atomic.Uint64 // sum of the servers' evicted_keys growth since New
	blind    atomic.Bool   // the latest sample could not read some server's evicted_keys

	mu   sync.Mutex
	last map[string]uint64 // per server address: the latest sample; guarded by mu
}

// forEachServer calls fn for each server of c (for a cluster its masters,
// concurrently).
func forEachServer(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch cl := c.(type) {
	case *redis.Client:
		return fn(ctx, cl)
	case *redis.ClusterClient:
		return cl.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return cl.ForEachShard(ctx, fn)
	}
	return fmt.Errorf("client of type %T", c) // normalize rejected it already
}

// checkEviction reads every server's maxmemory and maxmemory-policy (one
// CONFIG GET maxmemory* each) and returns an error wrapping
// ErrEvictionPolicy for a server that can evict, unless allow. The servers
// are the single server and the replicas it reports (INFO replication: a
// Sentinel failover client's master and the replicas a failover would
// promote), every node of a cluster (replicas too, for the same reason), and
// every shard of a Ring. A server that cannot be asked (CONFIG renamed or
// denied by an ACL, as on managed Redis services; a replica whose reported
// address does not answer; a Ring shard down at New, which go-redis skips;
// or no server reachable yet) is not an error: the reason is kept for
// Stats.EvictionUnchecked and EvictionCheck.
func (w *evictionWatch) checkEviction(ctx context.Context, c redis.UniversalClient, allow bool) error {
	var mu sync.Mutex
	var refused error
	var asked atomic.Int64
	check := func(ctx context.Context, srv *redis.Client) error {
		kv, err := srv.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			return fmt.Errorf("%s: CONFIG GET maxmemory*: %w", srv.Options().Addr, err)
		}
		policy, limit := kv["maxmemory-policy"], kv["maxmemory"]
		if policy == "" {
			return fmt.Errorf("%s: CONFIG GET maxmemory* has no maxmemory-policy", srv.Options().Addr)
		}
		if policy != "noeviction" && limit != "" && limit != "0" && !allow {
			mu.Lock()
			refused = fmt.Errorf("redisstore: server %s has maxmemory %s and maxmemory-policy %s: %w (a key evicted under memory pressure admits its whole limit again); set maxmemory-policy noeviction on the server, or Config.AllowEviction to accept it",
				srv.Options().Addr, limit, policy, ErrEvictionPolicy)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch cl := c.(type) {
	case *redis.Client:
		if err = check(ctx, cl); err == nil {
			err = checkReplicas(ctx, cl, check)
		}
	case *redis.ClusterClient:
		err = cl.ForEachShard(ctx, check)
	case *redis.Ring:
		err = cl.ForEachShard(ctx, func(ctx context.Context, srv *redis.Client) error {
			asked.Add(1)
			return check(ctx, srv)
		})
		// ForEachShard skips the shards the Ring holds down (and returns
		// nil when all are): they were not checked.
		if n := int64(len(cl.Options().Addrs)); err == nil && asked.Load() < n {
			err = fmt.Errorf("%d of %d Ring shards down at New", n-asked.Load(), n)
		}
	default:
		err = fmt.Errorf("client of type %T", c) // normalize rejected it already
	}
	if refused != nil {
		return refused
	}
	if err != nil {
		why := "maxmemory-policy not checked: " + err.Error()
		w.unchecked.Store(&why)
	}
	return nil
}

// checkReplicas checks (with check) the replicas that srv reports in INFO
// replication, each by a client of srv's options at the replica's address.
// A Sentinel failover client's options dial through the Sentinels; the
// replica's client dials its address directly.
func checkReplicas(ctx context.Context, srv *redis.Client, check func(context.Context, *redis.Client) error) error {
	info, err := srv.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("%s: INFO replication: %w", srv.Options().Addr, err)
	}
	var errs []error
	for _, addr := range replicaAddrs(info) {
		opt := *srv.Options()
		opt.Addr, opt.Dialer, opt.OnConnect = addr, nil, nil
		r := redis.NewClient(&opt)
		if err := check(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("replica %w", err))
		}
		_ = r.Close()
	}
	return errors.Join(errs...)
}

// replicaAddrs reads the replicas' addresses from an INFO replication
// reply (lines slave<i>:ip=...,port=...,...).
func replicaAddrs(info string) []string {
	var addrs []string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "slave") || strings.HasPrefix(k, "slave_") {
			continue
		}
		var ip, port string
		for _, f := range strings.Split(v, ",") {
			if x, ok := strings.CutPrefix(f, "ip="); ok {
				ip = x
			} else if x, ok := strings.CutPrefix(f, "port="); ok {
				port = x
			}
		}
		if ip != "" && port != "" {
			addrs = append(addrs, net.JoinHostPort(ip, port))
		}
	}
	return addrs
}

// maybeSample starts a sample of the servers' evicted_keys if one is due
// and none is running. now is the Store's monotonic clock.
func (s *Store) maybeSample(now int64) {
	w := &s.evict
	if now < w.next.Load() || !w.sampling.CompareAndSwap(false, true) {
		return
	}
	w.next.Store(now + int64(evictionSampleEvery))
	go func() {
		defer w.sampling.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout(s.cfg.Timeout))
		defer cancel()
		s.sampleEvictions(ctx)
	}()
}

// sampleEvictions reads evicted_keys from every server (INFO stats) and
// adds their growth since the last sample to the count. New takes the
// first sample, the baseline; a server seen for the first time later (a
// new cluster master, a server unreachable at New) sets its own, and one
// whose counter went down (restarted, CONFIG RESETSTAT) starts over from
// it. A sample that cannot read some server (INFO denied, the server
// unreachable, a Ring shard down) sets blind until one reads them all.
func (s *Store) sampleEvictions(ctx context.Context) {
	w := &s.evict
	var missing atomic.Bool
	var asked atomic.Int64
	err := forEachServer(ctx, s.cfg.Client, func(ctx context.Context, srv *redis.Client) error {
		asked.Add(1)
		info, err := srv.Info(ctx, "stats").Result()
		if err != nil {
			return err
		}
		n, ok := infoField(info, "evicted_keys")
		if !ok {
			missing.Store(true)
			return nil
		}
		addr := srv.Options().Addr
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.last == nil {
			w.last = map[string]uint64{}
		}
		prev, seen := w.last[addr]
		w.last[addr] = n
		if seen && n > prev {
			w.evicted.Add(n - prev)
		}
		return nil
	})
	if r, ok := s.cfg.Client.(*redis.Ring); ok && asked.Load() < int64(len(r.Options().Addrs)) {
		missing.Store(true)
	}
	w.blind.Store(err != nil || missing.Load())
}

// infoField reads an unsigned field of an INFO reply.
func infoField(info, name string) (uint64, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
