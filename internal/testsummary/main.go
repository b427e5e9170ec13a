// Command testsummary keeps `make test` readable: it reads the event stream
// of `go test -json`, keeps the whole stream in a file, and prints only what
// a person needs: one line per package, the output of every failed test and
// every build failure, and at the end a summary of all the steps of the run
// (packages, tests passed, failed and skipped, why each skip happened,
// benchmarks run once, wall time).
//
//	go test -json ./... | testsummary stream -step unit -about "what it does" -o out/test/unit.jsonl
//	testsummary final -since 1700000000 out/test/*.jsonl
//
// stream never stays silent for long: when nothing was printed for -tick
// (10 s), it prints how long the step has run, how many packages are done
// and which package's tests are running and for how long (go test streams
// one package's events at a time), so a cold build or a slow package shows
// as progress.
//
// stream exits 1 when a test or a build failed, so the make step fails;
// final exits 1 when any step's stream holds a failure. Lines in the notes
// file (-notes) are printed in the summary: steps that could not run at all
// (no redis-server and no root to install it, no Go 1.24 toolchain) say so
// there, so a skip is never silent.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// event is one line of `go test -json` (cmd/test2json), including the
// build events that Go 1.24 added.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "stream":
		fs := flag.NewFlagSet("stream", flag.ExitOnError)
		out := fs.String("o", "", "file that receives the raw JSON stream (required)")
		step := fs.String("step", "", "name of this step, printed before its lines")
		about := fs.String("about", "", "what the step does and how long it usually takes, printed with its name")
		tick := fs.Duration("tick", 10*time.Second, "print a progress line after this long without output (0: never)")
		fs.Parse(os.Args[2:])
		if *out == "" {
			usage()
		}
		os.Exit(stream(os.Stdin, os.Stdout, *out, *step, *about, *tick))
	case "final":
		fs := flag.NewFlagSet("final", flag.ExitOnError)
		since := fs.Int64("since", 0, "unix time the run started (for the wall time)")
		notes := fs.String("notes", "", "file of lines to print as notes (missing file: none)")
		fs.Parse(os.Args[2:])
		os.Exit(final(os.Stdout, fs.Args(), *since, *notes))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testsummary stream -o FILE [-step NAME] [-about TEXT] [-tick DURATION] < go-test-json\n       testsummary final [-since UNIX] [-notes FILE] FILE...")
	os.Exit(2)
}

// result is what one stream (one step) held.
type result struct {
	step                 string
	packages, failedPkgs []string
	passed, failed, skip int
	benchmarks           int
	skips                map[string][]string // reason -> "pkg.Test"
	failures             []string            // "pkg.Test" or "pkg (build)"
	emptyPackages        int                 // packages with no test files
	pkgSeen              map[string]bool
	testOut              map[string][]string  // pkg/test -> output lines
	benchLine            map[string]string    // pkg/benchmark -> output not yet ended by a newline
	buildOut             map[string][]string  // import path -> build output
	pendingPkgOut        map[string][]string  // package-level output
	started              map[string]time.Time // package -> when its test binary started (stream only)
	printFailures        io.Writer
	printPackages        io.Writer
}

func newResult(step string) *result {
	return &result{
		step: step, skips: map[string][]string{}, pkgSeen: map[string]bool{},
		testOut: map[string][]string{}, benchLine: map[string]string{}, buildOut: map[string][]string{}, pendingPkgOut: map[string][]string{},
		started: map[string]time.Time{},
	}
}

// add folds one event in; when printing is on it prints package lines and
// failures as they complete.
func (r *result) add(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "start":
		r.started[e.Package] = time.Now()
	case "build-output":
		r.buildOut[e.ImportPath] = append(r.buildOut[e.ImportPath], e.Output)
	case "build-fail":
		r.failures = append(r.failures, e.ImportPath+" (build)")
		if r.printFailures != nil {
			fmt.Fprintf(r.printFailures, "BUILD FAIL %s\n%s", e.ImportPath, strings.Join(r.buildOut[e.ImportPath], ""))
		}
	case "output":
		if e.Test != "" {
			if strings.HasPrefix(e.Test, "Benchmark") {
				r.countBenchRows(key, e.Output)
			}
			r.testOut[key] = append(r.testOut[key], e.Output)
		} else {
			r.pendingPkgOut[e.Package] = append(r.pendingPkgOut[e.Package], e.Output)
		}
	case "pass", "fail", "skip":
		if e.Test == "" {
			r.packageDone(e)
			return
		}
		if strings.HasPrefix(e.Test, "Benchmark") {
			r.countBenchRows(key, "\n") // a row cut off by the end event
			delete(r.benchLine, key)
			switch e.Action {
			case "fail":
				r.testFailed(e, key)
			case "skip": // a skipped benchmark is a skip too, with its reason
				r.skip++
				reason := skipReason(r.testOut[key])
				r.skips[reason] = append(r.skips[reason], shortPkg(e.Package)+"."+e.Test)
			}
			delete(r.testOut, key)
			return
		}
		switch e.Action {
		case "pass":
			r.passed++
		case "fail":
			r.testFailed(e, key)
		case "skip":
			r.skip++
			reason := skipReason(r.testOut[key])
			r.skips[reason] = append(r.skips[reason], shortPkg(e.Package)+"."+e.Test)
		}
		delete(r.testOut, key)
	}
}

