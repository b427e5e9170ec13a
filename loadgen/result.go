package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/slidelimit/slidelimit/engine"
)

// ResultVersion is the version of the JSON layout of Result.
const ResultVersion = 1

// Result is everything a run measured; it is written as JSON for scripts
// and rendered as the verdict table and the HTML report.
type Result struct {
	Version     int          `json:"version"`
	Command     string       `json:"command,omitempty"` // set by the caller (the command line that ran)
	Note        string       `json:"note,omitempty"`    // set by the caller (e.g. the engine version)
	StartedAt   time.Time    `json:"started_at"`
	Machine     Machine      `json:"machine"`
	Config      ConfigInfo   `json:"config"`
	Interrupted bool         `json:"interrupted"` // stopped early (Ctrl-C): figures cover the part that ran
	Steady      Steady       `json:"steady"`
	GC          GCInfo       `json:"gc"`
	Limiter     *LimiterInfo `json:"limiter,omitempty"` // in-process target only
	Admission   Admission    `json:"admission"`
	Series      []Point      `json:"series"`      // one point per interval, warm-up included
	Percentiles []Quantile   `json:"percentiles"` // the steady-state latency percentile curve
	Verdict     []Check      `json:"verdict"`
	Pass        bool         `json:"pass"` // every counted check passed (and the run was not interrupted)
}

// Machine describes where the run happened.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPU        string `json:"cpu,omitempty"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
}

// ConfigInfo is the run's configuration as it was applied.
type ConfigInfo struct {
	Mode          string  `json:"mode"`
	TargetRate    float64 `json:"target_rate,omitempty"` // open loop, requests/s
	Concurrency   int     `json:"concurrency"`
	WarmupS       float64 `json:"warmup_s"`
	DurationS     float64 `json:"duration_s"`
	Dist          string  `json:"dist"`
	Keys          int     `json:"keys,omitempty"`
	ZipfS         float64 `json:"zipf_s,omitempty"`
	Seed          uint64  `json:"seed"`
	Target        string  `json:"target"` // "in-process" or the URL
	Algorithm     string  `json:"algorithm,omitempty"`
	Limit         int     `json:"limit,omitempty"`
	WindowS       float64 `json:"window_s,omitempty"`
	ObjP99Ns      int64   `json:"objective_p99_ns"`
	ObjGCP99Ns    int64   `json:"objective_gc_pause_p99_ns"`
	ObjHeapGrowth float64 `json:"objective_heap_growth_pct"`
	ObjRateShare  float64 `json:"objective_min_rate_share"`
}

// Latency is a latency distribution in nanoseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   int64   `json:"p50_ns"`
	P90   int64   `json:"p90_ns"`
	P99   int64   `json:"p99_ns"`
	P999  int64   `json:"p999_ns"`
	Max   int64   `json:"max_ns"`
	Mean  float64 `json:"mean_ns"`
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	return Latency{
		Count: h.TotalCount(),
		P50:   h.ValueAtQuantile(50),
		P90:   h.ValueAtQuantile(90),
		P99:   h.ValueAtQuantile(99),
		P999:  h.ValueAtQuantile(99.9),
		Max:   h.Max(),
		Mean:  h.Mean(),
	}
}

