package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// testConfig is a short, low-rate run: tests check counts and fields,
// never timings.
func testConfig() Config {
	c := DefaultConfig()
	c.Rate = 2000
	c.Concurrency = 2
	c.Warmup = 100 * time.Millisecond
	c.Duration = 500 * time.Millisecond
	c.Interval = 100 * time.Millisecond
	c.Keys = 1000
	return c
}

func mustRun(t *testing.T, c Config) *Result {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func check(t *testing.T, r *Result, name string) Check {
	t.Helper()
	for _, c := range r.Verdict {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("verdict has no %q row: %+v", name, r.Verdict)
	return Check{}
}

func TestHotKeyAdmitsWithinBound(t *testing.T) {
	for _, algo := range engine.Algorithms() {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			c := testConfig()
			c.Dist = HotKey
			c.Engine = engine.Config{Algorithm: algo, Limit: 10, Window: 100 * time.Millisecond}
			r := mustRun(t, c)
			s := r.Steady
			if s.Sent == 0 || s.Sent != s.Allowed+s.Denied || s.Errors != 0 {
				t.Fatalf("sent %d, allowed %d, denied %d, errors %d: want sent = allowed + denied > 0", s.Sent, s.Allowed, s.Denied, s.Errors)
			}
			a := r.Admission
			if a.Check == "" || a.ExpectedMax == 0 {
				t.Fatalf("no admission bound for the hot key: %+v", a)
			}
			// The upper bound is a hard property of both algorithms.
			if s.Allowed > a.ExpectedMax {
				t.Errorf("allowed %d > bound %d over %.2fs", s.Allowed, a.ExpectedMax, s.DurationS)
			}
			if row := check(t, r, "admitted count"); row.Pass != a.OK || !row.Counted {
				t.Errorf("admitted-count row %+v disagrees with %+v", row, a)
			}
			if row := check(t, r, "engine stats agree"); !row.Pass {
				t.Errorf("engine stats disagree with the senders: %+v", row)
			}
			if r.Limiter == nil || r.Limiter.End.Keys != 1 {
				t.Errorf("limiter stats %+v, want one key tracked", r.Limiter)
			}
		})
	}
}

func TestAttackAdmitsEveryKey(t *testing.T) {
	c := testConfig()
	c.Mode, c.Rate = ClosedLoop, 0
	c.Warmup, c.Duration = 0, 300*time.Millisecond
	c.Dist = Attack
	r := mustRun(t, c)
	s := r.Steady
	if s.Sent == 0 || s.Allowed != s.Sent || s.Denied != 0 {
		t.Fatalf("sent %d, allowed %d, denied %d: every never-seen key must be admitted", s.Sent, s.Allowed, s.Denied)
	}
	if !r.Admission.OK || r.Admission.ExpectedMax != s.Sent {
		t.Errorf("admission %+v", r.Admission)
	}
	// Without warm-up the engine saw exactly the steady requests.
	if got := r.Limiter.End.Allowed - r.Limiter.Start.Allowed; got != s.Allowed {
		t.Errorf("engine allowed %d, senders %d", got, s.Allowed)
	}
	if got := uint64(r.Limiter.End.Keys); got != s.Sent {
		t.Errorf("engine tracks %d keys after %d distinct attack keys", got, s.Sent)
	}
}

func TestJSONFields(t *testing.T) {
	c := testConfig()
	c.Dist = Mix
	r := mustRun(t, c)
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"version", "machine.num_cpu", "machine.go_version", "config.mode", "config.target_rate", "config.dist",
		"steady.duration_s", "steady.sent", "steady.allowed", "steady.denied", "steady.target_rate", "steady.achieved_rate",
		"steady.latency.p50_ns", "steady.latency.p90_ns", "steady.latency.p99_ns", "steady.latency.p999_ns", "steady.latency.max_ns",
		"gc.pause_p99_ns", "gc.pause_max_ns", "gc.cpu_share", "gc.heap_live_start_bytes", "gc.heap_live_end_bytes",
		"gc.heap_growth_pct", "gc.goroutines_start", "gc.goroutines_end", "limiter.end.Keys", "series", "percentiles", "verdict", "pass",
	} {
		var v any = m
		for _, k := range strings.Split(path, ".") {
			obj, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = obj[k]
		}
		if v == nil {
			t.Errorf("JSON has no %s", path)
		}
	}
	s := r.Steady
	if s.Sent != s.Allowed+s.Denied+s.Errors || s.Latency.Count != int64(s.Sent) {
		t.Errorf("sent %d, allowed %d, denied %d, errors %d, latencies %d", s.Sent, s.Allowed, s.Denied, s.Errors, s.Latency.Count)
	}
	if s.Latency.P50 > s.Latency.P99 || s.Latency.P99 > s.Latency.Max {
		t.Errorf("percentiles out of order: %+v", s.Latency)
	}
	var steadyPoints, warmPoints int
	for _, p := range r.Series {
		if p.Steady {
			steadyPoints++
		} else {
			warmPoints++
		}
	}
	if steadyPoints == 0 || warmPoints == 0 {
		t.Errorf("series has %d warm-up and %d steady points", warmPoints, steadyPoints)
	}
	if n := len(r.Percentiles); n < 2 || r.Percentiles[n-1].Q != 100 || r.Percentiles[n-1].Ns != s.Latency.Max {
		t.Errorf("percentile curve does not end at the maximum: %+v", r.Percentiles)
	}
}

