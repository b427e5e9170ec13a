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

// ResultVersion is the version of the JSON layout of Result. Version 2
// added outcome, health, the checks' machine flag and steady.lateness.
const ResultVersion = 2

// Outcome is the verdict of a run.
type Outcome string

const (
	// OutcomePass: every counted check met its objective.
	OutcomePass Outcome = "PASS"
	// OutcomeFail: the limiter missed an objective: one of its own checks
	// (service time, admitted count, engine counters, errors, heap
	// growth), or a machine-dependent one (latency, GC pause, rate) while
	// the machine gave the process the CPU it needed.
	OutcomeFail Outcome = "FAIL"
	// OutcomeInconclusive: only machine-dependent checks missed, and the process
	// was starved (see Health): the misses measure the machine, not the
	// limiter. The limiter's own checks, which held, are the figures to
	// trust.
	OutcomeInconclusive Outcome = "INCONCLUSIVE"
	// OutcomeIncomplete: the run was interrupted before its end with no objective
	// missed so far.
	OutcomeIncomplete Outcome = "INCOMPLETE"
)

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
	Health      Health       `json:"health"`
	Verdict     []Check      `json:"verdict"`
	Outcome     Outcome      `json:"outcome"`
	Pass        bool         `json:"pass"` // Outcome is OutcomePass: every counted check passed (and the run was not interrupted)
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
	// Lateness (open loop) is how late each request started after its
	// intended start: the generator's own delay, Latency less Service.
	Lateness Latency `json:"lateness"`
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
	// Machine marks a figure that depends on the CPU the process got
	// (latency from the intended start, GC pause, achieved rate): on a
	// starved machine its miss makes the run Inconclusive, not Fail.
	Machine bool   `json:"machine,omitempty"`
	Note    string `json:"note,omitempty"`
}

