package loadgen

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"runtime"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// ErrInvalidConfig is wrapped by every error Run returns for a Config it
// rejects before sending anything.
var ErrInvalidConfig = errors.New("invalid config")

// ErrNonLoopback is wrapped (together with ErrInvalidConfig) when an HTTP
// target does not name a loopback address: the load generator only ever
// drives a gateway on this machine.
var ErrNonLoopback = errors.New("target is not a loopback address")

// Mode says how requests are paced.
type Mode uint8

const (
	// OpenLoop sends at a fixed arrival rate, the way wrk2 does: request i
	// has the intended start time i/Rate after the start of the run, and
	// its latency is measured from that intended time, so a stall of the
	// target (or of the generator) shows up in the latency of every request
	// that should have been sent during it (no coordinated omission).
	OpenLoop Mode = iota + 1
	// ClosedLoop runs Concurrency workers that each send the next request
	// as soon as the previous one returns: peak throughput, latency is the
	// service time of each call.
	ClosedLoop
)

func (m Mode) String() string {
	switch m {
	case OpenLoop:
		return "open"
	case ClosedLoop:
		return "closed"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode accepts "open" and "closed".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "open":
		return OpenLoop, nil
	case "closed":
		return ClosedLoop, nil
	}
	return 0, fmt.Errorf("loadgen: unknown mode %q (want open or closed): %w", s, ErrInvalidConfig)
}

// Distribution is the shape of the key stream.
type Distribution uint8

const (
	// Uniform draws each key uniformly from Keys keys.
	Uniform Distribution = iota + 1
	// Zipf draws key rank k from Keys keys with probability proportional
	// to 1/(1+k)^ZipfS: a few hot keys and a long tail.
	Zipf
	// HotKey sends every request for the same key: the admitted count is
	// then fixed by Limit and Window and is checked against its bound.
	HotKey
	// Attack sends every request for a key never seen before (a key-space
	// flood): the key table's memory bound and reclamation are what is
	// tested; every request must be admitted.
	Attack
	// Mix is 90 % Zipf, 5 % the hot key and 5 % attack keys.
	Mix
)

func (d Distribution) String() string {
	switch d {
	case Uniform:
		return "uniform"
	case Zipf:
		return "zipf"
	case HotKey:
		return "hot"
	case Attack:
		return "attack"
	case Mix:
		return "mix"
	}
	return fmt.Sprintf("Distribution(%d)", uint8(d))
}