// Steady is the measured steady state (after warm-up).
type Steady struct {
	DurationS    float64 `json:"duration_s"`
	Sent         uint64  `json:"sent"` // requests that got an answer or an error
	Allowed      uint64  `json:"allowed"`
	Denied       uint64  `json:"denied"`
	Errors       uint64  `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	TargetRate   float64 `json:"target_rate,omitempty"` // open loop
	AchievedRate float64 `json:"achieved_rate"`
	// Latency is measured from the intended start time in open loop (so it
	// includes any time the request waited for the generator), from the
	// call in closed loop. Service is the call alone.
	Latency Latency `json:"latency"`
	Service Latency `json:"service"`
	// Clamped counts latencies above the histogram's 60 s range.
	Clamped uint64 `json:"clamped,omitempty"`
}

// GCInfo is the garbage collector's behaviour during the steady state,
// from runtime/metrics. In HTTP mode it describes the load generator's
// own process, not the gateway's.
type GCInfo struct {
	Cycles          uint64  `json:"cycles"`
	Pauses          uint64  `json:"pauses"`
	PauseP99Ns      int64   `json:"pause_p99_ns"` // bucket upper bound
	PauseMaxNs      int64   `json:"pause_max_ns"` // bucket upper bound
	CPUShare        float64 `json:"cpu_share"`    // GC CPU / available CPU (GOMAXPROCS x wall)
	HeapLiveStart   uint64  `json:"heap_live_start_bytes"`
	HeapLiveEnd     uint64  `json:"heap_live_end_bytes"`
	HeapGrowthPct   float64 `json:"heap_growth_pct"`
	MemTotalStart   uint64  `json:"mem_total_start_bytes"` // all memory mapped by the Go runtime
	MemTotalEnd     uint64  `json:"mem_total_end_bytes"`
	GoroutinesStart uint64  `json:"goroutines_start"`
	GoroutinesEnd   uint64  `json:"goroutines_end"`
}

// LimiterInfo is the engine's own view, from Limiter.Stats at the start and
// the end of the steady state.
type LimiterInfo struct {
	Start engine.Stats `json:"start"`
	End   engine.Stats `json:"end"`
}

// Admission compares the admitted count with what the limit should admit.
type Admission struct {
	Check       string  `json:"check,omitempty"` // what was checked; empty: no closed-form bound for this key stream
	Expected    float64 `json:"expected,omitempty"`
	ExpectedMin uint64  `json:"expected_min,omitempty"`
	ExpectedMax uint64  `json:"expected_max,omitempty"`
	Allowed     uint64  `json:"allowed"`
	OK          bool    `json:"ok"`
	Note        string  `json:"note,omitempty"`
}

// Point is one interval of the time series.
type Point struct {
	TS      float64 `json:"t_s"` // end of the interval, seconds since the start of the run
	Steady  bool    `json:"steady"`
	Rate    float64 `json:"rate"`
	Allowed uint64  `json:"allowed"`
	Denied  uint64  `json:"denied"`
	Errors  uint64  `json:"errors"`
	P50     int64   `json:"p50_ns"`
	P90     int64   `json:"p90_ns"`
	P99     int64   `json:"p99_ns"`
	P999    int64   `json:"p999_ns"`
	Max     int64   `json:"max_ns"`
	Heap    uint64  `json:"heap_objects_bytes"`
	GCs     uint64  `json:"gc_cycles"`
}

// Quantile is one point of the percentile curve.
type Quantile struct {
	Q  float64 `json:"q"` // percentile, 0..100
	Ns int64   `json:"ns"`
}

// Check is one row of the verdict.
type Check struct {
	Name      string `json:"name"`
	Objective string `json:"objective"`
	Measured  string `json:"measured"`
	Pass      bool   `json:"pass"`
	Counted   bool   `json:"counted"` // false: informational, does not decide the verdict
	Note      string `json:"note,omitempty"`
}

func machineInfo() Machine {
	return Machine{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPU: cpuModel(),
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
	}
}

// cpuModel reads the CPU model name on Linux; empty elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// FormatDuration prints ns with a unit that keeps 3-4 significant digits.
func FormatDuration(ns int64) string {
	d := float64(ns)
	switch {
	case d < 1e3:
		return fmt.Sprintf("%dns", ns)
	case d < 1e6:
		return fmt.Sprintf("%.1fµs", d/1e3)
	case d < 1e9:
		return fmt.Sprintf("%.2fms", d/1e6)
	}
	return fmt.Sprintf("%.2fs", d/1e9)
}

func formatBytes(b uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func formatRate(r float64) string {
	if r >= 1e3 {
		return fmt.Sprintf("%.1fk/s", r/1e3)
	}
	return fmt.Sprintf("%.0f/s", r)
}

// WriteVerdict prints the verdict table and a summary of the figures.
func (r *Result) WriteVerdict(w io.Writer) error {
	var b strings.Builder
	s := r.Steady
	fmt.Fprintf(&b, "\nslidelimit load test: %s loop, %s keys, target %s", r.Config.Mode, r.Config.Dist, r.Config.Target)
	if r.Config.Algorithm != "" {
		fmt.Fprintf(&b, ", %s limit %d per %gs", r.Config.Algorithm, r.Config.Limit, r.Config.WindowS)
	}
	fmt.Fprintf(&b, "\nmachine: %s/%s, %d CPU (GOMAXPROCS %d) %s, %s\n", r.Machine.GOOS, r.Machine.GOARCH, r.Machine.NumCPU, r.Machine.GOMAXPROCS, r.Machine.CPU, r.Machine.GoVersion)
	if r.Interrupted {
		fmt.Fprintf(&b, "INTERRUPTED: partial results over %.1fs of steady state\n", s.DurationS)
	}
	fmt.Fprintf(&b, "steady state %.1fs: sent %d (allowed %d, denied %d, errors %d)", s.DurationS, s.Sent, s.Allowed, s.Denied, s.Errors)
	if s.TargetRate > 0 {
		fmt.Fprintf(&b, ", rate %s of %s target\n", formatRate(s.AchievedRate), formatRate(s.TargetRate))
	} else {
		fmt.Fprintf(&b, ", rate %s\n", formatRate(s.AchievedRate))
	}
	l := s.Latency
	fmt.Fprintf(&b, "latency  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.P999), FormatDuration(l.Max))
	if s.Service.Count > 0 && r.Config.Mode == OpenLoop.String() {
		v := s.Service
		fmt.Fprintf(&b, "service  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (the call alone)\n", FormatDuration(v.P50), FormatDuration(v.P90), FormatDuration(v.P99), FormatDuration(v.P999), FormatDuration(v.Max))
	}
	g := r.GC
	fmt.Fprintf(&b, "gc       %d cycles, %d pauses, pause p99 %s max %s, GC CPU %.2f%%, live heap %s -> %s, goroutines %d -> %d\n",
		g.Cycles, g.Pauses, FormatDuration(g.PauseP99Ns), FormatDuration(g.PauseMaxNs), 100*g.CPUShare,
		formatBytes(g.HeapLiveStart), formatBytes(g.HeapLiveEnd), g.GoroutinesStart, g.GoroutinesEnd)
	if s.FirstError != "" {
		fmt.Fprintf(&b, "first error: %s\n", s.FirstError)
	}
	// tabwriter sizes the columns to their longest cell, so a long
	// objective or measurement never pushes the RESULT column out of line.
	b.WriteByte('\n')
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tOBJECTIVE\tMEASURED\tRESULT\tNOTE")
	for _, c := range r.Verdict {
		res := "PASS"
		if !c.Pass {
			res = "FAIL"
		}
		if !c.Counted {
			res = "info"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Objective, c.Measured, res, c.Note)
	}
	tw.Flush()
	switch {
	case r.Pass:
		b.WriteString("\nVERDICT: PASS\n")
	case r.Interrupted:
		b.WriteString("\nVERDICT: INCOMPLETE (interrupted)\n")
	default:
		b.WriteString("\nVERDICT: FAIL\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
