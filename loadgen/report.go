package loadgen

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("loadgen: writing JSON: %w", err)
	}
	return nil
}

// WriteHTML writes a self-contained report: the verdict first (the
// outcome, why, which figures to trust), the table of checks, the
// machine's health, two inline SVG charts (latency over time, the
// percentile curve) and the console figures. It loads nothing from
// anywhere, so it opens from disk in any browser. The markup is also
// well-formed XML.
func (r *Result) WriteHTML(w io.Writer) error {
	var verdict strings.Builder
	if err := r.WriteVerdict(&verdict); err != nil {
		return err
	}
	type row struct {
		Check
		Result, Class string
	}
	var rows []row
	for _, c := range r.Verdict {
		res := c.result(r.Health.Starved)
		rows = append(rows, row{c, res, strings.ToLower(res)})
	}
	v := r.words()
	data := struct {
		R        *Result
		V        verdictText
		Class    string
		Rows     []row
		Health   []healthRow
		Verdict  string
		Timeline template.HTML
		Curve    template.HTML
	}{r, v, strings.ToLower(string(v.Outcome)), rows, r.healthRows(), strings.TrimLeft(verdict.String(), "\n"),
		template.HTML(timelineSVG(r)), template.HTML(curveSVG(r))}
	if err := reportTmpl.Execute(w, data); err != nil {
		return fmt.Errorf("loadgen: writing HTML: %w", err)
	}
	return nil
}

// healthRow is one starvation signal of the report's health table.
type healthRow struct{ Name, Value, Threshold string }