// result is the check's RESULT column: PASS, FAIL, info, or STARVED for a
// machine-dependent miss on a starved machine (it does not decide the
// verdict against the limiter).
func (c Check) result(starved bool) string {
	switch {
	case !c.Counted:
		return "info"
	case c.Pass:
		return "PASS"
	case c.Machine && starved:
		return "STARVED"
	}
	return "FAIL"
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

// verdictText is the verdict in words, rendered first in the console and
// at the top of the HTML report.
type verdictText struct {
	Outcome Outcome
	Summary string   // one sentence after the outcome
	Why     []string // the starvation signals, when they matter
	Trust   []string // the figures that hold on this machine
	Notes   []string
}

// words builds the verdict in words from the checks and the health.
func (r *Result) words() verdictText {
	v := verdictText{Outcome: r.Outcome}
	if v.Outcome == "" { // a Result built by hand (tests)
		v.Outcome = decide(r.Verdict, r.Health, r.Interrupted)
	}
	h := r.Health
	var limiterMiss, machineMiss, held []string
	for _, c := range r.Verdict {
		if !c.Counted {
			continue
		}
		fig := fmt.Sprintf("%s %s [objective %s]", c.Name, c.Measured, c.Objective)
		switch {
		case c.Pass && !c.Machine:
			held = append(held, fmt.Sprintf("%s: %s", c.Name, c.Measured))
		case c.Pass:
		case c.Machine:
			machineMiss = append(machineMiss, fig)
		default:
			limiterMiss = append(limiterMiss, fig)
		}
	}
	switch v.Outcome {
	case OutcomePass:
		v.Summary = "every objective was met"
		if h.Starved {
			v.Notes = append(v.Notes, "the machine was busy (see below) and the objectives held all the same")
			v.Why = h.Reasons
		}
	case OutcomeIncomplete:
		v.Summary = fmt.Sprintf("interrupted after %.1fs of steady state; no objective missed so far", r.Steady.DurationS)
	case OutcomeInconclusive:
		v.Summary = "this process did not get the CPU it needed, so " + strings.Join(machineMiss, ", ") +
			" measured the machine, not the limiter"
		v.Why = h.Reasons
		v.Trust = held
		v.Notes = append(v.Notes, "for a latency verdict, rerun on a quiet machine (no other busy processes)")
	case OutcomeFail:
		if len(limiterMiss) > 0 {
			v.Summary = "the limiter missed " + strings.Join(limiterMiss, ", ")
			if h.Starved {
				v.Notes = append(v.Notes, "the machine was starved too (busy, above), but the limiter's own figures do not depend on it")
				v.Why = h.Reasons
			}
			if len(machineMiss) > 0 && h.Starved {
				v.Notes = append(v.Notes, "also missed, measuring the starved machine: "+strings.Join(machineMiss, ", "))
			} else if len(machineMiss) > 0 {
				v.Notes = append(v.Notes, "also missed: "+strings.Join(machineMiss, ", "))
			}
		} else {
			v.Summary = "missed " + strings.Join(machineMiss, ", ")
			v.Notes = append(v.Notes, "the process got the CPU it needed ("+h.calm()+"), so the miss is the limiter's or the load generator's, not the machine's")
		}
	}
	return v
}

// calm says, in a few figures, why the machine did not count as starved.
func (h Health) calm() string {
	parts := []string{"Go scheduler latency p99 " + FormatDuration(h.SchedLatencyP99Ns)}
	if h.LatenessP99Ns > 0 {
		parts = append(parts, "generator lateness p99 "+FormatDuration(h.LatenessP99Ns))
	}
	if h.Proc {
		parts = append(parts, fmt.Sprintf("load average %.1f on %d CPUs", h.Load1, h.CPUs))
	}
	return strings.Join(parts, ", ")
}

// figures is the one-line summary of the health readings.
func (h Health) figures() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Go scheduler latency p99 %s", FormatDuration(h.SchedLatencyP99Ns))
	if h.LatenessP99Ns > 0 {
		fmt.Fprintf(&b, ", generator lateness p99 %s (senders in calls %.0f%% of the time)", FormatDuration(h.LatenessP99Ns), 100*h.SenderBusyShare)
	}
	fmt.Fprintf(&b, ", GC stop-the-world p99 %s of which stopping %s", FormatDuration(h.GCPauseP99Ns), FormatDuration(h.GCStopP99Ns))
	if h.Proc {
		fmt.Fprintf(&b, ", CPU steal %.1f%%, CPUs idle %.0f%%, other processes' CPU %.0f%%, load average %.1f on %d CPUs",
			100*h.StealShare, 100*h.IdleShare, 100*h.OtherCPUShare, h.Load1, h.CPUs)
	}
	if h.CPUPressure >= 0 {
		fmt.Fprintf(&b, ", CPU pressure %.0f%%", 100*h.CPUPressure)
	}
	return b.String()
}

// WriteVerdict prints the verdict first (the outcome, why, which figures
// to trust), then the figures and the table of checks.
func (r *Result) WriteVerdict(w io.Writer) error {
	var b strings.Builder
	v := r.words()
	fmt.Fprintf(&b, "\nVERDICT: %s: %s\n", v.Outcome, v.Summary)
	label := "why:  "
	if v.Outcome != OutcomeInconclusive {
		label = "busy: "
	}
	for i, why := range v.Why {
		if i > 0 {
			label = "      "
		}
		fmt.Fprintf(&b, "  %s %s\n", label, why)
	}
	if len(v.Trust) > 0 {
		fmt.Fprintf(&b, "  trust: %s (the limiter's own figures: percentiles of the calls themselves, which waiting for a CPU between calls does not reach)\n", strings.Join(v.Trust, "; "))
	}
	for _, n := range v.Notes {
		fmt.Fprintf(&b, "  note:  %s\n", n)
	}

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
	fmt.Fprintf(&b, "health   %s\n", r.Health.figures())
	if s.FirstError != "" {
		fmt.Fprintf(&b, "first error: %s\n", s.FirstError)
	}
	// tabwriter sizes the columns to their longest cell, so a long
	// objective or measurement never pushes the RESULT column out of line.
	b.WriteByte('\n')
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tOBJECTIVE\tMEASURED\tRESULT\tNOTE")
	for _, c := range r.Verdict {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Objective, c.Measured, c.result(r.Health.Starved), c.Note)
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}
