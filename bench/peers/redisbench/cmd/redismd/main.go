// Command redismd turns the output of the redisbench benchmarks into the
// markdown fragment that RESULTS.md includes (out/results-fragments/redis.md):
// one row per implementation and mode, the median of the -count runs.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

type row struct {
	name    string
	metrics map[string][]float64
}

func main() {
	in := flag.String("in", "out/bench/redis.txt", "benchmark output")
	out := flag.String("o", "out/results-fragments/redis.md", "markdown fragment to write")
	cmd := flag.String("cmd", "make bench-redis", "the command that produced the input, quoted in the fragment")
	flag.Parse()
	if err := run(*in, *out, *cmd); err != nil {
		fmt.Fprintln(os.Stderr, "redismd:", err)
		os.Exit(1)
	}
}

func run(in, out, cmd string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var rows []*row
	byName := map[string]*row{}
	cpu := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			cpu = strings.TrimSpace(v)
		}
		name, ok := strings.CutPrefix(line, "BenchmarkRedis/")
		if !ok {
			continue
		}
		fields := strings.Fields(name)
		if len(fields) < 4 {
			continue
		}
		r := byName[fields[0]]
		if r == nil {
			r = &row{name: fields[0], metrics: map[string][]float64{}}
			byName[fields[0]] = r
			rows = append(rows, r)
		}
		// fields: name, iterations, then value/unit pairs.
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err == nil {
				r.metrics[fields[i+1]] = append(r.metrics[fields[i+1]], v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("no BenchmarkRedis lines in %s", in)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Global limits: Redis backend and hybrid mode\n\n")
	fmt.Fprintf(&b, "One local redis-server (%s) on 127.0.0.1, started by the benchmark; 100 keys in turn, Limit 1000 per 1 s window. ", redisVersion())
	fmt.Fprintf(&b, "Every run of the benchmark runs every implementation in turn, so the %d runs interleave them (ours, redis_rate, ours, ...) and a noisy neighbour hits all alike; figures are medians of the runs. ", runs(rows))
	fmt.Fprintf(&b, "p99 is one decision's latency, client + loopback + server on the same machine; srv µs is the server's own time per decision and script µs the scripts' usec_per_call, both from INFO commandstats; client µs is the benchmark process's CPU time per decision (getrusage: the limiter, go-redis and the Go runtime) and srv CPU µs the server process's (INFO cpu, its socket work included): the two share the cores, and CPU time moves less than wall time with a noisy neighbour. ")
	fmt.Fprintf(&b, "`-N` is GOMAXPROCS. The round-trip designs stay under the limit here (all admitted); the hybrid decides faster than the limit and denies the excess in memory (see allowed %%).\n\n")
	fmt.Fprintf(&b, "Machine: %s, %s, %d CPUs. Command: `%s`\n\n", cpu, runtime.Version(), runtime.NumCPU(), cmd)
	fmt.Fprintf(&b, "| implementation / mode | decisions/s | p99 (µs) | allowed %% | admitted/s | allocs/op | srv µs/decision | script µs/call | client µs/decision | srv CPU µs/decision |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name,
			num(median(r.metrics["decisions/s"]), 0), num(median(r.metrics["p99-µs"]), 2),
			num(median(r.metrics["allowed-%"]), 1), num(median(r.metrics["admitted/s"]), 0), num(median(r.metrics["allocs/op"]), 0),
			num(median(r.metrics["srv-µs/decision"]), 2), num(median(r.metrics["script-µs/call"]), 2),
			num(median(r.metrics["client-µs/decision"]), 2), num(median(r.metrics["srv-cpu-µs/decision"]), 2))
	}
	b.WriteString("\nours = redisstore.Store (one Lua script per decision; ours-gcra with the same rate and burst as redis_rate); redis_rate = github.com/go-redis/redis_rate/v10 (GCRA); zset-multi = the MULTI pipeline ZSET log (ZREMRANGEBYSCORE, ZADD, ZCARD, EXPIRE in one MULTI), the textbook Redis sliding log; hybrid = redisstore.Hybrid (leases renewed every 5 ms in pipelined batches).\n")
	writeRatios(&b, byName)
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// runs is the number of runs of the first row (every row has as many).
func runs(rows []*row) int { return len(rows[0].metrics["decisions/s"]) }

// writeRatios compares ours with redis_rate mode by mode: decisions/s and
// server time as ratios of the medians, allocations side by side.
func writeRatios(b *strings.Builder, byName map[string]*row) {
	fmt.Fprintf(b, "\n### Ours vs redis_rate\n\n")
	fmt.Fprintf(b, "Ratios of the medians above, same runs: decisions/s ours / redis_rate (above 1: ours decides faster), server µs per decision ours / redis_rate (below 1: ours costs the server less). The ranges are the decisions/s ratios run by run (each run measures both within seconds), which shows how far the shared machine's noise moves a single run.\n\n")
	fmt.Fprintf(b, "GCRA is the like-for-like comparison (redis_rate is GCRA too, with the same rate and burst); the sliding windows do more per decision.\n\n")
	fmt.Fprintf(b, "| mode | gcra decisions/s | counter decisions/s | log decisions/s | gcra per run | counter per run | log per run | gcra srv µs | counter srv µs | log srv µs | allocs/op gcra, counter, log, redis_rate |\n|---|---:|---:|---:|---|---|---|---:|---:|---:|---|\n")
	var modes []string
	for name := range byName {
		if m, ok := strings.CutPrefix(name, "redis_rate/"); ok {
			modes = append(modes, m)
		}
	}
	slices.Sort(modes)
	for _, m := range modes {
		rr, g, c, l := byName["redis_rate/"+m], byName["ours-gcra/"+m], byName["ours-counter/"+m], byName["ours-log/"+m]
		if c == nil || l == nil {
			continue
		}
		ratio := func(r *row, metric string) string {
			if r == nil {
				return "–"
			}
			return num(median(r.metrics[metric])/median(rr.metrics[metric]), 2)
		}
		runs := func(r *row) string {
			if r == nil {
				return "–"
			}
			return perRun(r, rr)
		}
		allocs := func(r *row) string {
			if r == nil {
				return "–"
			}
			return num(median(r.metrics["allocs/op"]), 0)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s, %s, %s |\n", m,
			ratio(g, "decisions/s"), ratio(c, "decisions/s"), ratio(l, "decisions/s"), runs(g), runs(c), runs(l),
			ratio(g, "srv-µs/decision"), ratio(c, "srv-µs/decision"), ratio(l, "srv-µs/decision"),
			allocs(g), allocs(c), allocs(l), allocs(rr))
	}
}

// perRun is the range of ours/redis_rate decisions/s over the runs, pairing
// the i-th result of each (both from the i-th run of the benchmark).
func perRun(ours, rr *row) string {
	a, b := ours.metrics["decisions/s"], rr.metrics["decisions/s"]
	lo, hi := -1.0, -1.0
	for i := range min(len(a), len(b)) {
		r := a[i] / b[i]
		if lo < 0 || r < lo {
			lo = r
		}
		if r > hi {
			hi = r
		}
	}
	return num(lo, 2) + "–" + num(hi, 2)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return -1
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64, prec int) string {
	if v < 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func redisVersion() string {
	b, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server"
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "redis-server " + v
		}
	}
	return strings.TrimSpace(string(b))
}
