package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestNewRefusesEvictingServer: a server with a maxmemory limit and a
// policy that can evict the limiter's keys (volatile-*: they are the keys
// with a TTL; allkeys-*) is refused at construction with an error naming
// maxmemory-policy, unless Config.AllowEviction; noeviction, or no
// maxmemory, is accepted.
func TestNewRefusesEvictingServer(t *testing.T) {
	for _, c := range []struct {
		args   []string
		refuse bool
	}{
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"}, true},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, true},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"}, true},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, false},
		{[]string{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"}, false},
	} {
		srv := redistest.StartWith(t, c.args...)
		cfg := Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 10, Window: time.Minute, Timeout: testTimeout}
		s, err := New(cfg)
		if c.refuse {
			if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), "maxmemory-policy") {
				t.Fatalf("%v: New err = %v; want ErrEvictionPolicy naming maxmemory-policy", c.args, err)
			}
			cfg.AllowEviction = true
			s, err = New(cfg)
			if err != nil {
				t.Fatalf("%v with AllowEviction: %v", c.args, err)
			}
		} else if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if err := s.EvictionCheck(); err != nil || s.Stats().EvictionUnchecked {
			t.Fatalf("%v: EvictionCheck = %v, Stats %+v; want checked", c.args, err, s.Stats())
		}
		if !s.Allow("k") {
			t.Fatalf("%v: first request denied", c.args)
		}
		_ = s.Close()
	}
}

// TestNewReportsUncheckedEvictionPolicy: where CONFIG is not available (a
// managed service renames or denies it), New cannot read the policy: it
// accepts the server and says so (Stats.EvictionUnchecked, EvictionCheck).
func TestNewReportsUncheckedEvictionPolicy(t *testing.T) {
	srv := redistest.StartWith(t, "--rename-command", "CONFIG", "")
	s := newStore(t, Config{Client: newClient(t, srv.Addr()), Algorithm: engine.SlidingLog, Limit: 10, Window: time.Minute})
	err := s.EvictionCheck()
	if err == nil || !strings.Contains(err.Error(), "maxmemory-policy not checked") || !s.Stats().EvictionUnchecked {
		t.Fatalf("EvictionCheck = %v, EvictionUnchecked %v; want the reason the policy was not checked", err, s.Stats().EvictionUnchecked)
	}
	if !s.Allow("k") {
		t.Fatal("first request denied")
	}
}

// TestStatsCountServerEvictions: evictions on the server (here of other
// data, under allkeys-random with AllowEviction) show in Stats.EvictedKeys.
func TestStatsCountServerEvictions(t *testing.T) {
	srv := redistest.StartWith(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random")
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Minute, AllowEviction: true})
	if got := s.Stats().EvictedKeys; got != 0 {
		t.Fatalf("EvictedKeys = %d before any eviction", got)
	}
	big := strings.Repeat("x", 64<<10)
	for i := range 200 { // 12.5 MB into 4 MB
		if err := client.Set(context.Background(), "filler:"+strconv.Itoa(i), big, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	info, err := client.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := infoField(info, "evicted_keys")
	if want == 0 {
		t.Fatalf("the server evicted nothing: %s", info)
	}
	eventually(t, "EvictedKeys to reach the server's evicted_keys", func() bool {
		s.Allow("k") // a call makes the sample due
		return s.Stats().EvictedKeys >= want
	})
}

// TestNewChecksSentinelReplicas: a Sentinel failover client's replica (the
// master after a failover) that can evict is refused like the master.
func TestNewChecksSentinelReplicas(t *testing.T) {
	quietClientLog(t)
	st := redistest.StartSentinel(t)
	for _, kv := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "allkeys-lru"}} {
		if r, err := redistest.Do(st.Replica.Addr(), "CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatal(r, err)
		}
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: []string{st.Sentinel.Addr()},
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	_, err := New(Config{Client: client, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Minute})
	if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), st.Replica.Addr()) {
		t.Fatalf("New = %v; want ErrEvictionPolicy naming the replica %s", err, st.Replica.Addr())
	}
}

// TestNewReportsRingShardDownUnchecked: a Ring shard that is down at New
// (go-redis's ForEachShard skips it) has not had its policy checked: New
// says so rather than reporting every shard checked.
func TestNewReportsRingShardDownUnchecked(t *testing.T) {
	quietClientLog(t)
	good := redistest.Start(t)
	down := redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"good": good.Addr(), "down": down.Addr()},
		ContextTimeoutEnabled: true, MaxRetries: -1, HeartbeatFrequency: 50 * time.Millisecond})
	t.Cleanup(func() { _ = ring.Close() })
	down.Kill()
	eventually(t, "the Ring to hold the shard down", func() bool {
		var n atomic.Int64 // ForEachShard calls it concurrently
		_ = ring.ForEachShard(context.Background(), func(context.Context, *redis.Client) error { n.Add(1); return nil })
		return n.Load() == 1
	})
	s := newStore(t, Config{Client: ring, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Minute})
	if err := s.EvictionCheck(); err == nil || !strings.Contains(err.Error(), "1 of 2 Ring shards") || !s.Stats().EvictionUnchecked {
		t.Fatalf("EvictionCheck = %v, Stats %+v; want the down shard reported unchecked", err, s.Stats())
	}
	if !s.Stats().EvictedKeysUnknown {
		t.Fatalf("Stats %+v; want EvictedKeysUnknown while a shard's evicted_keys cannot be read", s.Stats())
	}
}

// TestEvictionBaselineTakenWhenPolicyUnchecked: where CONFIG is denied but
// INFO is not, New still takes the evicted_keys baseline, so the evictions
// after New are counted from the first sample on.
func TestEvictionBaselineTakenWhenPolicyUnchecked(t *testing.T) {
	srv := redistest.StartWith(t, "--rename-command", "CONFIG", "", "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random")
	client := newClient(t, srv.Addr())
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: 10, Window: time.Minute})
	if !s.Stats().EvictionUnchecked || s.Stats().EvictedKeysUnknown {
		t.Fatalf("Stats %+v; want the policy unchecked and evicted_keys read", s.Stats())
	}
	big := strings.Repeat("x", 64<<10)
	for i := range 200 { // 12.5 MB into 4 MB, at once: before any later sample
		if err := client.Set(context.Background(), "filler:"+strconv.Itoa(i), big, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	info, err := client.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := infoField(info, "evicted_keys")
	if want == 0 {
		t.Fatalf("the server evicted nothing: %s", info)
	}
	eventually(t, "EvictedKeys to reach the server's evicted_keys", func() bool {
		s.Allow("k")
		return s.Stats().EvictedKeys >= want
	})
}
