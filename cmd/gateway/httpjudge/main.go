// Command httpjudge judges a `make run-http` run on objectives that
// measure the gateway itself, not the machine it shares.
//
// `httpjudge probe -direct URL -gateway URL -out probe.json` sends requests
// one at a time, alternately straight to the upstream and through the
// gateway, and records each call's service time (from sending it to the
// end of its body) and the difference within each pair.
//
// `httpjudge -direct report.json -gateway report.json -metrics M -probe
// probe.json` reads two load generator reports (one run straight against
// the upstream, one through the gateway, same rate and keys), the
// gateway's Prometheus /metrics and the probe, and checks:
//
//   - decision p99: the middleware's own time per request (key function
//     and limiter, from slidelimit_gateway_decision_seconds; a histogram
//     bucket's upper bound, so the figure is an upper bound);
//   - added latency p50: the median, over the probe's pairs, of the
//     gateway's service time minus the upstream's. Interleaving puts both
//     requests of a pair under the same machine conditions; service times
//     hold no load-generator backlog (latencies from each request's
//     intended start do: on a busy machine they measure the generator's
//     queue);
//   - errors through the gateway: none;
//   - rate sustained through the gateway: the load run completed between
//     99 % and 101 % of the target rate in its steady state. More than
//     101 % is not a pass: it means a backlog from the warm-up drained
//     inside the window, i.e. the generator had fallen behind.
//
// End-to-end figures of both load runs (latency from the intended start,
// service time, rate) are reported, not judged. Exit status: 0 every
// objective met; 1 one missed; 2 bad input; 3 inconclusive: the only miss
// is the rate through the gateway, and the generator could not sustain it
// straight to the upstream either (the machine, not the gateway, is the
// limit).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Exit statuses.
const (
	exitPass         = 0
	exitMissed       = 1
	exitBadInput     = 2
	exitInconclusive = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// report is the part of a loadgen report.json this reads.
type report struct {
	Config struct {
		Target string `json:"target"`
	} `json:"config"`
	Steady struct {
		Sent         uint64  `json:"sent"`
		Allowed      uint64  `json:"allowed"`
		Denied       uint64  `json:"denied"`
		Errors       uint64  `json:"errors"`
		TargetRate   float64 `json:"target_rate"`
		AchievedRate float64 `json:"achieved_rate"`
		Latency      latency `json:"latency"`
		Service      latency `json:"service"`
	} `json:"steady"`
	Pass bool `json:"pass"`
}

type latency struct {
	P50  int64 `json:"p50_ns"`
	P90  int64 `json:"p90_ns"`
	P99  int64 `json:"p99_ns"`
	P999 int64 `json:"p999_ns"`
}

// objectives are the targets judge checks.
type objectives struct {
	decisionP99, addedP50 time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		return runProbe(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("httpjudge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	direct := fs.String("direct", "", "loadgen report.json of the run against the upstream directly")
	through := fs.String("gateway", "", "loadgen report.json of the run through the gateway")
	metricsURL := fs.String("metrics", "", "the gateway's /metrics URL (or a file holding its text)")
	probePath := fs.String("probe", "", "the probe's JSON (httpjudge probe -out)")
	var obj objectives
	fs.DurationVar(&obj.decisionP99, "decision-p99", time.Millisecond, "objective: the middleware's own decision time p99 below this")
	fs.DurationVar(&obj.addedP50, "added-p50", 5*time.Millisecond, "objective: median service time the gateway adds per request (probe pairs) below this")
	if err := fs.Parse(args); err != nil {
		return exitBadInput
	}
	if *direct == "" || *through == "" || *metricsURL == "" || *probePath == "" {
		fmt.Fprintln(stderr, "httpjudge: -direct, -gateway, -metrics and -probe are required")
		return exitBadInput
	}
	d, err := readReport(*direct)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return exitBadInput
	}
	g, err := readReport(*through)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return exitBadInput
	}
	p, err := readProbe(*probePath)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return exitBadInput
	}
	text, err := readMetrics(*metricsURL)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return exitBadInput
	}
	h, err := parseHistogram(text, "slidelimit_gateway_decision_seconds")
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return exitBadInput
	}
	return judge(stdout, d, g, h, p, obj)
}

func readReport(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Steady.Sent == 0 {
		return nil, fmt.Errorf("%s: no request in the steady state", path)
	}
	return &r, nil
}

func readMetrics(src string) (string, error) {
	if !strings.HasPrefix(src, "http://") {
		b, err := os.ReadFile(src)
		return string(b), err
	}
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Get(src)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return "", fmt.Errorf("%s: %s", src, res.Status)
	}
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// histogram is a Prometheus histogram summed over its label sets:
// cumulative counts by upper bound.
type histogram struct {
	bounds []float64 // ascending, +Inf last
	counts []float64 // cumulative
	count  float64
}

// parseHistogram sums name's _bucket series over every label set other
// than le, from the Prometheus text exposition format.
func parseHistogram(text, name string) (histogram, error) {
	byLE := map[float64]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	prefix := name + "_bucket{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		labels, value, ok := strings.Cut(line[len(prefix):], "} ")
		if !ok {
			return histogram{}, fmt.Errorf("malformed line %q", line)
		}
		leStr, ok := labelValue(labels, "le")
		if !ok {
			return histogram{}, fmt.Errorf("bucket without le: %q", line)
		}
		le, err := strconv.ParseFloat(leStr, 64)
		if err != nil {
			return histogram{}, fmt.Errorf("le in %q: %w", line, err)
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return histogram{}, fmt.Errorf("value in %q: %w", line, err)
		}
		byLE[le] += v
	}
	if err := sc.Err(); err != nil {
		return histogram{}, err
	}
	if len(byLE) == 0 {
		return histogram{}, fmt.Errorf("no %s series in the metrics", name)
	}
	var h histogram
	for le := range byLE {
		h.bounds = append(h.bounds, le)
	}
	sort.Float64s(h.bounds)
	for _, le := range h.bounds {
		h.counts = append(h.counts, byLE[le])
	}
	h.count = h.counts[len(h.counts)-1]
	if h.count == 0 {
		return histogram{}, errors.New("the decision histogram is empty: did any request reach a rule?")
	}
	return h, nil
}