func (r *result) testFailed(e event, key string) {
	r.failed++
	name := shortPkg(e.Package) + "." + e.Test
	r.failures = append(r.failures, name)
	if r.printFailures != nil {
		fmt.Fprintf(r.printFailures, "--- FAIL %s\n%s", name, strings.Join(r.testOut[key], ""))
	}
}

func (r *result) packageDone(e event) {
	if r.pkgSeen[e.Package] {
		return
	}
	r.pkgSeen[e.Package] = true
	out := r.pendingPkgOut[e.Package]
	delete(r.pendingPkgOut, e.Package)
	noTests := false
	for _, l := range out {
		if strings.Contains(l, "[no test files]") {
			noTests = true
		}
	}
	switch {
	case e.Action == "fail":
		r.failedPkgs = append(r.failedPkgs, e.Package)
		if r.printFailures != nil {
			// Package-level output holds panics, timeouts and TestMain
			// failures that belong to no single test.
			fmt.Fprintf(r.printFailures, "FAIL %s\n%s", e.Package, strings.Join(tail(out, 40), ""))
		}
	case noTests:
		r.emptyPackages++
		return
	}
	r.packages = append(r.packages, e.Package)
	if r.printPackages != nil && e.Action != "fail" {
		fmt.Fprintf(r.printPackages, "ok   %-60s %6.2fs\n", e.Package, e.Elapsed)
	}
}

// countBenchRows counts the result rows in a benchmark's output. go test
// -json may split one row over several output events (the name in one,
// the figures in the next), so the text is put back together per benchmark
// and counted line by line.
func (r *result) countBenchRows(key, out string) {
	text := r.benchLine[key] + out
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			break
		}
		if benchRow(text[:i]) {
			r.benchmarks++
		}
		text = text[i+1:]
	}
	r.benchLine[key] = text
}

// skipReason is the last line a skipped test logged before "--- SKIP",
// without the file:line prefix: the argument of t.Skip.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if i := strings.Index(l, ": "); i > 0 && strings.Contains(l[:i], ".go:") {
			l = l[i+2:]
		}
		return l
	}
	return "(no reason given)"
}

// benchRow reports whether a line is a benchmark's result row
// ("BenchmarkX/a=1-2   1   314.0 ns/op"): one per leaf benchmark run.
func benchRow(line string) bool {
	f := strings.Fields(line)
	if len(f) < 3 || !strings.HasPrefix(f[0], "Benchmark") {
		return false
	}
	_, err := strconv.ParseUint(f[1], 10, 64)
	return err == nil
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/slidelimit/slidelimit/") }

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// stream copies stdin to the file and prints progress; it returns the exit
// status for make.
func stream(in io.Reader, stdout io.Writer, path, step, about string, tick time.Duration) int {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 2
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 2
	}
	defer f.Close()
	r := newResult(step)
	// The ticker prints from its own goroutine: every write to stdout and
	// every change of r happens under mu.
	w := &quietWriter{w: stdout, last: time.Now()}
	r.printFailures, r.printPackages = w, w
	if step != "" {
		if about != "" {
			fmt.Fprintf(w, "== %s: %s\n", step, about)
		} else {
			fmt.Fprintf(w, "== %s\n", step)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if tick > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.tick(stop, tick, r, time.Now())
		}()
	}
	parse(io.TeeReader(in, f), r, w, &w.mu)
	close(stop)
	wg.Wait()
	if r.failed > 0 || len(r.failedPkgs) > 0 || len(r.failures) > 0 {
		fmt.Fprintf(stdout, "== %s: FAILED (%d tests failed, %d packages failed)\n", step, r.failed, len(r.failedPkgs))
		return 1
	}
	return 0
}

// parse reads events; a line that is not JSON (the go command's own
// messages on stderr, merged in: downloads, a vet or setup error) is echoed
// so nothing is lost. Whether the step failed is go test's exit status
// (make runs the pipe with pipefail) or a fail event. mu, when not nil, is
// held while an event is folded in or a line echoed.
func parse(in io.Reader, r *result, echo io.Writer, mu *sync.Mutex) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if mu != nil {
			mu.Lock()
		}
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			if echo != nil && len(line) > 0 {
				fmt.Fprintf(echo, "%s\n", line)
			}
		} else {
			r.add(e)
		}
		if mu != nil {
			mu.Unlock()
		}
	}
}

// quietWriter is stream's stdout: it remembers when it last printed, so
// the ticker speaks only after a silence. Callers hold mu.
type quietWriter struct {
	mu   sync.Mutex
	w    io.Writer
	last time.Time
}