func TestHTMLReportIsSelfContainedAndWellFormed(t *testing.T) {
	c := testConfig()
	c.Duration = 300 * time.Millisecond
	r := mustRun(t, c)
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	d := xml.NewDecoder(strings.NewReader(html))
	d.Strict = true
	svgs := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("report is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "svg":
				svgs++
			case "script", "link", "img", "iframe":
				t.Errorf("report loads or runs something: <%s>", se.Name.Local)
			}
			for _, a := range se.Attr {
				if a.Name.Local == "src" || a.Name.Local == "href" {
					t.Errorf("report references %s=%q", a.Name.Local, a.Value)
				}
			}
		}
	}
	if svgs != 2 {
		t.Errorf("report has %d charts, want 2", svgs)
	}
	if !strings.Contains(html, "latency p99") || !strings.Contains(html, "limiter service time p99") {
		t.Error("report has no verdict table, or the table lacks the limiter's service time")
	}
	// The verdict comes first: its banner precedes the table, the health
	// table and the charts.
	banner := strings.Index(html, `<div class="verdict `+strings.ToLower(string(r.Outcome))+`">`)
	if banner < 0 || banner > strings.Index(html, "<table") || banner > strings.Index(html, "<svg") {
		t.Errorf("the verdict banner (%s) is not the first thing in the report", r.Outcome)
	}
	if !strings.Contains(html, "Go scheduler latency p99") {
		t.Error("report has no machine health table")
	}
}

// Cancelling the context (Ctrl-C in the command) stops the run and still
// yields a result that says it is partial.
func TestCancelGivesPartialResult(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testConfig()
	c.Warmup = 0
	c.Duration = time.Hour
	c.Progress = writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
	r, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.Pass {
		t.Errorf("interrupted %v, pass %v: want an interrupted, not passing result", r.Interrupted, r.Pass)
	}
	if r.Steady.Sent == 0 || len(r.Verdict) == 0 {
		t.Errorf("no partial figures: %+v", r.Steady)
	}
}