// labelValue finds name="value" in a label list. Rule names are
// [A-Za-z0-9_.-] and le values numbers, so no value holds a quote or a
// comma.
func labelValue(labels, name string) (string, bool) {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == name && len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			return v[1 : len(v)-1], true
		}
	}
	return "", false
}

// quantile is the upper bound of the bucket holding quantile q: an upper
// bound on the true value (+Inf if it lies past the last finite bucket).
func (h histogram) quantile(q float64) float64 {
	rank := q * h.count
	for i, c := range h.counts {
		if c >= rank {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

func secs(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return time.Duration(v * float64(time.Second)).String()
}

// onPace reports whether a load run completed its target rate in the
// steady state (99 % to 101 %), with a note saying why not.
func onPace(r *report) (bool, string) {
	s := &r.Steady
	if s.TargetRate <= 0 {
		return false, "no target rate (not an open-loop run)"
	}
	share := s.AchievedRate / s.TargetRate
	behind := time.Duration(s.Latency.P50 - s.Service.P50)
	switch {
	case share > 1.01:
		return false, fmt.Sprintf("%.1f%% of %.0f/s: a warm-up backlog drained inside the window (the generator had fallen behind; median wait before the call %v)", 100*share, s.TargetRate, behind)
	case share < 0.99:
		return false, fmt.Sprintf("%.1f%% of %.0f/s (median wait before the call %v)", 100*share, s.TargetRate, behind)
	}
	return true, fmt.Sprintf("%.1f%% of %.0f/s (median wait before the call %v)", 100*share, s.TargetRate, behind)
}

func judge(w io.Writer, d, g *report, h histogram, p *probeResult, obj objectives) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "load runs, steady state (reported, not judged)\tdirect\tthrough gateway")
	row := func(name string, a, b int64) {
		fmt.Fprintf(tw, "%s\t%v\t%v\n", name, time.Duration(a), time.Duration(b))
	}
	row("latency p50 (from intended start)", d.Steady.Latency.P50, g.Steady.Latency.P50)
	row("latency p99 (from intended start)", d.Steady.Latency.P99, g.Steady.Latency.P99)
	row("latency p99.9 (from intended start)", d.Steady.Latency.P999, g.Steady.Latency.P999)
	row("service p50 (the call alone)", d.Steady.Service.P50, g.Steady.Service.P50)
	row("service p99 (the call alone)", d.Steady.Service.P99, g.Steady.Service.P99)
	fmt.Fprintf(tw, "rate completed\t%.0f/s of %.0f/s\t%.0f/s of %.0f/s\n", d.Steady.AchievedRate, d.Steady.TargetRate, g.Steady.AchievedRate, g.Steady.TargetRate)
	fmt.Fprintf(tw, "allowed / denied / errors\t%d / %d / %d\t%d / %d / %d\n",
		d.Steady.Allowed, d.Steady.Denied, d.Steady.Errors, g.Steady.Allowed, g.Steady.Denied, g.Steady.Errors)
	_ = tw.Flush()
	fmt.Fprintf(w, "\nmiddleware decision time (%0.f decisions, from /metrics; bucket upper bounds): p50 <= %s, p99 <= %s, p99.9 <= %s\n",
		h.count, secs(h.quantile(0.5)), secs(h.quantile(0.99)), secs(h.quantile(0.999)))
	fmt.Fprintf(w, "probe (%d interleaved pairs, service time): direct p50 %v, through the gateway p50 %v; added per pair p50 %v, p90 %v, p99 %v\n\n",
		p.Pairs, p.Direct.P50, p.Gateway.P50, p.Added.P50, p.Added.P90, p.Added.P99)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "objective\ttarget\tmeasured\tverdict")
	missed := false
	check := func(name, target, measured string, ok bool) {
		missed = missed || !ok
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, target, measured, passWord(ok))
	}
	dec := h.quantile(0.99)
	check("decision p99 (middleware's own time)", fmt.Sprintf("< %v", obj.decisionP99), "<= "+secs(dec), dec < obj.decisionP99.Seconds())
	check("added latency p50 (probe pairs)", fmt.Sprintf("< %v", obj.addedP50), p.Added.P50.String(), p.Added.P50 < obj.addedP50)
	check("errors through the gateway", "0", fmt.Sprintf("%d (probe %d)", g.Steady.Errors, p.Errors), g.Steady.Errors == 0 && p.Errors == 0)
	gOK, gNote := onPace(g)
	dOK, dNote := onPace(d)
	verdict := passWord(gOK)
	if !gOK && !dOK {
		verdict = "INCONCLUSIVE"
	}
	fmt.Fprintf(tw, "rate sustained through the gateway\t99%% to 101%% of target\t%s\t%s\n", gNote, verdict)
	_ = tw.Flush()
	switch {
	case missed || !gOK && dOK:
		return exitMissed
	case !gOK:
		fmt.Fprintf(w, "\nthe generator could not sustain the rate straight to the upstream either (%s): the machine is the limit; run again on a quieter machine or lower -rate\n", dNote)
		return exitInconclusive
	}
	return exitPass
}

func passWord(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}
