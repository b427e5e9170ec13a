package redistest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters on loopback, owned by a test.
type Cluster struct {
	Servers []*Server
}

// clusterTimeout bounds the wait for a new cluster to agree on its slots.
// A guard against a hang, not a speed assertion.
const clusterTimeout = 30 * time.Second

// StartCluster starts n redis-server processes in cluster mode (each with
// its own data port and cluster bus port, both free high ports), joins them
// with `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`
// (the slots split evenly, one master each), waits until every node reports
// cluster_state:ok, and stops them all when the test ends. It skips tb when
// redis-server or redis-cli is missing.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return startCluster(tb, n, nil)
}

// startCluster is StartCluster with setup applied to each server before it
// starts (nil: none).
func startCluster(tb testing.TB, n int, setup func(*Server)) *Cluster {
	tb.Helper()
	cli := lookPath(tb, "redis-cli")
	c := &Cluster{}
	for range n {
		bus, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: find a free port: %v", err)
		}
		c.Servers = append(c.Servers, startWith(tb, func(s *Server) {
			s.extra = []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(bus),
				"--cluster-node-timeout", "5000",
			}
			if setup != nil {
				setup(s)
			}
		}))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, s := range c.Servers {
		for {
			info, err := Do(s.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_assigned:16384") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ready within %v: %v\n%s", s.Addr(), clusterTimeout, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// Addrs are the masters' host:port, in start order.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		a[i] = s.Addr()
	}
	return a
}

// KeySlot asks the cluster which slot key hashes to (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(key string) (int, error) {
	r, err := Do(c.Servers[0].Addr(), "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(r)
}

// Sentinel is a monitored master, its replica and one sentinel, on
// loopback, owned by a test.
type Sentinel struct {
	Master, Replica, Sentinel *Server
	// Name is the monitored master's name ("mymaster").
	Name string
}

// sentinelTimeout bounds the waits for replication and for the sentinel to
// see the master. A guard, not a speed assertion.
const sentinelTimeout = 30 * time.Second

// StartSentinel starts a master, a replica of it and a sentinel monitoring
// it (quorum 1, down-after 1 s, so that killing the master fails over to
// the replica within seconds), waits until the replica is in sync and the
// sentinel knows the master, and stops them all when the test ends. The
// sentinel is redis-server in sentinel mode (--sentinel), which Debian's
// redis-server package ships.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	return startSentinel(tb, nil)
}

// startSentinel is StartSentinel with replica applied to the replica before
// it starts (nil: nothing).
func startSentinel(tb testing.TB, replica func(*Server)) *Sentinel {
	tb.Helper()
	st := &Sentinel{Name: "mymaster"}
	st.Master = Start(tb)
	st.Replica = startWith(tb, func(s *Server) {
		s.extra = []string{"--replicaof", "127.0.0.1", strconv.Itoa(st.Master.Port())}
		if replica != nil {
			replica(s)
		}
	})
	waitFor(tb, "replica in sync", func() (bool, error) {
		info, err := Do(st.Replica.Addr(), "INFO", "replication")
		return strings.Contains(info, "master_link_status:up"), err
	})
	st.Sentinel = startWith(tb, func(s *Server) {
		s.conf = writeFile(tb, s.dir, "sentinel.conf", fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel resolve-hostnames no
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, s.port, s.dir, st.Name, st.Master.Port(), st.Name, st.Name, st.Name))
	})
	waitFor(tb, "sentinel sees the replica", func() (bool, error) {
		info, err := Do(st.Sentinel.Addr(), "INFO", "sentinel")
		return strings.Contains(info, "status=ok") && strings.Contains(info, "slaves=1"), err
	})
	return st
}

func waitFor(tb testing.TB, what string, ok func() (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(sentinelTimeout)
	for {
		done, err := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: not within %v (%v)", what, sentinelTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
