package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// The gateway-vs-nginx file (bench/gateway-vs-nginx.sh) is in benchmark
// format: BenchmarkGateway/conns=<c>/impl=<direct|nginx|gateway>, one line
// per round, implementation and connection count, with the p50 and p99
// latency that wrk measured (p50-ns, p99-ns; benchfmt tidies them to
// p50-sec, p99-sec) and the throughput (req/s).
const (
	unitP50   = "p50-sec"
	unitP99   = "p99-sec"
	unitRPS   = "req/s"
	gwDirect  = "direct"
	gwNginx   = "nginx"
	gwGateway = "gateway"
)

// gatewayConfig are the configuration lines the script writes, shown
// under the table in this order.
var gatewayConfig = []struct{ key, label string }{
	{"gateway-setup", "Setup"},
	{"gateway-rounds", "Rounds"},
	{"nginx-version", "nginx"},
	{"wrk-version", "wrk"},
	{"gateway-command", "Command"},
}

// writeGateway writes the gateway-vs-nginx section from dir/gateway.txt:
// per connection count, each proxy's added latency (its p50 or p99 less
// the upstream's own, measured straight at it in the same round) and its
// throughput, and the ratios nginx / gateway for the added latencies
// (above 1: the gateway adds less) and gateway / nginx for throughput
// (above 1: the gateway serves more).
func writeGateway(w io.Writer, dir string) {
	fmt.Fprintln(w, "## Gateway vs nginx (limit_req), same upstream")
	fmt.Fprintln(w)
	path := filepath.Join(dir, "gateway.txt")
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(w, "Not measured in this run (%s missing: `make bench-gateway`).\n\n", filepath.Join(shortDir(dir), "gateway.txt"))
		return
	}
	d, err := parseFile(path)
	if err != nil || len(d.scenarios) == 0 {
		fmt.Fprintf(w, "Not measured in this run (%s has no BenchmarkGateway results: %v).\n\n", filepath.Join(shortDir(dir), "gateway.txt"), err)
		return
	}
	fmt.Fprintln(w, "Added latency is a proxy's latency less the upstream's own (wrk straight at the upstream in the same round), the median over the rounds of that per-round difference; a p99's difference is of the two p99s, not the p99 of a difference. Ratios: nginx added / gateway added (above 1: the gateway adds less), gateway req/s / nginx req/s (above 1: the gateway serves more).")
	fmt.Fprintln(w)
	writeGatewayTable(w, d)
	fmt.Fprintln(w)
	for _, c := range gatewayConfig {
		if v, ok := d.config[c.key]; ok {
			fmt.Fprintf(w, "- %s: %s\n", c.label, v)
		}
	}
	fmt.Fprintln(w)
}

// writeGatewayTable writes one row per connection count; it returns the
// number of rows.
func writeGatewayTable(w io.Writer, d *dataset) int {
	header(w, "scenario", "upstream p50", "upstream p99", "nginx added p50", "gateway added p50", "p50 nginx / gateway",
		"nginx added p99", "gateway added p99", "p99 nginx / gateway", "nginx req/s", "gateway req/s", "req/s gateway / nginx", "rounds")
	n := 0
	for _, sc := range d.scenarios {
		up50, ok1 := d.median(sc, gwDirect, unitP50)
		up99, ok2 := d.median(sc, gwDirect, unitP99)
		if !ok1 || !ok2 {
			continue
		}
		n++
		ng50, ng99 := added(d, sc, gwNginx, unitP50), added(d, sc, gwNginx, unitP99)
		gw50, gw99 := added(d, sc, gwGateway, unitP50), added(d, sc, gwGateway, unitP99)
		ngRPS, _ := d.median(sc, gwNginx, unitRPS)
		gwRPS, _ := d.median(sc, gwGateway, unitRPS)
		row(w, short(sc), fmtTime(up50), fmtTime(up99),
			fmtAdded(ng50), fmtAdded(gw50), posRatio(ng50, gw50),
			fmtAdded(ng99), fmtAdded(gw99), posRatio(ng99, gw99),
			fmtRPS(ngRPS), fmtRPS(gwRPS), posRatio(gwRPS, ngRPS),
			fmt.Sprint(len(d.samples[cell{sc, gwGateway}][unitP50])))
	}
	return n
}

// added is impl's median latency (unit) less the upstream's: the median
// of the per-round differences when both have one sample per round (the
// i-th sample of each is the i-th round's), else the difference of the
// medians. NaN when impl has no samples.
func added(d *dataset, sc, impl, unit string) float64 {
	a, b := d.samples[cell{sc, impl}][unit], d.samples[cell{sc, gwDirect}][unit]
	if len(a) == 0 || len(b) == 0 {
		return math.NaN()
	}
	if len(a) == len(b) {
		diff := make([]float64, len(a))
		for i := range a {
			diff[i] = a[i] - b[i]
		}
		return medianOf(diff)
	}
	return medianOf(a) - medianOf(b)
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fmtAdded formats an added latency, which noise can make negative.
func fmtAdded(sec float64) string {
	switch {
	case math.IsNaN(sec):
		return "—"
	case sec < 0:
		return "-" + fmtTime(-sec)
	}
	return "+" + fmtTime(sec)
}

func fmtRPS(v float64) string {
	if !(v > 0) {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
}

// posRatio is a / b when both are positive; an added latency that noise
// made zero or negative has no meaningful ratio.
func posRatio(a, b float64) string {
	if !(a > 0 && b > 0) {
		return "—"
	}
	return fmtRatio(a / b)
}