func (r *Result) healthRows() []healthRow {
	h := r.Health
	rows := []healthRow{
		{"Go scheduler latency p99", FormatDuration(h.SchedLatencyP99Ns), ">= " + FormatDuration(int64(schedLatencyLimit))},
	}
	if r.Config.Mode == OpenLoop.String() {
		rows = append(rows, healthRow{"generator lateness p99", fmt.Sprintf("%s (senders in calls %.0f%% of the time)", FormatDuration(h.LatenessP99Ns), 100*h.SenderBusyShare),
			fmt.Sprintf(">= %s while senders in calls < %.0f%%", FormatDuration(int64(latenessLimit)), 100*idleSenders)})
	}
	rows = append(rows, healthRow{"GC stop-the-world p99: stopping / whole pause", FormatDuration(h.GCStopP99Ns) + " / " + FormatDuration(h.GCPauseP99Ns),
		fmt.Sprintf("stopping >= %s and >= half the pause", FormatDuration(int64(gcStopLimit)))})
	if h.Proc {
		rows = append(rows,
			healthRow{"CPU steal", fmt.Sprintf("%.1f%%", 100*h.StealShare), fmt.Sprintf(">= %.0f%%", 100*stealLimit)},
			healthRow{"load average (1 min)", fmt.Sprintf("%.1f on %d CPUs", h.Load1, h.CPUs), fmt.Sprintf(">= %.0f per CPU", loadPerCPU)},
			healthRow{"CPUs idle / used by other processes", fmt.Sprintf("%.0f%% / %.0f%% of all CPU time", 100*h.IdleShare, 100*h.OtherCPUShare),
				fmt.Sprintf("idle < %.0f%% and others >= %.0f%%", 100*idleLimit, 100*otherLimit)})
	} else {
		rows = append(rows, healthRow{"CPU steal, load average", "not available (no /proc)", ""})
	}
	if h.CPUPressure >= 0 {
		rows = append(rows, healthRow{"CPU pressure (some task waiting)", fmt.Sprintf("%.0f%% of the time", 100*h.CPUPressure), "reported"})
	}
	return rows
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"dur": FormatDuration,
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>slidelimit load test: {{.V.Outcome}}</title>
<style>
body { font-family: sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px; color: #222; }
pre { background: #f6f6f6; padding: 1em; white-space: pre; overflow-x: auto; max-width: 100%; box-sizing: border-box; font-size: 12px; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
.pass { color: #060; font-weight: bold; }
.fail { color: #a00; font-weight: bold; }
.starved { color: #a60; font-weight: bold; }
.info { color: #666; }
.verdict { border: 2px solid; border-radius: 6px; padding: 0.5em 1em; margin: 1em 0; }
.verdict.pass { border-color: #060; background: #eef8ee; }
.verdict.fail { border-color: #a00; background: #fbeeee; }
.verdict.inconclusive { border-color: #a60; background: #fdf5e6; }
.verdict.incomplete { border-color: #666; background: #f4f4f4; }
.verdict .outcome { font-size: 1.6em; margin: 0.2em 0; }
.verdict p, .verdict li { font-weight: normal; color: #222; }
svg { background: #fff; border: 1px solid #ddd; max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>slidelimit load test</h1>
<div class="verdict {{.Class}}">
<p class="outcome">{{.V.Outcome}}</p>
<p>{{.V.Summary}}.</p>
{{if .V.Why}}<p>{{if eq .Class "inconclusive"}}Why:{{else}}The machine was busy:{{end}}</p>
<ul>{{range .V.Why}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .V.Trust}}<p>Figures to trust (the limiter's own: percentiles of the calls themselves, which waiting for a CPU between calls does not reach):</p>
<ul>{{range .V.Trust}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{range .V.Notes}}<p>Note: {{.}}.</p>{{end}}
</div>
<p>{{.R.Config.Mode}} loop, {{.R.Config.Dist}} keys, target {{.R.Config.Target}}, started {{.R.StartedAt.Format "2006-01-02 15:04:05 UTC"}}.
{{if .R.Command}}Command: <code>{{.R.Command}}</code>{{end}}</p>
<table>
<tr><th>check</th><th>objective</th><th>measured</th><th>result</th><th>note</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td>{{.Objective}}</td><td>{{.Measured}}</td><td class="{{.Class}}">{{.Result}}</td><td>{{.Note}}</td></tr>
{{end}}</table>
<p>STARVED: missed on a machine that did not give the process the CPU it needed; such a miss makes the run inconclusive, not failed.</p>
<h2>Machine health (steady state)</h2>
<table>
<tr><th>signal</th><th>measured</th><th>starved at</th></tr>
{{range .Health}}<tr><td>{{.Name}}</td><td>{{.Value}}</td><td>{{.Threshold}}</td></tr>
{{end}}</table>
<h2>Latency over time</h2>
<p>Per interval: p50, p99, p99.9 and max of the latency{{if eq .R.Config.Mode "open"}} measured from each request's intended start{{end}}; the shaded part is the warm-up; the dashed line is the P99 objective.</p>
{{.Timeline}}
<h2>Percentile curve (steady state)</h2>
{{.Curve}}
<h2>Figures</h2>
<pre>{{.Verdict}}</pre>
</body>
</html>
`))

// chart maps data to a plotting area with a log-scale y axis.
type chart struct {
	w, h, left, right, top, bottom float64
	x0, x1                         float64
	ly0, ly1                       float64 // log10 of the y range
}

func (c chart) px(x float64) float64 {
	if c.x1 == c.x0 {
		return c.left
	}
	return c.left + (x-c.x0)/(c.x1-c.x0)*(c.w-c.left-c.right)
}

func (c chart) py(ns float64) float64 {
	v := math.Log10(math.Max(ns, 1))
	return c.h - c.bottom - (v-c.ly0)/(c.ly1-c.ly0)*(c.h-c.top-c.bottom)
}

func newChart(x0, x1, ymin, ymax float64) chart {
	ly0 := math.Floor(math.Log10(math.Max(ymin, 1)))
	ly1 := math.Ceil(math.Log10(math.Max(ymax, 10)))
	if ly1 <= ly0 {
		ly1 = ly0 + 1
	}
	return chart{w: 900, h: 360, left: 70, right: 110, top: 20, bottom: 40, x0: x0, x1: x1, ly0: ly0, ly1: ly1}
}

func (c chart) open(b *strings.Builder) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`, c.w, c.h, c.w, c.h)
	// y grid: one line per decade.
	for e := c.ly0; e <= c.ly1; e++ {
		y := c.py(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, c.left, y, c.w-c.right, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, c.left-5, y+4, decade(int64(math.Pow(10, e))))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, c.left, c.top, c.w-c.left-c.right, c.h-c.top-c.bottom)
}

// decade names a power of ten of nanoseconds for the y axis: 1µs, 100ms,
// 10s (FormatDuration's "100.00ms" is for measurements).
func decade(ns int64) string {
	for _, u := range []struct {
		ns   int64
		unit string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}} {
		if ns >= u.ns {
			return fmt.Sprintf("%d%s", ns/u.ns, u.unit)
		}
	}
	return fmt.Sprintf("%dns", ns)
}

func (c chart) line(b *strings.Builder, labels *[]endLabel, xs, ys []float64, color, label string, dashed bool) {
	if len(xs) == 0 {
		return
	}
	var pts strings.Builder
	for i := range xs {
		fmt.Fprintf(&pts, "%.1f,%.1f ", c.px(xs[i]), c.py(ys[i]))
	}
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="6,4"`
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`, color, dash, strings.TrimSpace(pts.String()))
	*labels = append(*labels, endLabel{y: c.py(ys[len(ys)-1]) + 4, color: color, text: label})
}

// endLabel names a line at its right end.
type endLabel struct {
	y           float64
	color, text string
}

// labelGap is the least vertical distance between two end labels' baselines:
// the 11 px font's line plus 3 px of air (at 12 px a descender of one label
// touched the next one's capitals in a browser).
const labelGap = 14

// drawLabels writes the end labels, moved apart where lines end close
// together (p99.9 and max often do): sorted by height, each label is pushed
// down to at least labelGap below the one above it, then the stack is moved
// up as a whole if it runs past the bottom of the chart.
func (c chart) drawLabels(b *strings.Builder, labels []endLabel) {
	sort.SliceStable(labels, func(i, j int) bool { return labels[i].y < labels[j].y })
	for i := 1; i < len(labels); i++ {
		labels[i].y = math.Max(labels[i].y, labels[i-1].y+labelGap)
	}
	if n := len(labels); n > 0 {
		if over := labels[n-1].y - (c.h - c.bottom); over > 0 {
			for i := range labels {
				labels[i].y -= over
			}
		}
	}
	for _, l := range labels {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`, c.w-c.right+5, l.y, l.color, template.HTMLEscapeString(l.text))
	}
}

func timelineSVG(r *Result) string {
	var b strings.Builder
	if len(r.Series) == 0 {
		return "<p>No data.</p>"
	}
	ymin, ymax := math.Inf(1), 0.0
	for _, p := range r.Series {
		if p.P50 > 0 {
			ymin = math.Min(ymin, float64(p.P50))
		}
		ymax = math.Max(ymax, float64(p.Max))
	}
	ymax = math.Max(ymax, float64(r.Config.ObjP99Ns))
	if math.IsInf(ymin, 1) {
		ymin = 1
	}
	last := r.Series[len(r.Series)-1].TS
	c := newChart(0, last, ymin, ymax)
	c.open(&b)
	// Shade the warm-up.
	warm := 0.0
	for _, p := range r.Series {
		if !p.Steady {
			warm = p.TS
		}
	}
	if warm > 0 {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f0f0f0"/>`, c.left, c.top, c.px(warm)-c.left, c.h-c.top-c.bottom)
	}
	for t := 0.0; t <= last; t += tickStep(last) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%gs</text>`, c.px(t), c.h-c.bottom+15, t)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time since start</text>`, (c.left+c.w-c.right)/2, c.h-5)
	xs := make([]float64, len(r.Series))
	get := func(f func(Point) int64) []float64 {
		ys := make([]float64, len(r.Series))
		for i, p := range r.Series {
			xs[i] = p.TS
			ys[i] = float64(f(p))
		}
		return ys
	}
	var labels []endLabel
	c.line(&b, &labels, xs, get(func(p Point) int64 { return p.Max }), "#d62728", "max", false)
	c.line(&b, &labels, xs, get(func(p Point) int64 { return p.P999 }), "#ff7f0e", "p99.9", false)
	c.line(&b, &labels, xs, get(func(p Point) int64 { return p.P99 }), "#1f77b4", "p99", false)
	c.line(&b, &labels, xs, get(func(p Point) int64 { return p.P50 }), "#2ca02c", "p50", false)
	obj := float64(r.Config.ObjP99Ns)
	c.line(&b, &labels, []float64{0, last}, []float64{obj, obj}, "#000", "P99 objective", true)
	c.drawLabels(&b, labels)
	b.WriteString(`</svg>`)
	return b.String()
}

func tickStep(span float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600} {
		if span/s <= 12 {
			return s
		}
	}
	return 1200
}

func curveSVG(r *Result) string {
	if len(r.Percentiles) == 0 {
		return "<p>No steady-state data.</p>"
	}
	// x is the number of nines: 0 for p0, 1 for p90, 2 for p99, ...; the
	// maximum is drawn one step past the last percentile.
	nines := func(q float64) float64 { return -math.Log10(1 - q/100) }
	var xs, ys []float64
	ymin, ymax := math.Inf(1), 0.0
	for i, q := range r.Percentiles {
		x := 0.0
		if q.Q >= 100 {
			if i > 0 {
				x = xs[i-1] + 0.5
			}
		} else {
			x = nines(q.Q)
		}
		xs = append(xs, x)
		ys = append(ys, float64(q.Ns))
		if q.Ns > 0 {
			ymin = math.Min(ymin, float64(q.Ns))
		}
		ymax = math.Max(ymax, float64(q.Ns))
	}
	ymax = math.Max(ymax, float64(r.Config.ObjP99Ns))
	if math.IsInf(ymin, 1) {
		ymin = 1
	}
	var b strings.Builder
	c := newChart(0, math.Max(xs[len(xs)-1], 1), ymin, ymax)
	c.open(&b)
	ticks := []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%", "99.99999%"}
	for n := 0; n < len(ticks) && float64(n) <= c.x1; n++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, c.px(float64(n)), c.h-c.bottom+15, ticks[n])
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">percentile (the last point is the maximum)</text>`, (c.left+c.w-c.right)/2, c.h-5)
	var labels []endLabel
	c.line(&b, &labels, xs, ys, "#1f77b4", "latency", false)
	obj := float64(r.Config.ObjP99Ns)
	c.line(&b, &labels, []float64{0, c.x1}, []float64{obj, obj}, "#000", "P99 objective", true)
	c.drawLabels(&b, labels)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="2,3"/>`, c.px(2), c.top, c.px(2), c.h-c.bottom)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="start" fill="#666">p99</text>`, c.px(2)+4, c.top+12)
	b.WriteString(`</svg>`)
	return b.String()
}

// WriteMarkdown writes the figures as a markdown fragment for RESULTS.md:
// the command, the machine, the latency percentiles, the GC figures, the
// achieved rate and the verdict rows.
func (r *Result) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	s, g, l := r.Steady, r.GC, r.Steady.Latency
	b.WriteString("## Load test\n\n")
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`", r.Command)
	}
	if r.Note != "" {
		fmt.Fprintf(&b, " (%s)", r.Note)
	}
	fmt.Fprintf(&b, "\n\nMachine: %s/%s, %s, %d CPUs, GOMAXPROCS %d, %s; run started %s.\n\n",
		r.Machine.GOOS, r.Machine.GOARCH, r.Machine.CPU, r.Machine.NumCPU, r.Machine.GOMAXPROCS, r.Machine.GoVersion,
		r.StartedAt.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Scenario: %s loop, %s keys", r.Config.Mode, r.Config.Dist)
	if r.Config.Keys > 0 {
		fmt.Fprintf(&b, " (%d keys", r.Config.Keys)
		if r.Config.ZipfS > 0 {
			fmt.Fprintf(&b, ", s = %g", r.Config.ZipfS)
		}
		b.WriteString(")")
	}
	if r.Config.Algorithm != "" {
		fmt.Fprintf(&b, ", %s limit %d per %gs", r.Config.Algorithm, r.Config.Limit, r.Config.WindowS)
	}
	fmt.Fprintf(&b, ", target %s, %d senders, %gs warm-up, %.1fs measured", r.Config.Target, r.Config.Concurrency, r.Config.WarmupS, s.DurationS)
	if r.Interrupted {
		b.WriteString(" (interrupted)")
	}
	b.WriteString(".\n\n| figure | value |\n|---|---|\n")
	if s.TargetRate > 0 {
		fmt.Fprintf(&b, "| rate achieved / target | %.0f / %.0f requests/s |\n", s.AchievedRate, s.TargetRate)
	} else {
		fmt.Fprintf(&b, "| rate achieved | %.0f requests/s |\n", s.AchievedRate)
	}
	fmt.Fprintf(&b, "| requests (allowed / denied / errors) | %d (%d / %d / %d) |\n", s.Sent, s.Allowed, s.Denied, s.Errors)
	fmt.Fprintf(&b, "| latency p50 / p90 / p99 / p99.9 / max | %s / %s / %s / %s / %s |\n",
		FormatDuration(l.P50), FormatDuration(l.P90), FormatDuration(l.P99), FormatDuration(l.P999), FormatDuration(l.Max))
	if v := s.Service; v.Count > 0 && r.Config.Mode == OpenLoop.String() {
		fmt.Fprintf(&b, "| service time (the call alone) p50 / p99 / max | %s / %s / %s |\n", FormatDuration(v.P50), FormatDuration(v.P99), FormatDuration(v.Max))
	}
	fmt.Fprintf(&b, "| GC cycles / pauses in steady state | %d / %d |\n", g.Cycles, g.Pauses)
	fmt.Fprintf(&b, "| GC pause p99 / max (bucket upper bounds) | %s / %s |\n", FormatDuration(g.PauseP99Ns), FormatDuration(g.PauseMaxNs))
	fmt.Fprintf(&b, "| GC CPU share | %.2f %% |\n", 100*g.CPUShare)
	fmt.Fprintf(&b, "| live heap start / end (growth) | %s / %s (%+.2f %%) |\n", formatBytes(g.HeapLiveStart), formatBytes(g.HeapLiveEnd), g.HeapGrowthPct)
	fmt.Fprintf(&b, "| machine health | %s |\n", r.Health.figures())
	b.WriteString("\n| check | objective | measured | result |\n|---|---|---|---|\n")
	for _, c := range r.Verdict {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.Name, c.Objective, c.Measured, c.result(r.Health.Starved))
	}
	v := r.words()
	verdict := string(v.Outcome) + "** (" + v.Summary + ")"
	if len(v.Why) > 0 {
		verdict += "; the machine: " + strings.Join(v.Why, "; ")
	}
	verdict = "**" + verdict
	if time.Duration(s.DurationS*float64(time.Second)) < soakHorizon {
		fmt.Fprintf(&b, "\nVerdict: %s. Heap growth over %.0f s is weak evidence; `make soak` measures it over 15 minutes.\n", verdict, s.DurationS)
	} else {
		fmt.Fprintf(&b, "\nVerdict: %s. Heap growth measured over %.0f s of steady state (the soak horizon).\n", verdict, s.DurationS)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