// ParseDistribution accepts uniform, zipf, hot, attack and mix.
func ParseDistribution(s string) (Distribution, error) {
	for d := Uniform; d <= Mix; d++ {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("loadgen: unknown key distribution %q (want uniform, zipf, hot, attack or mix): %w", s, ErrInvalidConfig)
}

// usesKeySpace reports whether d draws from the Keys keys.
func (d Distribution) usesKeySpace() bool { return d == Uniform || d == Zipf || d == Mix }

// usesZipf reports whether d draws ranks from a Zipf distribution.
func (d Distribution) usesZipf() bool { return d == Zipf || d == Mix }

// Objectives are the service-level objectives the verdict checks; the
// defaults are the acceptance criteria the library was designed against
// (P99 under 2 ms, GC pause p99 under 5 ms, heap growth under 5 %).
type Objectives struct {
	LatencyP99 time.Duration // P99 of request latency must be below this
	// ServiceP99 is the objective of the limiter's own service time: the
	// p99 of the call alone (Allow, from its start to its return), in
	// process. Unlike LatencyP99 it holds on a busy machine, so its miss is
	// always the limiter's. Over HTTP the call is a round trip through the
	// gateway and the figure is reported, not judged.
	ServiceP99    time.Duration
	GCPauseP99    time.Duration // P99 of GC stop-the-world pauses must be below this
	HeapGrowthPct float64       // live heap growth over the steady state, percent
	// MinRateShare is the share of the target rate an open-loop run must
	// achieve for its figures to count: below it the generator (or the
	// target) could not keep up and the run is reported as not sustained.
	MinRateShare float64
}

// DefaultObjectives returns P99 < 2 ms, the limiter's service time p99
// < 100 µs, GC pause p99 < 5 ms, heap growth < 5 % and an achieved rate of
// at least 99 % of the target. The service-time objective leaves the
// engine's decision (well under 10 µs at p99, even on a busy 2-core
// machine) a wide margin and still catches a limiter that blocks: a lock
// held across a sweep, a stall behind the GC.
func DefaultObjectives() Objectives {
	return Objectives{
		LatencyP99: 2 * time.Millisecond, ServiceP99: 100 * time.Microsecond,
		GCPauseP99: 5 * time.Millisecond, HeapGrowthPct: 5, MinRateShare: 0.99,
	}
}

// Config describes one load-generator run. The zero value is not valid;
// start from DefaultConfig.
type Config struct {
	Mode        Mode
	Rate        float64       // open loop: requests per second (the arrival schedule)
	Concurrency int           // open loop: sender goroutines sharing the schedule; closed loop: workers. 0: automatic
	Warmup      time.Duration // load before measuring; excluded from the verdict
	Duration    time.Duration // the measured steady state
	Interval    time.Duration // one progress line and one time-series point per Interval; 0: 1 s

	Dist  Distribution
	Keys  int     // size of the key space for Uniform, Zipf and Mix
	ZipfS float64 // Zipf exponent, > 1
	Seed  uint64  // seeds the key streams (each sender derives its own)

	// In-process target (the default): Limiter if set, else a Limiter
	// built from Engine for the run and closed after it.
	Limiter *engine.Limiter
	Engine  engine.Config

	// HTTP target: when URL is set, requests go to this loopback URL
	// instead, with the key in header KeyHeader; a 2xx answer counts as
	// allowed, 429 as denied, anything else as an error. Engine.Limit and
	// Engine.Window, when set, describe the gateway's limit so that the
	// admitted count can be checked.
	URL         string
	KeyHeader   string
	HTTPTimeout time.Duration

	Objectives Objectives
	// Progress receives one line per Interval; nil: none.
	Progress io.Writer

	// testHealth, set by tests only, edits the run's health readings
	// before they are judged: the verdict's decision on a starved or a
	// healthy machine is tested without depending on this machine's load.
	testHealth func(*Health)
}

// DefaultConfig returns the default scenario: open loop at DefaultRate for
// 20 s after 12 s of warm-up, 1 M keys drawn from Zipf(1.1), SlidingCounter
// with 100 requests per second per key, in process. The warm-up spans the
// engine's default sweep interval (10 s) plus the window: the key table
// grows until the first sweep reclaims idle keys, and only after that is
// its size (and the live heap) steady.
func DefaultConfig() Config {
	return Config{
		Mode:     OpenLoop,
		Rate:     DefaultRate,
		Warmup:   12 * time.Second,
		Duration: 20 * time.Second,
		Interval: time.Second,
		Dist:     Zipf,
		Keys:     1_000_000,
		ZipfS:    1.1,
		Seed:     1,
		Engine: engine.Config{
			Algorithm: engine.SlidingCounter,
			Limit:     100,
			Window:    time.Second,
		},
		KeyHeader:   "X-API-Key",
		HTTPTimeout: 5 * time.Second,
		Objectives:  DefaultObjectives(),
	}
}

// DefaultRate is the default open-loop arrival rate (requests per second):
// about a tenth of what two closed-loop workers reach in process on the
// 2-core reference machine (about 1 M/s with the lock-free engine), so
// that GC, the sweep and the generator itself have headroom and the
// latency measured is the limiter's, not a backlog.
const DefaultRate = 100_000

// maxRate bounds Rate: above it the per-request interval is below 10 ns,
// beyond what any sender can schedule.
const maxRate = 1e8

func invalid(format string, args ...any) error {
	return fmt.Errorf("loadgen: "+format+": %w", append(args, ErrInvalidConfig)...)
}

// normalize validates c and fills in defaults; it does not build anything.
func (c Config) normalize() (Config, error) {
	switch c.Mode {
	case OpenLoop:
		if !(c.Rate > 0) || math.IsInf(c.Rate, 0) || c.Rate > maxRate {
			return c, invalid("Rate must be in (0, %g] requests/s for open loop, got %g", float64(maxRate), c.Rate)
		}
	case ClosedLoop:
		if c.Rate != 0 {
			return c, invalid("Rate %g is set but closed loop sends as fast as it can (use open loop for a fixed rate)", c.Rate)
		}
	default:
		return c, invalid("Mode %d is unknown (want OpenLoop or ClosedLoop)", uint8(c.Mode))
	}
	if c.Concurrency < 0 || c.Concurrency > 10_000 {
		return c, invalid("Concurrency must be in [0, 10000], got %d", c.Concurrency)
	}
	if c.Duration <= 0 {
		return c, invalid("Duration must be > 0, got %v", c.Duration)
	}
	if c.Warmup < 0 {
		return c, invalid("Warmup must be >= 0, got %v", c.Warmup)
	}
	if c.Interval < 0 {
		return c, invalid("Interval must be >= 0, got %v", c.Interval)
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Interval < 10*time.Millisecond {
		return c, invalid("Interval must be >= 10ms, got %v", c.Interval)
	}
	switch c.Dist {
	case Uniform, Zipf, HotKey, Attack, Mix:
	default:
		return c, invalid("Dist %d is unknown", uint8(c.Dist))
	}
	if c.Dist.usesKeySpace() && (c.Keys <= 0 || c.Keys > 1<<30) {
		return c, invalid("Keys must be in [1, %d] for the %s distribution, got %d", 1<<30, c.Dist, c.Keys)
	}
	if c.Dist.usesZipf() {
		if !(c.ZipfS > 1) || math.IsInf(c.ZipfS, 0) {
			return c, invalid("ZipfS must be > 1 for the %s distribution, got %g", c.Dist, c.ZipfS)
		}
		if c.Keys < 2 {
			return c, invalid("Keys must be >= 2 for the %s distribution, got %d", c.Dist, c.Keys)
		}
	}
	o := c.Objectives
	if !(o.LatencyP99 > 0) || !(o.ServiceP99 > 0) || !(o.GCPauseP99 > 0) || !(o.HeapGrowthPct > 0) || !(o.MinRateShare > 0 && o.MinRateShare <= 1) {
		return c, invalid("Objectives must be positive (MinRateShare in (0, 1]), got %+v", o)
	}
	if c.URL != "" {
		if c.Limiter != nil {
			return c, invalid("URL and Limiter are both set (choose the HTTP or the in-process target)")
		}
		if _, err := checkLoopbackURL(c.URL); err != nil {
			return c, err
		}
		if c.KeyHeader == "" {
			return c, invalid("KeyHeader must be set for an HTTP target")
		}
		if c.HTTPTimeout <= 0 {
			return c, invalid("HTTPTimeout must be > 0, got %v", c.HTTPTimeout)
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = runtime.GOMAXPROCS(0)
		if c.URL != "" {
			// Each HTTP sender holds one keep-alive connection and waits
			// for its answer; loopback round trips need more in flight.
			c.Concurrency = 32
		}
	}
	return c, nil
}

// checkLoopbackURL parses raw and requires an http URL whose host is a
// loopback IP literal or "localhost". The dialer checks the resolved
// address again (see newHTTPTarget), so a name cannot sneak past this.
func checkLoopbackURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalid("URL %q: %v", raw, err)
	}
	if u.Scheme != "http" {
		return nil, invalid("URL %q: scheme must be http, got %q", raw, u.Scheme)
	}
	host := u.Hostname()
	if host == "localhost" {
		return u, nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("loadgen: URL %q: host %q: %w (use 127.0.0.1, [::1] or localhost): %w", raw, host, ErrNonLoopback, ErrInvalidConfig)
	}
	return u, nil
}
