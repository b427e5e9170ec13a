// Command loadgen load-tests a slidelimit limiter (in process, or a
// gateway on loopback) and prints a verdict against the service-level
// objectives: P99 < 2 ms, GC pause p99 < 5 ms, heap growth < 5 %.
//
// The verdict is printed first, then the figures and the table of checks:
// PASS (every objective met), FAIL (the limiter missed an objective),
// INCONCLUSIVE (only machine-dependent figures missed, latency, GC pause or
// rate, while the process was starved of CPU: scheduler latency, a
// generator behind its schedule while idle, GC stop-the-world spent
// stopping, CPU steal, a load average far above the CPUs; the verdict
// says which, and that the limiter's own service time is the figure to
// trust), or INCOMPLETE (interrupted).
//
// Exit status: 0 PASS; 1 FAIL; 2 bad flags; 3 the run could not be done or
// its report not written; 4 INCONCLUSIVE; 130 interrupted (Ctrl-C) before
// the end with no objective missed so far.
//
// Usage:
//
//	loadgen [flags]
//
// Run loadgen -h for the flags. The default scenario is open loop at the
// default rate for 20 s after a 12 s warm-up, 1 M keys drawn from
// Zipf(1.1), SlidingCounter with 100 requests per second per key.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/loadgen"
	"github.com/slidelimit/slidelimit/pprof"
)

