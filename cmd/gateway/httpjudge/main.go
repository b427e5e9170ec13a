// Command httpjudge judges a `make run-http` run: the gateway's own
// objectives, measured where they belong, instead of the in-process
// engine's 2 ms end-to-end p99 (which a loopback HTTP round trip on a busy
// 2-core machine cannot meet, and which says nothing about the gateway).
//
// It reads two load generator reports, one run straight against the
// upstream and one through the gateway at the same rate and key stream,
// and the gateway's Prometheus /metrics, and checks:
//
//   - decision p99: the middleware's own time per request (key function
//     and limiter, from slidelimit_gateway_decision_seconds; a histogram
//     bucket's upper bound, so the figure is an upper bound);
//   - added p50: the median latency the gateway adds over the direct run
//     (gateway p50 minus direct p50, both from the intended start).
//
// End-to-end percentiles of both runs and the added latency at p90, p99
// and p99.9 are reported, not judged: on a shared machine they measure the
// scheduler as much as the gateway. Exit status: 0 every objective met,
// 1 one missed, 2 bad input.
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
		AchievedRate float64 `json:"achieved_rate"`
		Latency      struct {
			P50  int64 `json:"p50_ns"`
			P90  int64 `json:"p90_ns"`
			P99  int64 `json:"p99_ns"`
			P999 int64 `json:"p999_ns"`
		} `json:"latency"`
	} `json:"steady"`
	Pass bool `json:"pass"`
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("httpjudge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	direct := fs.String("direct", "", "loadgen report.json of the run against the upstream directly")
	through := fs.String("gateway", "", "loadgen report.json of the run through the gateway")
	metricsURL := fs.String("metrics", "", "the gateway's /metrics URL (or a file holding its text)")
	decisionP99 := fs.Duration("decision-p99", time.Millisecond, "objective: the middleware's own decision time p99 below this")
	addedP50 := fs.Duration("added-p50", 5*time.Millisecond, "objective: median latency added by the gateway below this")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *direct == "" || *through == "" || *metricsURL == "" {
		fmt.Fprintln(stderr, "httpjudge: -direct, -gateway and -metrics are required")
		return 2
	}
	d, err := readReport(*direct)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return 2
	}
	g, err := readReport(*through)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return 2
	}
	text, err := readMetrics(*metricsURL)
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return 2
	}
	h, err := parseHistogram(text, "slidelimit_gateway_decision_seconds")
	if err != nil {
		fmt.Fprintln(stderr, "httpjudge:", err)
		return 2
	}
	return judge(stdout, d, g, h, *decisionP99, *addedP50)
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

func judge(w io.Writer, d, g *report, h histogram, decisionP99, addedP50 time.Duration) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "end to end (steady state)\tdirect\tthrough gateway\tadded")
	row := func(name string, a, b int64) {
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\n", name, time.Duration(a), time.Duration(b), time.Duration(b-a))
	}
	row("latency p50", d.Steady.Latency.P50, g.Steady.Latency.P50)
	row("latency p90", d.Steady.Latency.P90, g.Steady.Latency.P90)
	row("latency p99", d.Steady.Latency.P99, g.Steady.Latency.P99)
	row("latency p99.9", d.Steady.Latency.P999, g.Steady.Latency.P999)
	fmt.Fprintf(tw, "achieved rate\t%.0f/s\t%.0f/s\t\n", d.Steady.AchievedRate, g.Steady.AchievedRate)
	fmt.Fprintf(tw, "allowed / denied / errors\t%d / %d / %d\t%d / %d / %d\t\n",
		d.Steady.Allowed, d.Steady.Denied, d.Steady.Errors, g.Steady.Allowed, g.Steady.Denied, g.Steady.Errors)
	fmt.Fprintf(tw, "loadgen's own checks\t%s\t%s\t\n", passWord(d.Pass), passWord(g.Pass))
	_ = tw.Flush()
	fmt.Fprintf(w, "\nmiddleware decision time (%0.f decisions, from /metrics; bucket upper bounds): p50 <= %s, p99 <= %s, p99.9 <= %s\n\n",
		h.count, secs(h.quantile(0.5)), secs(h.quantile(0.99)), secs(h.quantile(0.999)))

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "objective\ttarget\tmeasured\tverdict")
	pass := true
	dec := h.quantile(0.99)
	ok := dec < decisionP99.Seconds()
	pass = pass && ok
	fmt.Fprintf(tw, "decision p99 (middleware's own time)\t< %v\t<= %s\t%s\n", decisionP99, secs(dec), passWord(ok))
	added := time.Duration(g.Steady.Latency.P50 - d.Steady.Latency.P50)
	ok = added < addedP50
	pass = pass && ok
	fmt.Fprintf(tw, "added latency p50 (gateway - direct)\t< %v\t%v\t%s\n", addedP50, added, passWord(ok))
	ok = g.Steady.Errors == 0
	pass = pass && ok
	fmt.Fprintf(tw, "errors through the gateway\t0\t%d\t%s\n", g.Steady.Errors, passWord(ok))
	_ = tw.Flush()
	if !pass {
		return 1
	}
	return 0
}

func passWord(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}