func TestCancelDuringWarmup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := testConfig()
	c.Warmup = time.Hour
	c.Progress = writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
	r, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.Pass || r.Steady.Sent != 0 {
		t.Errorf("interrupted %v, pass %v, sent %d", r.Interrupted, r.Pass, r.Steady.Sent)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The HTTP target against a real server on loopback: 2xx is allowed, 429
// denied, anything else an error, and the key travels in the header.
func TestHTTPTarget(t *testing.T) {
	lim, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 5, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		key := r.Header.Get("X-Test-Key")
		if key == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !lim.Allow(key) {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	c := testConfig()
	c.Warmup, c.Duration = 0, 300*time.Millisecond
	c.Rate = 500
	c.Concurrency = 4
	c.Dist = HotKey
	c.URL = srv.URL + "/anything"
	c.KeyHeader = "X-Test-Key"
	c.Engine = engine.Config{Limit: 5, Window: time.Hour}
	r := mustRun(t, c)
	s := r.Steady
	if s.Errors != 0 || s.Allowed != 5 || s.Sent != uint64(served.Load()) || s.Denied != s.Sent-5 {
		t.Errorf("sent %d (served %d), allowed %d, denied %d, errors %d (%s): want 5 allowed", s.Sent, served.Load(), s.Allowed, s.Denied, s.Errors, s.FirstError)
	}
	if r.Limiter != nil {
		t.Error("HTTP run reports in-process limiter stats")
	}
	if row := check(t, r, "GC pause p99"); row.Counted {
		t.Error("over HTTP the generator's own GC must not decide the verdict")
	}

	c.KeyHeader = "X-Other"
	r = mustRun(t, c)
	if r.Steady.Errors == 0 || r.Steady.Errors != r.Steady.Sent || r.Pass {
		t.Errorf("400 answers: errors %d of %d, pass %v", r.Steady.Errors, r.Steady.Sent, r.Pass)
	}
}

func TestConfigValidation(t *testing.T) {
	lim, err := engine.New(engine.Config{Algorithm: engine.SlidingLog, Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want error
	}{
		{"open loop without rate", func(c *Config) { c.Rate = 0 }, ErrInvalidConfig},
		{"rate over the maximum", func(c *Config) { c.Rate = 1e9 }, ErrInvalidConfig},
		{"closed loop with rate", func(c *Config) { c.Mode = ClosedLoop }, ErrInvalidConfig},
		{"unknown mode", func(c *Config) { c.Mode = 9 }, ErrInvalidConfig},
		{"zero duration", func(c *Config) { c.Duration = 0 }, ErrInvalidConfig},
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, ErrInvalidConfig},
		{"tiny interval", func(c *Config) { c.Interval = time.Millisecond }, ErrInvalidConfig},
		{"no keys", func(c *Config) { c.Keys = 0 }, ErrInvalidConfig},
		{"zipf exponent 1", func(c *Config) { c.ZipfS = 1 }, ErrInvalidConfig},
		{"unknown distribution", func(c *Config) { c.Dist = 0 }, ErrInvalidConfig},
		{"negative concurrency", func(c *Config) { c.Concurrency = -1 }, ErrInvalidConfig},
		{"zero objective", func(c *Config) { c.Objectives.LatencyP99 = 0 }, ErrInvalidConfig},
		{"rate share above 1", func(c *Config) { c.Objectives.MinRateShare = 1.5 }, ErrInvalidConfig},
		{"remote target", func(c *Config) { c.URL = "http://192.0.2.1:8080/" }, ErrNonLoopback},
		{"remote name", func(c *Config) { c.URL = "http://example.com/" }, ErrNonLoopback},
		{"https target", func(c *Config) { c.URL = "https://127.0.0.1/" }, ErrInvalidConfig},
		{"URL and limiter", func(c *Config) { c.URL = "http://127.0.0.1:1/"; c.Limiter = lim }, ErrInvalidConfig},
		{"bad engine config", func(c *Config) { c.Engine.Limit = 0 }, engine.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			tc.edit(&c)
			_, err := Run(context.Background(), c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
		})
	}
	for _, ok := range []string{"http://127.0.0.1:8080/x", "http://[::1]:80/", "http://localhost:1/"} {
		if _, err := checkLoopbackURL(ok); err != nil {
			t.Errorf("checkLoopbackURL(%q) = %v", ok, err)
		}
	}
}

func TestKeyStreams(t *testing.T) {
	space := newKeySpace(1000)
	if got := space.key(7); got != "k007" {
		t.Errorf("key(7) = %q", got)
	}
	c := testConfig()
	c.Keys = 1000
	for _, d := range []Distribution{Uniform, Zipf, HotKey, Attack, Mix} {
		c.Dist = d
		g0, g1 := newKeyGen(c, space, 0), newKeyGen(c, space, 1)
		seen := map[string]bool{}
		for range 2000 {
			for _, k := range []string{g0.next(), g1.next()} {
				if d == Attack && seen[k] {
					t.Fatalf("attack key %q repeated", k)
				}
				seen[k] = true
				if (d == Uniform || d == Zipf) && (len(k) != 4 || k[0] != 'k') {
					t.Fatalf("%s key %q outside the key space", d, k)
				}
			}
		}
		switch d {
		case HotKey:
			if len(seen) != 1 {
				t.Errorf("hot: %d keys", len(seen))
			}
		case Zipf:
			// Rank 0 has probability about 1/H(1000, 1.1) > 10 %.
			if len(seen) >= 1000 {
				t.Errorf("zipf drew %d distinct keys of 1000 in 4000 draws", len(seen))
			}
		}
	}
}

func TestPauseStats(t *testing.T) {
	before := readRuntime().pauses
	after := *before
	after.Counts = append([]uint64(nil), before.Counts...)
	// 99 short pauses in the first non-empty bucket above 0 and one long.
	i := 1
	for after.Buckets[i] < 1e-5 {
		i++
	}
	j := i
	for after.Buckets[j] < 1e-2 {
		j++
	}
	after.Counts[i] += 99
	after.Counts[j]++
	n, p99, mx := pauseStats(before, &after)
	if n != 100 {
		t.Fatalf("count %d", n)
	}
	if p99 != time.Duration(after.Buckets[i+1]*1e9) || mx != time.Duration(after.Buckets[j+1]*1e9) {
		t.Errorf("p99 %v max %v, want %v and %v", p99, mx, time.Duration(after.Buckets[i+1]*1e9), time.Duration(after.Buckets[j+1]*1e9))
	}
}