const (
	exitPass         = 0
	exitFail         = 1
	exitUsage        = 2
	exitError        = 3
	exitInconclusive = 4
	exitInterrupted  = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a bad flag or an impossible combination: one line on
// stderr, exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// options are the parsed flags that are not part of loadgen.Config.
type options struct {
	out        string
	md         string
	note       string
	pprofAddr  string
	pprofAllow bool
}

func parse(args []string, stderr io.Writer) (loadgen.Config, options, error) {
	cfg := loadgen.DefaultConfig()
	var o options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		mode    = fs.String("mode", "open", "open (fixed arrival rate, latency from each request's intended start) or closed (workers as fast as they can)")
		dist    = fs.String("dist", cfg.Dist.String(), "key distribution: uniform, zipf, hot, attack or mix (90% zipf, 5% hot, 5% attack)")
		algo    = fs.String("algo", cfg.Engine.Algorithm.String(), "in-process algorithm: log (exact), counter (approximate) or gcra (token bucket)")
		target  = fs.String("target", "", "empty: in-process; or a loopback URL, e.g. http://127.0.0.1:8080/, to drive a gateway over HTTP")
		maxKeys = fs.Int("max-keys", 0, "in-process engine MaxKeys (0: derived from the engine's memory bound)")
		sweep   = fs.Duration("sweep", 0, "in-process engine SweepInterval (0: the engine default)")
	)
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "open loop: target requests per second")
	fs.IntVar(&cfg.Concurrency, "c", 0, "senders (open loop) or workers (closed loop); 0: GOMAXPROCS in process, 32 over HTTP")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured steady state")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "load before measuring (not counted)")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "progress line and time-series interval")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "key space for uniform, zipf and mix")
	fs.Float64Var(&cfg.ZipfS, "zipf-s", cfg.ZipfS, "Zipf exponent (> 1) for zipf and mix")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the key streams")
	fs.IntVar(&cfg.Engine.Limit, "limit", cfg.Engine.Limit, "requests admitted per window per key (over HTTP: the gateway's limit, for the admitted-count check)")
	fs.DurationVar(&cfg.Engine.Window, "window", cfg.Engine.Window, "sliding window length (over HTTP: the gateway's window)")
	fs.StringVar(&cfg.KeyHeader, "header", cfg.KeyHeader, "HTTP header that carries the key")
	fs.DurationVar(&cfg.HTTPTimeout, "http-timeout", cfg.HTTPTimeout, "HTTP request timeout")
	fs.DurationVar(&cfg.Objectives.LatencyP99, "p99", cfg.Objectives.LatencyP99, "objective: latency P99 below this")
	fs.DurationVar(&cfg.Objectives.ServiceP99, "service-p99", cfg.Objectives.ServiceP99, "objective: the limiter's own service time (the call alone, in process) P99 below this")
	fs.DurationVar(&cfg.Objectives.GCPauseP99, "gc-p99", cfg.Objectives.GCPauseP99, "objective: GC pause p99 below this")
	fs.Float64Var(&cfg.Objectives.HeapGrowthPct, "heap-growth", cfg.Objectives.HeapGrowthPct, "objective: live heap growth over the steady state below this many percent")
	fs.Float64Var(&cfg.Objectives.MinRateShare, "min-rate-share", cfg.Objectives.MinRateShare, "open loop: the share of -rate that must be achieved")
	fs.StringVar(&o.out, "out", "out/loadgen", "directory for report.json and report.html (empty: write none)")
	fs.StringVar(&o.md, "md", "", "also write the figures as a markdown fragment to this file (for RESULTS.md)")
	fs.StringVar(&o.note, "note", "", "free text recorded in the reports, e.g. the engine version")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve pprof, trace and limiter stats on this address, e.g. 127.0.0.1:6060")
	fs.BoolVar(&o.pprofAllow, "pprof-allow-remote", false, "allow -pprof on a non-loopback address")
	quiet := fs.Bool("q", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return cfg, o, err
	}
	if fs.NArg() > 0 {
		return cfg, o, usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var err error
	if cfg.Mode, err = loadgen.ParseMode(*mode); err != nil {
		return cfg, o, usagef("-mode: %v", err)
	}
	if cfg.Dist, err = loadgen.ParseDistribution(*dist); err != nil {
		return cfg, o, usagef("-dist: %v", err)
	}
	if cfg.Engine.Algorithm, err = engine.ParseAlgorithm(*algo); err != nil {
		return cfg, o, usagef("-algo: %v", err)
	}
	if cfg.Mode == loadgen.ClosedLoop {
		if set["rate"] || set["min-rate-share"] {
			return cfg, o, usagef("-rate and -min-rate-share apply to -mode open only (closed loop sends as fast as it can)")
		}
		cfg.Rate = 0
	}
	if set["keys"] && (cfg.Dist == loadgen.HotKey || cfg.Dist == loadgen.Attack) {
		return cfg, o, usagef("-keys has no effect with -dist %s", cfg.Dist)
	}
	if set["zipf-s"] && cfg.Dist != loadgen.Zipf && cfg.Dist != loadgen.Mix {
		return cfg, o, usagef("-zipf-s applies to -dist zipf or mix, not %s", cfg.Dist)
	}
	if set["pprof-allow-remote"] && o.pprofAddr == "" {
		return cfg, o, usagef("-pprof-allow-remote needs -pprof")
	}
	if *target != "" {
		for _, f := range []string{"algo", "max-keys", "sweep"} {
			if set[f] {
				return cfg, o, usagef("-%s configures the in-process engine; with -target the gateway's configuration applies", f)
			}
		}
		cfg.URL = *target
		// The gateway's limit is only known when given explicitly.
		if !set["limit"] || !set["window"] {
			if set["limit"] || set["window"] {
				return cfg, o, usagef("with -target give both -limit and -window (the gateway's limit) or neither")
			}
			cfg.Engine = engine.Config{}
		} else {
			cfg.Engine.Algorithm = 0
		}
	} else {
		if set["header"] || set["http-timeout"] {
			return cfg, o, usagef("-header and -http-timeout need -target http://127.0.0.1:PORT/...")
		}
		cfg.Engine.MaxKeys = *maxKeys
		cfg.Engine.SweepInterval = *sweep
	}
	if !*quiet {
		cfg.Progress = os.Stdout
	}
	return cfg, o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitPass
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(stderr, "loadgen:", ue.msg)
		}
		// Otherwise the flag package has printed the error and the usage.
		return exitUsage
	}
	if cfg.Progress != nil {
		cfg.Progress = stdout
	}

	if cfg.URL == "" {
		l, err := engine.New(cfg.Engine)
		if err != nil {
			fmt.Fprintln(stderr, "loadgen:", err)
			return exitUsage
		}
		defer l.Close()
		cfg.Limiter = l
	}
	if o.pprofAddr != "" {
		po := pprof.Options{Addr: o.pprofAddr, AllowNonLoopback: o.pprofAllow}
		if cfg.Limiter != nil {
			po.Limiter = cfg.Limiter
		}
		srv, err := pprof.Start(po)
		if err != nil {
			fmt.Fprintln(stderr, "loadgen: -pprof:", err)
			return exitUsage
		}
		defer srv.Close()
		fmt.Fprintf(stdout, "debug server on http://%s/debug/pprof/ (limiter stats: /debug/limiter)\n", srv.Addr())
	}

	if cfg.Progress != nil {
		fmt.Fprintf(stdout, "loadgen: %v warm-up, then %v measured; one progress line per %v, then the verdict first and the figures after it\n", cfg.Warmup, cfg.Duration, cfg.Interval)
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		if errors.Is(err, loadgen.ErrInvalidConfig) || errors.Is(err, engine.ErrInvalidConfig) {
			return exitUsage
		}
		return exitError
	}
	res.Command = commandLine(args)
	res.Note = o.note
	if err := res.WriteVerdict(stdout); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return exitError
	}
	if o.out != "" {
		if err := writeReports(res, o.out); err != nil {
			fmt.Fprintln(stderr, "loadgen:", err)
			return exitError
		}
		fmt.Fprintf(stdout, "report: %s, %s\n", filepath.Join(o.out, "report.html"), filepath.Join(o.out, "report.json"))
	}
	if o.md != "" {
		if err := writeFile(o.md, res.WriteMarkdown); err != nil {
			fmt.Fprintln(stderr, "loadgen:", err)
			return exitError
		}
		fmt.Fprintf(stdout, "markdown: %s\n", o.md)
	}
	code := exitCode(res.Outcome)
	fmt.Fprintf(stdout, "loadgen: %s (exit status %d)\n", res.Outcome, code)
	return code
}

// exitCode is the exit status of an outcome.
func exitCode(o loadgen.Outcome) int {
	switch o {
	case loadgen.OutcomePass:
		return exitPass
	case loadgen.OutcomeInconclusive:
		return exitInconclusive
	case loadgen.OutcomeIncomplete:
		return exitInterrupted
	}
	return exitFail
}

func writeReports(r *loadgen.Result, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for name, write := range map[string]func(io.Writer) error{
		"report.json": r.WriteJSON,
		"report.html": r.WriteHTML,
	} {
		if err := writeFile(filepath.Join(dir, name), write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// commandLine renders the invocation for the reports, quoting arguments
// with spaces and leaving out -note (recorded separately).
func commandLine(args []string) string {
	parts := []string{"loadgen"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-note" || a == "--note" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-note=") || strings.HasPrefix(a, "--note=") {
			continue
		}
		if strings.ContainsAny(a, " \t\"'") {
			a = fmt.Sprintf("%q", a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