func (q *quietWriter) Write(p []byte) (int, error) {
	q.last = time.Now()
	return q.w.Write(p)
}

// tick prints a progress line whenever nothing was printed for every, until
// stop is closed.
func (q *quietWriter) tick(stop <-chan struct{}, every time.Duration, r *result, begin time.Time) {
	t := time.NewTicker(min(every/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			q.mu.Lock()
			if now.Sub(q.last) >= every {
				fmt.Fprintf(q, "   ... %s\n", r.waitingFor(now, begin))
			}
			q.mu.Unlock()
		}
	}
}

// waitingFor says what the step is doing: the packages whose tests are
// running (the longest first), as far as go test's event stream shows them.
func (r *result) waitingFor(now, begin time.Time) string {
	type run struct {
		pkg string
		d   time.Duration
	}
	var running []run
	for p, t := range r.started {
		if !r.pkgSeen[p] {
			running = append(running, run{shortPkg(p), now.Sub(t)})
		}
	}
	sort.Slice(running, func(i, j int) bool {
		if running[i].d != running[j].d {
			return running[i].d > running[j].d
		}
		return running[i].pkg < running[j].pkg
	})
	var b strings.Builder
	name := r.step
	if name == "" {
		name = "go test"
	}
	pkgs := "packages"
	if len(r.pkgSeen) == 1 {
		pkgs = "package"
	}
	fmt.Fprintf(&b, "%s still running (%s): %d %s done", name, now.Sub(begin).Round(time.Second), len(r.pkgSeen), pkgs)
	if len(running) == 0 {
		// go test streams one package's events at a time and holds the
		// others' until they finish, so nothing running in sight means
		// compiling, or tests whose output is held.
		b.WriteString(", compiling or running the next ones")
		return b.String()
	}
	b.WriteString(", tests running in ")
	for i, x := range running {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(running)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", x.pkg, x.d.Round(time.Second))
	}
	return b.String()
}

// final prints the summary of every step's stream.
func final(w io.Writer, files []string, since int64, notesPath string) int {
	var all []*result
	bad := false
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintln(w, "testsummary:", err)
			bad = true
			continue
		}
		r := newResult(strings.TrimSuffix(filepath.Base(p), filepath.Ext(p)))
		parse(f, r, nil, nil)
		f.Close()
		all = append(all, r)
	}
	fmt.Fprintln(w, "")
	fmt.Fprintln(w, "==================== make test summary ====================")
	var passed, failed, skipped, benches int
	pkgs := map[string]bool{}
	skips := map[string][]string{}
	var failures []string
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tpackages\tpassed\tfailed\tskipped\tbenchmark rows\t")
	for _, r := range all {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", r.step, len(r.packages), r.passed, r.failed, r.skip, r.benchmarks)
		passed += r.passed
		failed += r.failed
		skipped += r.skip
		benches += r.benchmarks
		for _, p := range r.packages {
			pkgs[p] = true
		}
		for reason, tests := range r.skips {
			for _, t := range tests {
				skips[reason] = append(skips[reason], r.step+": "+t)
			}
		}
		for _, f := range r.failures {
			failures = append(failures, r.step+": "+f)
		}
		for _, p := range r.failedPkgs {
			failures = append(failures, r.step+": package "+shortPkg(p))
		}
	}
	tw.Flush()
	if len(skips) > 0 {
		fmt.Fprintln(w, "\nSkipped tests, by reason:")
		reasons := make([]string, 0, len(skips))
		for k := range skips {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for _, reason := range reasons {
			tests := skips[reason]
			fmt.Fprintf(w, "  %d skipped: %s\n", len(tests), reason)
			show := tests
			if len(show) > 6 {
				show = show[:6]
			}
			fmt.Fprintf(w, "      %s", strings.Join(show, ", "))
			if len(tests) > len(show) {
				fmt.Fprintf(w, " and %d more", len(tests)-len(show))
			}
			fmt.Fprintln(w)
		}
	}
	if notesPath != "" {
		if b, err := os.ReadFile(notesPath); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			fmt.Fprintln(w, "\nNot run on this machine:")
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				fmt.Fprintln(w, "  "+l)
			}
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(w, "\nFailed:")
		for _, f := range failures {
			fmt.Fprintln(w, "  "+f)
		}
	}
	fmt.Fprintf(w, "\n%d distinct packages tested; raw output in %s\n", len(pkgs), dirOf(files))
	if since > 0 {
		fmt.Fprintf(w, "wall time %s\n", time.Since(time.Unix(since, 0)).Round(time.Second))
	}
	// The plain closing line (CI reads it): totals over every step. A
	// package that failed to build or failed outside any test counts as a
	// failure too, so the line never says 0 failed for a red run.
	failed = max(failed, len(failures))
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || len(failures) > 0 || bad {
		return 1
	}
	return 0
}

func dirOf(files []string) string {
	if len(files) == 0 {
		return "(none)"
	}
	return filepath.Dir(files[0])
}
