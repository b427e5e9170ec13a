package redistest

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// skewSource is an LD_PRELOAD library that shifts the wall clock of the
// process it is loaded into (redis-server) by an offset in microseconds
// read from the first 8 bytes (little-endian int64) of the file named by
// REDISTEST_SKEW_FILE. The file is mapped shared, so a write to it moves
// the live server's clock at once: a server ahead of or behind its
// clients, an NTP step, a failover to a replica whose clock is behind.
// Only the wall clock moves (CLOCK_REALTIME and its variants,
// gettimeofday, time); the monotonic clocks are untouched, as a real
// clock step leaves them.
const skewSource = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *skew_us;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

static void skew_init(void) {
	if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
	if (!real_gettimeofday) real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
	if (!skew_us) {
		const char *p = getenv("REDISTEST_SKEW_FILE");
		if (!p) return;
		int fd = open(p, O_RDONLY);
		if (fd < 0) return;
		void *m = mmap(0, 8, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (m != MAP_FAILED) skew_us = (volatile int64_t *)m;
	}
}

static int64_t skew(void) { return skew_us ? *skew_us : 0; }

static int realtime(clockid_t id) {
	return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	skew_init();
	int r = real_clock_gettime(id, ts);
	if (r == 0 && realtime(id)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + skew() * 1000;
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	skew_init();
	int r = real_gettimeofday(tv, tz);
	if (r == 0 && tv) {
		int64_t us = (int64_t)tv->tv_sec * 1000000 + tv->tv_usec + skew();
		tv->tv_sec = us / 1000000;
		tv->tv_usec = us % 1000000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timeval tv;
	gettimeofday(&tv, 0);
	if (t) *t = tv.tv_sec;
	return tv.tv_sec;
}
`

// Clock is the wall-clock offset of a server started by StartSkewed or
// StartSkewedCluster.
type Clock struct {
	f *os.File
}

// Set moves the server's wall clock to the real time plus d (negative:
// behind), at once, while it runs.
func (c *Clock) Set(d time.Duration) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(d/time.Microsecond))
	_, err := c.f.WriteAt(b[:], 0)
	return err
}

// buildSkewLib compiles skewSource with the system C compiler into dir,
// skipping tb (loudly) when there is none.
func buildSkewLib(tb testing.TB) string {
	tb.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		tb.Skip("redistest: no C compiler (cc) in PATH to build the clock-skew library for redis-server; install one (apt-get install gcc) to run this test")
	}
	dir := tb.TempDir()
	src := filepath.Join(dir, "skew.c")
	lib := filepath.Join(dir, "skew.so")
	if err := os.WriteFile(src, []byte(skewSource), 0o644); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src, "-ldl").CombinedOutput(); err != nil {
		tb.Fatalf("redistest: build the clock-skew library: %v\n%s", err, out)
	}
	return lib
}

// newClock makes the offset file for one server, starting at d.
func newClock(tb testing.TB, dir string, d time.Duration) *Clock {
	tb.Helper()
	f, err := os.Create(filepath.Join(dir, "skew"))
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	c := &Clock{f: f}
	if err := c.Set(d); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return c
}

// StartSkewed is Start for a server whose wall clock is the real time plus
// d from its start on, and that the returned Clock moves while it runs.
// It skips tb when redis-server or a C compiler is missing.
func StartSkewed(tb testing.TB, d time.Duration) (*Server, *Clock) {
	tb.Helper()
	lookPath(tb, "redis-server")
	lib := buildSkewLib(tb)
	var c *Clock
	s := startWith(tb, func(s *Server) {
		c = newClock(tb, s.dir, d)
		s.env = []string{"LD_PRELOAD=" + lib, "REDISTEST_SKEW_FILE=" + c.f.Name()}
	})
	return s, c
}

// StartSkewedCluster is StartCluster with each master's wall clock set by
// a Clock of its own (in Servers' order), each starting at offsets[i] (0
// where offsets is shorter).
func StartSkewedCluster(tb testing.TB, n int, offsets ...time.Duration) (*Cluster, []*Clock) {
	tb.Helper()
	lookPath(tb, "redis-server")
	lib := buildSkewLib(tb)
	clocks := make([]*Clock, n)
	i := 0
	c := startCluster(tb, n, func(s *Server) {
		var d time.Duration
		if i < len(offsets) {
			d = offsets[i]
		}
		clocks[i] = newClock(tb, s.dir, d)
		s.env = []string{"LD_PRELOAD=" + lib, "REDISTEST_SKEW_FILE=" + clocks[i].f.Name()}
		i++
	})
	if i != n {
		tb.Fatal(fmt.Sprintf("redistest: %d clocks for %d servers", i, n))
	}
	return c, clocks
}

// StartSkewedSentinel is StartSentinel with the replica's wall clock set by
// the returned Clock, starting at d: a failover then moves the keys to a
// server whose clock is off the old master's.
func StartSkewedSentinel(tb testing.TB, d time.Duration) (*Sentinel, *Clock) {
	tb.Helper()
	lookPath(tb, "redis-server")
	lib := buildSkewLib(tb)
	var c *Clock
	st := startSentinel(tb, func(s *Server) {
		c = newClock(tb, s.dir, d)
		s.env = []string{"LD_PRELOAD=" + lib, "REDISTEST_SKEW_FILE=" + c.f.Name()}
	})
	return st, c
}
