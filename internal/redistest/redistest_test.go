package redistest

import (
	"bufio"
	"net"
	"strconv"
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

// TestSkewedServerClock: a server started by StartSkewed answers TIME in
// its shifted clock, and Set moves the live server's clock.
func TestSkewedServerClock(t *testing.T) {
	s, clk := StartSkewed(t, 2*time.Hour)
	serverTime := func() time.Time {
		t.Helper()
		r, err := Do(s.Addr(), "EVAL", "local t = redis.call('TIME') return t[1] * 1000000 + t[2]", "0")
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		us, err := strconv.ParseInt(r, 10, 64)
		if err != nil {
			t.Fatalf("TIME %q: %v", r, err)
		}
		return time.UnixMicro(us)
	}
	// The tolerance is far below the offsets and far above any delay.
	const tol = time.Minute
	if d := serverTime().Sub(time.Now()); d < 2*time.Hour-tol || d > 2*time.Hour+tol {
		t.Fatalf("server clock %v ahead, want about 2h", d)
	}
	if err := clk.Set(-3 * time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := serverTime().Sub(time.Now()); d < -3*time.Hour-tol || d > -3*time.Hour+tol {
		t.Fatalf("after Set(-3h): server clock %v off, want about -3h", d)
	}
}
