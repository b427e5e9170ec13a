package redistest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Start: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("server still answers PING after Kill")
	}
	s.Kill() // idempotent
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
}

// TestPauseResume: a paused server accepts a command into its socket and
// answers it only after Resume.
func TestPauseResume(t *testing.T) {
	s := Start(t)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s.Pause()
	if _, err := c.Write([]byte("INCR paused\r\n")); err != nil {
		t.Fatalf("write to a paused server: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)) // this test is about the stall
	rd := bufio.NewReader(c)
	if line, err := rd.ReadString('\n'); err == nil {
		t.Fatalf("paused server answered %q", line)
	}
	s.Resume()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := rd.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != ":1" {
		t.Fatalf("after Resume: %q, %v; want :1 (the buffered INCR ran)", line, err)
	}
}

// TestDo covers the reply kinds Do reads.
func TestDo(t *testing.T) {
	s := Start(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "a b\r\nc"}, "OK"},
		{[]string{"GET", "k"}, "a b\r\nc"},
		{[]string{"INCR", "n"}, "1"},
	} {
		got, err := Do(s.Addr(), c.args...)
		if err != nil || got != c.want {
			t.Fatalf("%v: %q, %v; want %q", c.args, got, err, c.want)
		}
	}
	if _, err := Do(s.Addr(), "INCR", "k"); err == nil {
		t.Fatal("INCR of a string: no error")
	}
}

// TestProxyDelays: a round trip through the proxy takes at least twice its
// one-way delay, and bytes arrive intact.
func TestProxyDelays(t *testing.T) {
	s := Start(t)
	const oneWay = 20 * time.Millisecond
	p := NewProxy(t, s.Addr(), oneWay)
	start := time.Now()
	if err := ping(p.Addr()); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	if rtt := time.Since(start); rtt < 2*oneWay {
		t.Fatalf("round trip %v through a proxy of %v each way", rtt, oneWay)
	}
}

// TestCluster: three masters agree on all 16384 slots, and each answers
// CLUSTER KEYSLOT as Redis Cluster hashes keys (the part in the first
// {...}).
func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	a, err := c.KeySlot("{user1000}.following")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.KeySlot("user1000")
	if err != nil || a != b {
		t.Fatalf("KEYSLOT: %d and %d (%v); a hash tag must hash only its content", a, b, err)
	}
	for _, s := range c.Servers {
		info, err := Do(s.Addr(), "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Fatalf("node %s: %v\n%s", s.Addr(), err, info)
		}
	}
}

// TestSentinel: the sentinel names the master it monitors.
func TestSentinel(t *testing.T) {
	st := StartSentinel(t)
	info, err := Do(st.Sentinel.Addr(), "INFO", "sentinel")
	if err != nil || !strings.Contains(info, "name="+st.Name+",status=ok,address="+st.Master.Addr()) {
		t.Fatalf("INFO sentinel: %v\n%s", err, info)
	}
}
