package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

func clusterClient(t *testing.T, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestCluster runs the Store and Hybrid tests against a real Redis Cluster
// of three masters on loopback (redis-cli --cluster create), so that keys
// land on different nodes and every script must keep to one slot.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := clusterClient(t, c)
	t.Run("differential", func(t *testing.T) { testDifferential(t, client) })
	t.Run("concurrent", func(t *testing.T) { testConcurrentOneKey(t, client) })
	t.Run("server time", func(t *testing.T) { testServerTime(t, client) })
	t.Run("hostile keys", func(t *testing.T) {
		for _, alg := range algorithms {
			s := newStore(t, Config{Client: client, Algorithm: alg, Limit: 2, Window: time.Hour, OnFailure: FailOpen})
			testHostileKeys(t, s)
			for _, k := range hostileKeys {
				name := stateKey(s, k)
				got, err := c.KeySlot(name)
				if err != nil || got != slot(name) {
					t.Fatalf("CLUSTER KEYSLOT %q = %d (%v), computed %d", name, got, err, slot(name))
				}
			}
		}
	})
	t.Run("nodes share one limit", func(t *testing.T) {
		testNodesShareLimit(t, func() redis.UniversalClient { return clusterClient(t, c) })
	})
	t.Run("hybrid overshoot", func(t *testing.T) {
		for _, alg := range hybridAlgorithms {
			t.Run(alg.String(), func(t *testing.T) {
				testHybridOvershoot(t, func() redis.UniversalClient { return clusterClient(t, c) }, alg)
			})
		}
	})
	t.Run("hybrid returns", func(t *testing.T) {
		for _, alg := range hybridAlgorithms {
			t.Run(alg.String(), func(t *testing.T) { testHybridCloseReturnsTokens(t, client, alg) })
		}
	})
	t.Run("script flush on one node", func(t *testing.T) {
		for _, alg := range hybridAlgorithms {
			t.Run(alg.String(), func(t *testing.T) { testPartialScriptFlush(t, c, alg) })
		}
	})
}

// testNodesShareLimit: three Stores (three gateway nodes, each with its own
// client) decide concurrently on 60 keys spread over the servers; each key
// admits exactly Limit in all.
func testNodesShareLimit(t *testing.T, client func() redis.UniversalClient) {
	const nodes, keys, limit, tries = 3, 60, 7, 5
	for _, alg := range algorithms {
		var stores []*Store
		for range nodes {
			stores = append(stores, newStore(t, Config{Client: client(), Algorithm: alg, Limit: limit, Window: time.Hour, Prefix: "share:"}))
		}
		var admitted [keys]atomic.Int64
		var wg sync.WaitGroup
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range tries {
					for k := range keys {
						d, err := s.AllowNContext(context.Background(), "user:"+strconv.Itoa(k), 1)
						if err != nil {
							t.Errorf("%v: %v", alg, err)
							return
						}
						if d.Allowed {
							admitted[k].Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		for k := range keys {
			if got := admitted[k].Load(); got != limit {
				t.Fatalf("%v key %d: %d nodes admitted %d in all, want exactly %d", alg, k, nodes, got, limit)
			}
		}
	}
}

// testPartialScriptFlush: the script cache of one master is flushed while a
// Hybrid's pipelines span all three; only the commands that master refused
// (NOSCRIPT) are resent, by EVAL, so no lease is granted twice: after
// Close, Redis holds exactly what was admitted, key by key.
func testPartialScriptFlush(t *testing.T, c *redistest.Cluster, alg engine.Algorithm) {
	client := clusterClient(t, c)
	prefix := "flush:" + alg.String() + ":"
	h, err := NewHybrid(HybridConfig{Config: Config{Client: client, Algorithm: alg, Limit: 1000, Window: time.Hour, Prefix: prefix, Timeout: testTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 48)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	admitted := map[string]int64{}
	round := func() {
		for _, k := range keys {
			if h.Allow(k) {
				admitted[k]++
			}
		}
	}
	round()
	if _, err := redistest.Do(c.Servers[1].Addr(), "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		round()
		time.Sleep(2 * time.Millisecond)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	st := h.Stats()
	if st.ScriptLoads == 0 {
		t.Fatalf("no NOSCRIPT seen after SCRIPT FLUSH: %+v", st)
	}
	for _, k := range keys {
		if n := held(t, client, h.s, k); n != admitted[k] {
			t.Fatalf("key %s: Redis holds %d after Close, the node admitted %d (a lease granted twice?); %+v", k, n, admitted[k], st)
		}
	}
}

// TestSentinel: a Store and a Hybrid through a Sentinel failover client
// keep one limit across a failover: the master is killed after its writes
// reached the replica (WAIT), the sentinel promotes the replica, and the
// key's window carries over.
func TestSentinel(t *testing.T) {
	quietClientLog(t)
	st := redistest.StartSentinel(t)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: []string{st.Sentinel.Addr()},
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	const limit = 5
	s := newStore(t, Config{Client: client, Algorithm: engine.SlidingLog, Limit: limit, Window: time.Hour, OnFailure: FailClosed})
	h := newHybrid(t, HybridConfig{Config: Config{Client: client, Algorithm: engine.SlidingCounter, Limit: 1000, Window: time.Hour}})
	for i := range 3 {
		if d, err := s.AllowNContext(context.Background(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d before the failover: %+v, %v", i, d, err)
		}
	}
	if !h.Allow("h") {
		t.Fatal("hybrid before the failover: denied")
	}
	if err := client.Do(context.Background(), "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	st.Master.Kill()
	eventually(t, "failover to the replica", func() bool {
		_, err := s.PeekContext(context.Background(), "k")
		return err == nil
	})
	admitted := 0
	for range limit {
		d, err := s.AllowNContext(context.Background(), "k", 1)
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != limit-3 {
		t.Fatalf("after the failover %d more admitted, want %d: the window must carry over", admitted, limit-3)
	}
	eventually(t, "hybrid after the failover", func() bool { return h.Allow("h2") })
}
